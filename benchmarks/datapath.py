"""Data-path benchmark: N workers' PS push+pull vs an N-rank gloo all-reduce vs a memcpy, same bytes.

    python -m benchmarks.datapath                        # 1 worker, 1 PS, 16 MiB (2-rank gloo)
    python -m benchmarks.datapath --workers 4 --ps 2 --bytes 64MiB --transport shm
    python -m benchmarks.datapath --workers 4 --ps 2 --bytes 16MiB --netns --wire bf16
    python -m benchmarks.datapath --workers 4 --ps 2 --bytes 16MiB --netns --transport grpc

Measures, in one run:

1. PS rounds: --workers worker processes (benchmarks.datapath_procs) each push their flat float32
   gradient to --ps real PS daemons (`star ps`, the vector sharded over them) and pull the
   parameters back, all at once, under an SSGD plan over every worker (each pull waits for the
   round: the synchronous barrier an all-reduce also has). A round takes as long as its slowest
   worker. Pushes carry a batch size, as a training worker's do, so each round includes the
   PS's gradient-noise estimate (from 26 Nov; earlier figures left it out). --transport picks how payloads move (auto: shared memory with a co-located PS, else the
   PS's socket channel, raw bytes on TCP; socket: the socket channel even on one host; grpc: gRPC
   chunks), --wire their dtype across hosts (bf16 halves the bytes; the PS master stays fp32).
2. torch.distributed gloo all-reduce of the same bytes among max(2, --workers) ranks.
3. memcpy of the same buffer (torch `copy_` between two preallocated tensors).

--netns puts every PS and every worker (and gloo rank r with worker r) on a host of its own: network
namespaces joined by a bridge (benchmarks.netns; needs root), so bytes cross a veth link, not
loopback, and shared memory is never used: auto and socket take the PSs' socket channels, grpc gRPC. PS rounds and all-reduces are interleaved (one of each per
round, the order alternating) so both see the same background load. Each round starts at one instant of
the shared monotonic clock, a little after the driver announced it, for every worker (or every gloo rank)
alike, and lasts until the last of them finishes: neither side is timed from a barrier of its own, and
neither is charged for the driver's staggered messages. Every process computes with one intra-op thread.
--doorbell off makes the workers send their shared-memory headers by the PushShm/PullShm RPCs instead of
the PS's doorbell socket (star/rpc/doorbell.py), for comparison; --grad-segment off makes them copy
their gradient into each PS's mailbox instead of leaving it in their shared gradient segment. Figures are medians over --iterations rounds after --warmup untimed ones. Progress
goes to stderr; the last line on stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/datapath.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from benchmarks.datapath_procs import Processes, die_with_parent, gloo_rank_main, ps_worker_main

ELEMENT_BYTES = 4
START_LEAD_S = 0.02  # a round starts this long after the driver sends "go": every process is waiting by then
WIRES = {"fp32": "float32", "bf16": "bfloat16"}


def progress(message: str) -> None:
    print(f"[datapath] {message}", file=sys.stderr, flush=True)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def summary(times: list[float]) -> str:
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return f"median {q[1] * 1e3:.2f} ms (p25 {q[0] * 1e3:.2f}, p75 {q[2] * 1e3:.2f}, min {min(times) * 1e3:.2f})"


def parse_bytes(text: str) -> int:
    """"16MiB", "4 MiB", "1GiB", "65536": a positive whole number of float32 elements' bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB|B)?\s*", text)
    if not match:
        raise ValueError(f"--bytes {text!r} is not a size such as 16MiB")
    scale = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "B": 1, None: 1}[match[2]]
    value = int(float(match[1]) * scale)
    if value < ELEMENT_BYTES:
        raise ValueError(f"--bytes {text!r} is smaller than one float32")
    return value


def bench_memcpy(numel: int, iterations: int, warmup: int) -> float:
    src, dst = torch.randn(numel), torch.empty(numel)
    times = []
    for i in range(warmup + iterations):
        t0 = time.perf_counter()
        dst.copy_(src)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    if not torch.equal(dst, src):
        raise RuntimeError("memcpy produced a wrong copy")
    return statistics.median(times)


