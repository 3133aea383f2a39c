"""Load benchmark: many light workers against real PS daemons for a bounded time.

    python -m benchmarks.load [--duration-s 60] [--warmup-s 5] [--workers 32] [--ps 2] [--kib 256]

Why: a PS must serve a crowd for hours without errors or creeping memory. This runs
--workers worker threads (each its own PSClient: its own channels, pull record and pushes)
against --ps real `star ps` processes on 127.0.0.1, authenticated with a job token as a
launched job is. The plan is ASGD, so no worker waits on another and every error is a
real failure. Each worker loops pull -> push of a --kib flat float32 vector (sharded over
the PSs) with no compute, as fast as it can.

The workers are THREADS OF ONE CLIENT PROCESS (one GIL), on the same cores as the PS
processes: the latencies below include client-side contention (GIL, the client's own
serialisation, the cores the PSs also need), so they bound PS service time from above.

Reports push and pull latency p50/p99 over the measured window (per whole round trip to
every PS), errors of every kind (gRPC failures and any other exception a worker thread
raised, with its text), worker threads that died or hung, and each PS's resident memory
(psutil) sampled every --rss-interval-s during the measured window, under load: after
warm-up, max, last, growth = (last - after warm-up) / after warm-up, and the least-squares
slope. Goal: zero errors, no dead thread, under 10% RSS growth after warm-up. The last line
on stdout is one JSON object. Every PS is stopped on success, failure and Ctrl-C.
The measured window (--duration-s, after --warmup-s) defaults to 60 s: long enough for a
leak of a few KiB per round to show. It saturates every core, and the CI never runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/load.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc
import psutil
import torch

from star.plan import asgd
from star.processes import ProcessGroup, _wait_ready
from star.rpc.common import address
from star.rpc.ps_client import PSClient
from star.rpc.security import TOKEN_ENV, Credentials

RPC_TIMEOUT_S = 30.0
RSS_GROWTH_GOAL = 0.10
ERROR_BACKOFF_S = 0.01  # after an unexpected exception: a worker that fails at once every time must not spin


class Worker(threading.Thread):
    """One light worker: pull, push, record latencies and errors until told to stop. Never dies silently:
    every exception is counted with its text, and one that escapes the loop is kept in `died`."""

    def __init__(self, worker_id: int, addresses: list[str], numel: int, credentials: Credentials, stop: threading.Event):
        super().__init__(name=f"load-worker{worker_id}", daemon=True)
        self.client = PSClient(addresses, worker_id=worker_id, credentials=credentials)
        self.params = torch.empty(numel)
        self.grads = torch.randn(numel, generator=torch.Generator().manual_seed(worker_id)) * 1e-4
        self.stop = stop
        self.pull_s: list[tuple[float, float]] = []  # (finished at, seconds)
        self.push_s: list[tuple[float, float]] = []
        self.errors: Counter[str] = Counter()  # "grpc CODE: details" or "ExceptionType: text"
        self.error_at: list[float] = []  # when each error happened (to count the measured window's)
        self.died: str | None = None  # the exception that ended the thread, if one did
        self.iteration = 0

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - recorded and reported, never silent
            self.died = f"{type(exc).__name__}: {exc}"
            self.errors[f"thread died: {self.died}"] += 1
            self.error_at.append(time.monotonic())
            traceback.print_exc()

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                t0 = time.monotonic()
                self.client.pull(self.params, timeout_s=RPC_TIMEOUT_S)
                t1 = time.monotonic()
                self.client.push(self.grads, self.iteration, timeout_s=RPC_TIMEOUT_S, batch_size=1)
                t2 = time.monotonic()
            except grpc.RpcError as exc:
                self.errors[f"grpc {exc.code().name}: {exc.details()}"] += 1
                self.error_at.append(time.monotonic())
                continue
            except Exception as exc:  # noqa: BLE001 - a client bug is an error of the run, counted with its text
                self.errors[f"{type(exc).__name__}: {exc}"] += 1
                self.error_at.append(time.monotonic())
                time.sleep(ERROR_BACKOFF_S)
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


def rss_bytes(pids: list[int]) -> list[int | None]:
    """Each process's resident set size; None for one that is gone."""
    sizes: list[int | None] = []
    for pid in pids:
        try:
            sizes.append(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            sizes.append(None)
    return sizes


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute; 0 with fewer than two distinct times."""
    if len(points) < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / len(points)
    mean_v = sum(v for _, v in points) / len(points)
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return 60.0 * sum((t - mean_t) * (v - mean_v) for t, v in points) / var


def rss_summary(samples: list[tuple[float, list[int | None]]], count: int) -> list[dict]:
    """Per PS: RSS after warm-up (the first sample), max and last under load, growth and slope."""
    out = []
    for i in range(count):
        series = [(t, sizes[i] / 2**20) for t, sizes in samples if sizes[i] is not None]
        alive = bool(samples) and samples[-1][1][i] is not None
        if not series:
            out.append({"alive": alive, "samples": 0})
            continue
        warm, last = series[0][1], series[-1][1]
        slope = slope_per_min(series)
        out.append({
            "alive": alive,
            "samples": len(series),
            "rss_mib_after_warmup": round(warm, 1),
            "rss_mib_max": round(max(v for _, v in series), 1),
            "rss_mib_last_under_load": round(last, 1),
            "growth_pct": round(100 * (last - warm) / warm, 2),
            "slope_mib_per_min": round(slope, 3),
            "slope_pct_per_min": round(100 * slope / warm, 3),
        })
    return out


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
    samples: list[tuple[float, list[int | None]]] = []  # (seconds since warm-up ended, RSS per PS) under load
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
            end_at = warm_at + args.duration_s
            while True:  # sample RSS under load, every rss_interval_s, through the measured window
                now = time.monotonic()
                samples.append((now - warm_at, rss_bytes(pids)))
                if now >= end_at:
                    break
                time.sleep(min(args.rss_interval_s, max(0.0, end_at - time.monotonic())))
            stopped_at = time.monotonic()
            dead = [w.name for w in workers if not w.is_alive()]  # before stop: any dead thread died under load
            stop.set()
            for worker in workers:
                worker.join(timeout=RPC_TIMEOUT_S + 5)
            hung = [w.name for w in workers if w.is_alive()]
            measured_s = stopped_at - warm_at
            elapsed = stopped_at - started
            stats = setup.stats()
            setup.close()
        finally:
            stop.set()
            for worker in workers:
                worker.client.close()
            group.shutdown(grace_s=5.0)

    def measured(series: str) -> list[float]:
        return [s for w in workers for t, s in getattr(w, series) if warm_at <= t <= stopped_at]

    pulls, pushes = measured("pull_s"), measured("push_s")
    pull_p50, pull_p99 = percentiles(pulls)
    push_p50, push_p99 = percentiles(pushes)
    errors: Counter[str] = Counter()
    for worker in workers:
        errors.update(worker.errors)
    other_errors = sum(n for kind, n in errors.items() if not kind.startswith("grpc "))
    measured_errors = sum(1 for w in workers for t in w.error_at if warm_at <= t <= stopped_at)
    rounds = len(pushes)
    rss = rss_summary(samples, args.ps)
    rss_ok = all(r["alive"] and r["samples"] and r["growth_pct"] < 100 * RSS_GROWTH_GOAL for r in rss)
    return {
        "workers": args.workers,
        "workers_are": "threads of one client process, sharing the host's cores with the PS processes",
        "cpu_count": os.cpu_count(),
        "ps": args.ps,
        "payload_kib": args.kib,
        "warmup_s": args.warmup_s,
        "measured_s": round(measured_s, 1),
        "total_s": round(elapsed, 1),
        "rounds": rounds,
        "rounds_per_s": round(rounds / measured_s, 1) if measured_s > 0 else 0.0,
        "pull_ms_p50": round(pull_p50 * 1e3, 2),
        "pull_ms_p99": round(pull_p99 * 1e3, 2),
        "push_ms_p50": round(push_p50 * 1e3, 2),
        "push_ms_p99": round(push_p99 * 1e3, 2),
        "errors": sum(errors.values()),
        "errors_in_measured_window": measured_errors,
        "errors_grpc": sum(errors.values()) - other_errors,
        "errors_other": other_errors,
        "error_kinds": dict(errors.most_common(5)),
        "dead_threads": dead,
        "hung_threads": hung,
        "thread_deaths": {w.name: w.died for w in workers if w.died},
        "ps_versions": [s.version for s in stats],
        "ps_accepted_applied": [(s.accepted, s.applied) for s in stats],
        "rss_interval_s": args.rss_interval_s,
        "rss": rss,
        "goal_met": not errors and not dead and not hung and rss_ok,
    }


def _cell(value: object, width: int) -> str:
    return f"{value if value is not None else '-':>{width}}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=float, default=60.0,
                        help="seconds of measured load after the warm-up (latencies, errors, RSS samples)")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="seconds of load before the measured window")
    parser.add_argument("--rss-interval-s", type=float, default=1.0, help="sample each PS's RSS this often during the window")
    parser.add_argument("--workers", type=int, default=32, help="worker threads (of this one process), each with its own client")
    parser.add_argument("--ps", type=int, default=2, help="PS processes the vector is sharded over")
    parser.add_argument("--kib", type=int, default=256, help="flat float32 vector size per worker, KiB")
    args = parser.parse_args(argv)
    if not args.duration_s > 0 or args.warmup_s < 0:
        parser.error(f"--duration-s {args.duration_s} must be > 0 and --warmup-s {args.warmup_s} >= 0")
    if not args.rss_interval_s > 0:
        parser.error(f"--rss-interval-s {args.rss_interval_s} must be > 0")
    if args.workers < 1 or args.ps < 1 or args.kib < 1:
        parser.error("--workers, --ps and --kib must be >= 1")
    torch.set_num_threads(1)
    print(f"load: {args.workers} workers are THREADS OF ONE CLIENT PROCESS (one GIL), sharing this host's "
          f"{os.cpu_count()} cores with the {args.ps} PS processes: latencies include client-side contention", flush=True)
    r = run(args)
    print(f"{r['payload_kib']} KiB vector over {r['ps']} PS; {r['warmup_s']} s warm-up, then {r['measured_s']} s measured: "
          f"{r['rounds']} pull+push rounds ({r['rounds_per_s']}/s)")
    print(f"{'latency':<10}{'p50 ms':>10}{'p99 ms':>10}")
    print(f"{'pull':<10}{r['pull_ms_p50']:>10}{r['pull_ms_p99']:>10}")
    print(f"{'push':<10}{r['push_ms_p50']:>10}{r['push_ms_p99']:>10}")
    print(f"errors: {r['errors']} (gRPC {r['errors_grpc']}, other exceptions {r['errors_other']}; "
          f"{r['errors_in_measured_window']} in the measured window) {r['error_kinds'] or ''}")
    print(f"worker threads: {len(r['dead_threads'])} dead under load, {len(r['hung_threads'])} hung at stop, of {r['workers']}"
          + (f" {r['thread_deaths']}" if r["thread_deaths"] else ""))
    print(f"{'RSS MiB':<8}{'warm-up':>9}{'max':>9}{'last':>9}{'growth %':>10}{'MiB/min':>9}{'%/min':>8}{'samples':>9}  (under load, every {r['rss_interval_s']} s)")
    for i, ps in enumerate(r["rss"]):
        print(f"{'ps' + str(i):<8}{_cell(ps.get('rss_mib_after_warmup'), 9)}{_cell(ps.get('rss_mib_max'), 9)}"
              f"{_cell(ps.get('rss_mib_last_under_load'), 9)}{_cell(ps.get('growth_pct'), 10)}{_cell(ps.get('slope_mib_per_min'), 9)}"
              f"{_cell(ps.get('slope_pct_per_min'), 8)}{_cell(ps['samples'], 9)}" + ("" if ps["alive"] else "  DIED"))
    print(f"goal (0 errors, no dead thread, RSS growth < {RSS_GROWTH_GOAL:.0%}): {'met' if r['goal_met'] else 'NOT met'}")
    print(json.dumps(r))
    return 0 if r["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
