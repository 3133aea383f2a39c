"""Load benchmark: many light workers against real PS daemons for a bounded time.

    python -m benchmarks.load [--duration-s 30] [--workers 32] [--ps 2] [--kib 256]

Why: a PS must serve a crowd for hours without errors or creeping memory. This runs
--workers worker threads (each its own PSClient: its own channels, pull record and pushes)
against --ps real `star ps` processes on 127.0.0.1, authenticated with a job token as a
launched job is. The plan is ASGD, so no worker waits on another and every error is a
real failure. Each worker loops pull -> push of a --kib flat float32 vector (sharded over
the PSs) with no compute, as fast as it can.

Reports push and pull latency p50/p99 (per whole round trip to every PS), the error
count, and each PS's resident memory (psutil) after --warmup-s and at the end, with the
growth between. Goal: zero errors and under 10% RSS growth after warm-up. The last line
on stdout is one JSON object. Every PS is stopped on success, failure and Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/load.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc
import psutil
import torch

from star.launch import ProcessGroup, _wait_ready
from star.plan import asgd
from star.rpc.common import address
from star.rpc.ps_client import PSClient
from star.rpc.security import TOKEN_ENV, Credentials

RPC_TIMEOUT_S = 30.0
RSS_GROWTH_GOAL = 0.10


class Worker(threading.Thread):
    """One light worker: pull, push, record latencies and errors until told to stop."""

    def __init__(self, worker_id: int, addresses: list[str], numel: int, credentials: Credentials, stop: threading.Event):
        super().__init__(name=f"load-worker{worker_id}", daemon=True)
        self.client = PSClient(addresses, worker_id=worker_id, credentials=credentials)
        self.params = torch.empty(numel)
        self.grads = torch.randn(numel, generator=torch.Generator().manual_seed(worker_id)) * 1e-4
        self.stop = stop
        self.pull_s: list[tuple[float, float]] = []  # (finished at, seconds)
        self.push_s: list[tuple[float, float]] = []
        self.errors: Counter[str] = Counter()
        self.iteration = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                t0 = time.monotonic()
                self.client.pull(self.params, timeout_s=RPC_TIMEOUT_S)
                t1 = time.monotonic()
                self.client.push(self.grads, self.iteration, timeout_s=RPC_TIMEOUT_S, batch_size=1)
                t2 = time.monotonic()
            except grpc.RpcError as exc:
                self.errors[f"{exc.code().name}: {exc.details()}"] += 1
                continue
            self.pull_s.append((t1, t1 - t0))
            self.push_s.append((t2, t2 - t1))
            self.iteration += 1


def percentiles(samples: list[float]) -> tuple[float, float]:
    if len(samples) < 2:
        value = samples[0] if samples else float("nan")
        return value, value
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return statistics.median(samples), cuts[98]


def rss_bytes(pids: list[int]) -> list[int]:
    return [psutil.Process(pid).memory_info().rss for pid in pids]


def start_servers(group: ProcessGroup, count: int, logs: Path) -> tuple[list[str], list[int]]:
    children = []
    for i in range(count):
        ready = logs / f"ps{i}.ready"
        child = group.spawn(f"ps{i}", ["ps", "--ps-index", str(i), "--num-ps", str(count), "--optimizer.name", "sgd",
                                        "--optimizer.lr", "0.01", "--ready-file", str(ready)])
        children.append((child, ready))
    addresses = [address("127.0.0.1", _wait_ready(group, c, r, 60.0)) for c, r in children]
    return addresses, [c.process.pid for c, _ in children]


def run(args: argparse.Namespace) -> dict:
    numel = args.kib * 1024 // 4
    token = secrets.token_hex(32)
    credentials = Credentials(token=token)
    with tempfile.TemporaryDirectory(prefix="star-load-") as tmp:
        logs = Path(tmp)
        group = ProcessGroup(logs, env={TOKEN_ENV: token})
        stop = threading.Event()
        workers: list[Worker] = []
        try:
            addresses, pids = start_servers(group, args.ps, logs)
            setup = PSClient(addresses, worker_id=0, credentials=credentials)
            setup.wait_ready(30)
            setup.init_if_needed(torch.zeros(numel), setup.register(numel))
            setup.configure(asgd(range(args.workers), epoch=1))
            workers = [Worker(w, addresses, numel, credentials, stop) for w in range(args.workers)]
            for worker in workers:
                worker.client.register(numel)
            started = time.monotonic()
            for worker in workers:
                worker.start()
            time.sleep(args.warmup_s)
            warm_at = time.monotonic()
            rss_warm = rss_bytes(pids)
            time.sleep(max(0.0, args.duration_s - args.warmup_s))
            stop.set()
            for worker in workers:
                worker.join(timeout=RPC_TIMEOUT_S + 5)
            rss_end = rss_bytes(pids)
            elapsed = time.monotonic() - started
            stats = setup.stats()
            setup.close()
        finally:
            stop.set()
            for worker in workers:
                worker.client.close()
            group.shutdown(grace_s=5.0)

    def measured(series: str) -> list[float]:
        return [s for w in workers for t, s in getattr(w, series) if t >= warm_at]

    pull_p50, pull_p99 = percentiles(measured("pull_s"))
    push_p50, push_p99 = percentiles(measured("push_s"))
    errors: Counter[str] = Counter()
    for worker in workers:
        errors.update(worker.errors)
    rounds = sum(w.iteration for w in workers)
    growth = [(end - warm) / warm for warm, end in zip(rss_warm, rss_end)]
    return {
        "workers": args.workers,
        "ps": args.ps,
        "payload_kib": args.kib,
        "duration_s": round(elapsed, 1),
        "warmup_s": args.warmup_s,
        "rounds": rounds,
        "rounds_per_s": round(rounds / elapsed, 1),
        "pull_ms_p50": round(pull_p50 * 1e3, 2),
        "pull_ms_p99": round(pull_p99 * 1e3, 2),
        "push_ms_p50": round(push_p50 * 1e3, 2),
        "push_ms_p99": round(push_p99 * 1e3, 2),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors.most_common(5)),
        "ps_versions": [s.version for s in stats],
        "ps_accepted_applied": [(s.accepted, s.applied) for s in stats],
        "rss_mib_after_warmup": [round(r / 2**20, 1) for r in rss_warm],
        "rss_mib_at_end": [round(r / 2**20, 1) for r in rss_end],
        "rss_growth_pct": [round(g * 100, 2) for g in growth],
        "goal_met": not errors and all(g < RSS_GROWTH_GOAL for g in growth),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=float, default=30.0, help="total seconds of load, warm-up included")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="seconds before latencies and the first RSS sample count")
    parser.add_argument("--workers", type=int, default=32, help="worker threads, each with its own client")
    parser.add_argument("--ps", type=int, default=2, help="PS processes the vector is sharded over")
    parser.add_argument("--kib", type=int, default=256, help="flat float32 vector size per worker, KiB")
    args = parser.parse_args(argv)
    if not 0 <= args.warmup_s < args.duration_s:
        parser.error(f"--warmup-s {args.warmup_s} must be in [0, --duration-s {args.duration_s})")
    torch.set_num_threads(1)
    result = run(args)
    print(f"load: {result['workers']} workers x {result['ps']} PS, {result['payload_kib']} KiB vector, "
          f"{result['duration_s']} s ({result['warmup_s']} s warm-up), {result['rounds']} pull+push rounds "
          f"({result['rounds_per_s']}/s)")
    print(f"pull latency: p50 {result['pull_ms_p50']} ms, p99 {result['pull_ms_p99']} ms")
    print(f"push latency: p50 {result['push_ms_p50']} ms, p99 {result['push_ms_p99']} ms")
    print(f"errors: {result['errors']} {result['error_kinds'] or ''}")
    for i, (warm, end, growth) in enumerate(zip(result["rss_mib_after_warmup"], result["rss_mib_at_end"], result["rss_growth_pct"])):
        print(f"ps{i} RSS: {warm} MiB after warm-up, {end} MiB at end, growth {growth:+.2f}%")
    print(f"goal (0 errors, RSS growth < {RSS_GROWTH_GOAL:.0%}): {'met' if result['goal_met'] else 'NOT met'}")
    print(json.dumps(result))
    return 0 if result["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
