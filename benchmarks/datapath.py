"""Data-path benchmark: one PS round trip vs a gloo all-reduce vs a memcpy, same payload.

    python -m benchmarks.datapath [--mib 16] [--iterations 20] [--ps 1]
    python benchmarks/datapath.py --ps 2

Measures, in one run on 127.0.0.1:

1. PS round trip: one worker pushes its flat float32 gradient to real PS daemon
   process(es) (`star ps`, the vector sharded over --ps servers, reached in parallel)
   and pulls the parameters back. The plan is ASGD with that single worker, so every
   push is applied at once (the optimizer step is inside the push) and the pull never
   blocks.
2. torch.distributed gloo all-reduce of the same buffer between two processes.
3. memcpy of the same buffer (torch `copy_` between two preallocated tensors).

The PS round trips and the all-reduces are interleaved (one of each per round, the
order alternating), so both see the same background load; a shared 2-core host drifts
too much for two back-to-back phases to be comparable. Every process computes with one
intra-op thread. Each figure is the median over --iterations rounds after --warmup
untimed ones. Progress goes to stderr; the last line on stdout is one JSON object.
Every child process is stopped on success, on failure, on Ctrl-C and on SIGTERM
(children also get SIGTERM if this process dies: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/datapath.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc
import torch

from star.launch import ProcessGroup, _wait_ready
from star.plan import asgd
from star.rpc.common import address
from star.rpc.ps_client import PSClient

ELEMENT_BYTES = 4
WORLD_SIZE = 2  # gloo all-reduce ranks
RPC_TIMEOUT_S = 120.0


def progress(message: str) -> None:
    print(f"[datapath] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summary(times: list[float]) -> str:
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return f"median {q[1] * 1e3:.2f} ms (p25 {q[0] * 1e3:.2f}, p75 {q[2] * 1e3:.2f}, min {min(times) * 1e3:.2f})"


# ---------------------------------------------------------------------------- memcpy


def bench_memcpy(numel: int, iterations: int, warmup: int) -> float:
    src = torch.randn(numel)
    dst = torch.empty(numel)
    times = []
    for i in range(warmup + iterations):
        t0 = time.perf_counter()
        dst.copy_(src)
        elapsed = time.perf_counter() - t0
        if i >= warmup:
            times.append(elapsed)
    if not torch.equal(dst, src):
        raise RuntimeError("memcpy produced a wrong copy")
    return statistics.median(times)


# ---------------------------------------------------------------------------- PS


class PSBench:
    """num_ps PS daemons and one ASGD worker's client; close() always stops the daemons."""

    def __init__(self, numel: int, num_ps: int, work_dir: Path):
        self.numel, self.num_ps = numel, num_ps
        logs = work_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.group = ProcessGroup(logs)
        self.client: PSClient | None = None
        self.pushes = 0

    def start(self) -> None:
        children = []
        for i in range(self.num_ps):
            ready = self.group.log_dir / f"ps{i}.ready"
            ready.unlink(missing_ok=True)
            child = self.group.spawn(
                f"ps{i}",
                ["ps", "--ps-index", str(i), "--num-ps", str(self.num_ps), "--host", "127.0.0.1", "--port", "0",
                 "--ready-file", str(ready), "--optimizer.name", "sgd", "--optimizer.lr", "0.1"],
            )
            children.append((child, ready))
        addresses = [address("127.0.0.1", _wait_ready(self.group, c, r, 60.0)) for c, r in children]
        progress(f"PS daemons serving at {', '.join(addresses)}")
        generator = torch.Generator().manual_seed(0)
        self.params = torch.randn(self.numel, generator=generator)
        self.grads = torch.randn(self.numel, generator=generator).mul_(1e-3)
        self.client = PSClient(addresses, worker_id=0)
        self.client.wait_ready(30.0)
        replies = self.client.register(self.numel)
        self.client.init_if_needed(self.params, replies, timeout_s=RPC_TIMEOUT_S)
        self.client.configure(asgd([0], epoch=1))
        self.client.pull(self.params, timeout_s=RPC_TIMEOUT_S)

    def round_trip(self) -> tuple[float, float]:
        """(push seconds, pull seconds) of one iteration."""
        assert self.client is not None
        t0 = time.perf_counter()
        replies = self.client.push(self.grads, iteration=self.pushes, timeout_s=RPC_TIMEOUT_S)
        t1 = time.perf_counter()
        self.client.pull(self.params, timeout_s=RPC_TIMEOUT_S)
        t2 = time.perf_counter()
        self.pushes += 1
        if any(r.status != "applied" for r in replies):
            raise RuntimeError(f"ASGD push was not applied at once: {[r.status for r in replies]}")
        return t1 - t0, t2 - t1

    def check(self) -> None:
        assert self.client is not None
        versions = [v.version for v in self.client.views]
        if versions != [self.pushes] * self.num_ps:
            raise RuntimeError(f"expected every PS at version {self.pushes}, got {versions}")
        if not bool(torch.isfinite(self.params).all()):
            raise RuntimeError("pulled parameters are not finite")

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self.group.shutdown(grace_s=5.0)