def _rounds(procs: Processes, args: argparse.Namespace, numel: int, addresses: list[str], gloo_world: int,
            gloo_node: int) -> dict:
    # Namespaces stand for separate hosts, but they share this machine's /dev/shm: auto would find it, where
    # another host's worker would take the socket channel.
    transport = ("grpc" if args.transport == "grpc" else "socket") if procs.prefixes else args.transport
    workers = [procs.driver(f"worker{w}", args.ps + w, ["--role", "worker", "--rank", str(w), "--world", str(args.workers),
                                                             "--addresses", ",".join(addresses), "--numel", str(numel),
                                                             "--transport", transport, "--wire", args.wire,
                                                             "--doorbell", args.doorbell, "--grad-segment", args.grad_segment])
               for w in range(args.workers)]
    if workers[0].read() != "ready":
        raise RuntimeError("worker 0 did not get ready")
    for w in workers[1:]:
        if w.read() != "ready":
            raise RuntimeError(f"{w.name} did not get ready")
    for w in workers:
        w.send("pull")
    for w in workers:
        w.read()
    master = f"{procs.host(gloo_node)}:{free_port(procs.host(gloo_node)) if not procs.prefixes else 29500 + os.getpid() % 1000}"
    ranks = [procs.driver(f"gloo{r}", args.ps + r,
                          ["--role", "gloo", "--rank", str(r), "--world", str(gloo_world), "--master", master, "--numel", str(numel)])
             for r in range(gloo_world)]
    for r in ranks:
        if r.read() != "ready":
            raise RuntimeError(f"{r.name} did not get ready")

    def go(drivers) -> None:
        command = f"go {time.monotonic() + START_LEAD_S!r}"
        for driver in drivers:
            driver.send(command)

    segments: set[str] = set()

    def ps_round() -> tuple[float, float, set[str], set[str]]:
        go(workers)
        answers = [w.read().split() for w in workers]
        push = max(float(a[0]) for a in answers)
        total = max(float(a[0]) + float(a[1]) for a in answers)
        segments.update(a[4] for a in answers)
        return push, total, {a[2] for a in answers}, {a[3] for a in answers}

    def all_reduce() -> float:
        go(ranks)
        return max(float(r.read()) for r in ranks)

    pushes, rounds, reduces, used, headers = [], [], [], set(), set()
    for i in range(args.warmup + args.iterations):
        if i % 2:
            reduce_s = all_reduce()
            push_s, round_s, transports, header_routes = ps_round()
        else:
            push_s, round_s, transports, header_routes = ps_round()
            reduce_s = all_reduce()
        used |= transports
        headers |= header_routes
        if i >= args.warmup:
            pushes.append(push_s)
            rounds.append(round_s)
            reduces.append(reduce_s)
    for driver in (*workers, *ranks):
        driver.send("check")
        answer = driver.read()
        if answer != "ok":
            raise RuntimeError(f"{driver.name} check failed: {answer}")
    return {"pushes": pushes, "rounds": rounds, "reduces": reduces, "transport": used.pop() if len(used) == 1 else "mixed",
            "headers": headers.pop() if len(headers) == 1 else "mixed", "gloo_world": gloo_world,
            "grad_segment": segments.pop() if len(segments) == 1 else "mixed"}