# ---------------------------------------------------------------------------- gloo


def gloo_rank_main(rank: int, port: int, numel: int, parent_pid: int) -> None:
    """One all-reduce rank (a child process: `--gloo-rank R`).

    Reads commands on stdin: "go" runs one timed all-reduce and answers its seconds on
    stdout; "check" answers "ok" when the last all-reduce summed correctly; "end" (or EOF) exits.
    """
    import datetime

    import torch.distributed as dist

    # Die with the benchmark (PR_SET_PDEATHSIG), set in the child itself: a Popen preexec_fn is not
    # safe once the parent has other threads (gRPC, OpenMP).
    import ctypes

    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)
    if os.getppid() != parent_pid:
        raise SystemExit("datapath: parent exited before this gloo rank started")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops this rank
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD_SIZE,
        timeout=datetime.timedelta(seconds=RPC_TIMEOUT_S),
    )
    try:
        buffer = torch.empty(numel)
        for line in sys.stdin:
            command = line.strip()
            if command == "end":
                break
            if command == "check":
                print("ok" if bool((buffer == float(WORLD_SIZE)).all()) else "wrong sum", flush=True)
                continue
            if command != "go":
                raise SystemExit(f"datapath gloo rank {rank}: unknown command {command!r}")
            buffer.fill_(1.0)  # the same finite values every time (untimed)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buffer)
            elapsed = time.perf_counter() - t0
            print(repr(elapsed), flush=True)
    finally:
        dist.destroy_process_group()


class GlooBench:
    """WORLD_SIZE gloo ranks driven over pipes; close() always stops them."""

    def __init__(self, numel: int):
        self.numel = numel
        self.ranks: list[subprocess.Popen] = []

    def start(self) -> None:
        port = free_port()
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        for rank in range(WORLD_SIZE):
            self.ranks.append(
                subprocess.Popen(
                    [sys.executable, str(Path(__file__).resolve()), "--gloo-rank", str(rank), "--gloo-port", str(port),
                     "--numel", str(self.numel), "--parent-pid", str(os.getpid())],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                )
            )

    def all_reduce(self) -> float:
        """Seconds of one all-reduce: it is done when the slower rank is done."""
        for p in self.ranks:
            self._send(p, "go")
        return max(float(self._read(p)) for p in self.ranks)

    def check(self) -> None:
        for p in self.ranks:
            self._send(p, "check")
        answers = [self._read(p).strip() for p in self.ranks]
        if answers != ["ok"] * len(self.ranks):
            raise RuntimeError(f"gloo all-reduce check failed: {answers}")

    def close(self, grace_s: float = 10.0) -> None:
        """Ask each rank to exit; SIGTERM (then SIGKILL) what is still running after grace_s."""
        for p in self.ranks:
            if p.poll() is None:
                try:
                    self._send(p, "end")
                except (BrokenPipeError, OSError):
                    pass
        deadline = time.monotonic() + grace_s
        codes = []
        for p in self.ranks:
            try:
                codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=3.0)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                codes.append(p.returncode)
            for stream in (p.stdin, p.stdout):
                if stream is not None:
                    stream.close()
        self.exit_codes = codes

    @staticmethod
    def _send(p: subprocess.Popen, command: str) -> None:
        assert p.stdin is not None
        p.stdin.write(command + "\n")
        p.stdin.flush()

    @staticmethod
    def _read(p: subprocess.Popen, timeout_s: float = RPC_TIMEOUT_S + 10.0) -> str:
        assert p.stdout is not None
        ready, _, _ = select.select([p.stdout], [], [], timeout_s)
        line = p.stdout.readline() if ready else ""
        if not line:
            code = p.poll()
            raise RuntimeError(f"gloo rank gave no answer (exit code {code}); see its messages above")
        return line


# ---------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=float, default=16.0, help="payload size in MiB of float32 (default 16)")
    p.add_argument("--iterations", type=int, default=20, help="timed rounds per measurement (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    p.add_argument("--ps", type=int, default=1, help="parameter servers the vector is sharded over (default 1)")
    # internal: one gloo rank
    p.add_argument("--gloo-rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--gloo-port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--numel", type=int, help=argparse.SUPPRESS)
    p.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    return p


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


def run(numel: int, num_ps: int, iterations: int, warmup: int) -> dict:
    memcpy_s = bench_memcpy(numel, iterations, warmup)
    progress(f"memcpy: {memcpy_s * 1e3:.3f} ms ({numel * ELEMENT_BYTES / memcpy_s / 1e9:.2f} GB/s)")
    with tempfile.TemporaryDirectory(prefix="star-datapath-") as tmp:
        gloo, ps = GlooBench(numel), PSBench(numel, num_ps, Path(tmp))
        finished = False
        try:
            # Children first, before this process has gRPC threads.
            gloo.start()
            ps.start()
            pushes, pulls, round_trips, all_reduces = [], [], [], []
            for i in range(warmup + iterations):
                if i % 2:
                    all_reduce = gloo.all_reduce()
                    push, pull = ps.round_trip()
                else:
                    push, pull = ps.round_trip()
                    all_reduce = gloo.all_reduce()
                if i >= warmup:
                    pushes.append(push)
                    pulls.append(pull)
                    round_trips.append(push + pull)
                    all_reduces.append(all_reduce)
            ps.check()
            gloo.check()
            finished = True
        finally:
            ps.close()
            # After an error a rank may sit in a collective its peer never joins: do not wait for it.
            gloo.close(grace_s=10.0 if finished else 1.0)
        if any(gloo.exit_codes):
            raise RuntimeError(f"gloo ranks exited with codes {gloo.exit_codes}")
    progress(f"PS x{num_ps} push: {summary(pushes)}")
    progress(f"PS x{num_ps} pull: {summary(pulls)}")
    progress(f"PS x{num_ps} round trip: {summary(round_trips)}")
    progress(f"gloo all-reduce ({WORLD_SIZE} ranks): {summary(all_reduces)}")
    ps_s, gloo_s = statistics.median(round_trips), statistics.median(all_reduces)
    return {
        "bytes": numel * ELEMENT_BYTES,
        "ps_round_trip_s": round(ps_s, 6),
        "gloo_allreduce_s": round(gloo_s, 6),
        "memcpy_s": round(memcpy_s, 6),
        "ratio_ps_over_gloo": round(ps_s / gloo_s, 3),
        "ps": num_ps,
        "iterations": iterations,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.gloo_rank is not None:
        gloo_rank_main(args.gloo_rank, args.gloo_port, args.numel, args.parent_pid)
        return 0
    if args.mib <= 0 or args.iterations < 1 or args.warmup < 0 or args.ps < 1:
        print("datapath: --mib must be > 0, --iterations >= 1, --warmup >= 0, --ps >= 1", file=sys.stderr)
        return 2
    numel = max(1, int(args.mib * 1024 * 1024) // ELEMENT_BYTES)
    if args.ps > numel:
        print(f"datapath: --ps {args.ps} exceeds the {numel} elements of the payload", file=sys.stderr)
        return 2
    # One intra-op thread everywhere, as the PS daemons (--threads 1) and the gloo ranks run: on a
    # 2-core host a second OpenMP thread only contends with the other processes (a 16 MiB copy_
    # measured ~12 ms with 2 threads vs ~0.7 ms with 1 here).
    torch.set_num_threads(1)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    progress(f"payload {numel * ELEMENT_BYTES} bytes ({numel} float32), {args.iterations} rounds after {args.warmup} warm-up, "
             f"{os.cpu_count()} CPUs")
    try:
        result = run(numel, args.ps, args.iterations, args.warmup)
    except KeyboardInterrupt:
        progress("interrupted; every child process stopped")
        return 130
    except grpc.RpcError as exc:
        progress(f"failed: PS RPC error {exc.code()}: {exc.details()}")  # children already stopped
        return 1
    except Exception as exc:  # noqa: BLE001 - one clear line, children already stopped
        progress(f"failed: {type(exc).__name__}: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