def run(args: argparse.Namespace, numel: int) -> dict:
    memcpy_s = bench_memcpy(numel, args.iterations, args.warmup)
    progress(f"memcpy: {memcpy_s * 1e3:.3f} ms ({numel * ELEMENT_BYTES / memcpy_s / 1e9:.2f} GB/s)")
    gloo_world = max(2, args.workers)
    with tempfile.TemporaryDirectory(prefix="star-datapath-") as tmp, contextlib.ExitStack() as stack:
        prefixes = hosts = None
        if args.netns:
            from benchmarks.netns import NetNamespaces, unavailable

            why = unavailable()
            if why:
                raise RuntimeError(f"--netns: {why}")
            nodes = args.ps + max(args.workers, gloo_world)
            net = stack.enter_context(NetNamespaces(nodes=nodes))
            # gloo finds its interface from the hostname, which resolves outside the namespaces: name it.
            prefixes = [["ip", "netns", "exec", net.name(n), "env", "GLOO_SOCKET_IFNAME=eth0"] for n in range(nodes)]
            hosts = [net.address(n) for n in range(nodes)]
        procs = Processes(Path(tmp), prefixes, hosts)
        finished = False
        try:
            addresses = procs.start_ps(args.ps)
            progress(f"PS daemons serving at {', '.join(addresses)}")
            figures = _rounds(procs, args, numel, addresses, gloo_world, args.ps)
            finished = True
        finally:
            codes = procs.close(grace_s=10.0 if finished else 1.0)  # a failed gloo rank may wait forever on its peers
        if any(codes):
            raise RuntimeError(f"drivers exited with codes {codes}")
    label = f"{args.workers} worker(s) x {args.ps} PS ({figures['transport']}, {args.wire}"
    label += f", headers by {figures['headers']}, gradient segment {figures['grad_segment']})" \
        if figures["transport"] == "shm" else ")"
    progress(f"PS push ({label}): {summary(figures['pushes'])}")
    progress(f"PS push+pull round ({label}): {summary(figures['rounds'])}")
    progress(f"gloo all-reduce ({gloo_world} ranks): {summary(figures['reduces'])}")
    ps_s, gloo_s = statistics.median(figures["rounds"]), statistics.median(figures["reduces"])
    payload = numel * ELEMENT_BYTES
    return {
        "bytes": payload,
        "workers": args.workers,
        "ps": args.ps,
        "transport": figures["transport"],
        "wire": args.wire,
        "headers": figures["headers"] if figures["transport"] in ("shm", "socket") else "grpc",
        "grad_segment": figures["grad_segment"],  # "on": every push was summed from the workers' segments
        "netns": args.netns,
        "gloo_ranks": gloo_world,
        "ps_round_trip_s": round(ps_s, 6),
        "gloo_allreduce_s": round(gloo_s, 6),
        "memcpy_s": round(memcpy_s, 6),
        "ps_gbps_per_worker": round(payload / ps_s / 1e9, 3),
        "gloo_gbps_per_worker": round(payload / gloo_s / 1e9, 3),
        "ratio_ps_over_gloo": round(ps_s / gloo_s, 3),
        "iterations": args.iterations,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.datapath", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bytes", default=None, help="payload per worker, e.g. 4MiB, 16MiB, 64MiB (default 16MiB)")
    p.add_argument("--mib", type=float, default=None, help="payload in MiB (the older spelling of --bytes)")
    p.add_argument("--workers", type=int, default=1, help="workers pushing and pulling at once (default 1)")
    p.add_argument("--ps", type=int, default=1, help="parameter servers the vector is sharded over (default 1)")
    p.add_argument("--transport", choices=("auto", "shm", "socket", "grpc"), default="auto",
                   help="worker<->PS payloads: auto (shared memory where co-located, else the socket channel), shm, "
                        "socket or grpc (default auto)")
    p.add_argument("--wire", choices=tuple(WIRES), default="fp32", help="payload dtype across hosts (default fp32)")
    p.add_argument("--doorbell", choices=("on", "off"), default="on",
                   help="shared-memory headers by the PS's doorbell socket (on) or by gRPC calls (off) (default on)")
    p.add_argument("--grad-segment", choices=("on", "off"), default="on",
                   help="same-host workers keep their gradient in a shared-memory segment that the PSs sum from, "
                        "as CPU training workers do (on), or copy it into each PS's mailbox (off) (default on)")
    p.add_argument("--netns", action="store_true", help="every process on a host of its own (network namespaces; root)")
    p.add_argument("--iterations", type=int, default=20, help="timed rounds per measurement (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    # internal: one driver process
    p.add_argument("--role", choices=("worker", "gloo"), help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, help=argparse.SUPPRESS)
    p.add_argument("--addresses", help=argparse.SUPPRESS)
    p.add_argument("--master", help=argparse.SUPPRESS)
    p.add_argument("--numel", type=int, help=argparse.SUPPRESS)
    p.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    return p


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.role is not None:
        die_with_parent(args.parent_pid)
        if args.role == "worker":
            ps_worker_main(args.rank, args.world, args.addresses.split(","), args.numel, args.transport, WIRES[args.wire],
                           doorbell=args.doorbell == "on", grad_segment=args.grad_segment == "on")
        else:
            gloo_rank_main(args.rank, args.world, args.master, args.numel)
        return 0
    try:
        payload = parse_bytes(args.bytes) if args.bytes else int((args.mib if args.mib is not None else 16.0) * (1 << 20))
    except ValueError as exc:
        print(f"datapath: {exc}", file=sys.stderr)
        return 2
    numel = max(1, payload // ELEMENT_BYTES)
    if args.iterations < 1 or args.warmup < 0 or args.ps < 1 or args.workers < 1 or args.ps > numel:
        print("datapath: --iterations >= 1, --warmup >= 0, --workers >= 1 and 1 <= --ps <= elements are required", file=sys.stderr)
        return 2
    if args.netns and args.transport == "shm":
        print("datapath: --transport shm needs one host: it cannot be combined with --netns", file=sys.stderr)
        return 2
    # One intra-op thread everywhere, as the PS daemons (--threads 1) and the gloo ranks run: on a
    # 2-core host a second OpenMP thread only contends with the other processes.
    torch.set_num_threads(1)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    progress(f"payload {numel * ELEMENT_BYTES} bytes ({numel} float32) per worker, {args.workers} worker(s), {args.ps} PS, "
             f"transport {args.transport}, wire {args.wire}{', netns' if args.netns else ''}; {args.iterations} rounds after "
             f"{args.warmup} warm-up, {os.cpu_count()} CPUs")
    try:
        result = run(args, numel)
    except KeyboardInterrupt:
        progress("interrupted; every child process stopped")
        return 130
    except Exception as exc:  # noqa: BLE001 - one clear line, children already stopped
        progress(f"failed: {type(exc).__name__}: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
