"""Strategies against a network straggler: one worker's host behind a slow link.

    python -m benchmarks.slow_link --strategies ssgd,kofn,auto --repeats 3 --out runs/slow_link

A straggler trace slows a worker's compute; on shared clusters a worker is as often held back
by its link (a congested top-of-rack switch, a noisy neighbour's traffic). This builds NODES
network namespaces (benchmarks.netns), one worker per host, the PS shards on `--ps-hosts`,
caps host `--cap-host`'s link with tc, and runs each strategy with seeds seed..seed+N-1,
interleaved (order rotated per repeat). The capped host holds no shard, so only its own
worker's pushes and pulls cross the slow link: its compute is as fast as the others', and
batch sizes and AMP cannot shorten what it moves.

Prints and writes OUT/slow_link.md and OUT/slow_link.csv (one row per run: TTA, updates, the
plan switches and slow-link detections in its events); the last line printed is one JSON object
with the median TTA per strategy, `best_fixed`, `auto_over_best` and its paired bootstrap
interval. Needs root (network namespaces); says why and exits 2 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.multihost import add_job_flags, run_and_report, run_job
from benchmarks.netns import NetNamespaces
from star.config import JobConfig, from_dict
from star.errors import ConfigError
from star.tta import bootstrap_median, bootstrap_ratio


def run(args: argparse.Namespace) -> list[dict]:
    out = Path(args.out)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    rows = []
    with NetNamespaces(nodes=args.nodes) as net:
        applied = net.cap(args.cap_host, rate_mbit=args.cap_mbit, delay_ms=args.cap_delay_ms)
        print(f"hosts {[net.address(r) for r in range(args.nodes)]}; host {args.cap_host} capped: {applied}", flush=True)
        for repeat in range(args.repeats):
            seed = args.seed + repeat
            for strategy in strategies[repeat % len(strategies):] + strategies[:repeat % len(strategies)]:
                run_dir = out / f"{strategy}-seed{seed}"
                config = job_config(args, strategy, seed, run_dir)
                started = time.monotonic()
                result = run_job(net, config, run_dir, timeout_s=args.max_time_s + 180)
                events = [json.loads(line) for line in (run_dir / "job" / "events.jsonl").read_text().splitlines()]
                row = {"strategy": strategy, "seed": seed, "reached": result["reached"], "tta_s": result["tta_s"],
                       "updates": result["updates"],
                       "plans": ";".join(f"{e['mode']}@{e['t']:.0f}s" for e in events if e["kind"] == "plan_decision"),
                       "slow_links": ";".join(f"w{e['worker']}@{e['t']:.0f}s" for e in events if e["kind"] == "slow_link_detected"),
                       "wall_s": round(time.monotonic() - started, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def job_config(args: argparse.Namespace, strategy: str, seed: int, run_dir: Path) -> JobConfig:
    """One run's job: a worker per host, the shards on --ps-hosts, no re-placement (the capped host stays a worker's)."""
    return from_dict(JobConfig, {
        "task": args.task, "workers": args.nodes, "ps": args.ps, "out": str(run_dir / "job"), "max_time_s": args.max_time_s,
        "seed": seed, "plan": {"mode": strategy}, "transport": args.transport, "node": {"ps_ranks": args.ps_hosts},
        "placement": {"replace": False, "cpu_aware": False}})


def _ttas(rows: list[dict], strategy: str) -> list[float | None]:
    return [r["tta_s"] if r["reached"] else None for r in sorted(rows, key=lambda r: r["seed"]) if r["strategy"] == strategy]


def summary(rows: list[dict], args: argparse.Namespace) -> str:
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    medians = {s: bootstrap_median(_ttas(rows, s)) for s in strategies}
    lines = [f"{args.nodes} hosts (namespaces), one worker each; host {args.cap_host}'s link capped at {args.cap_mbit} Mbit/s, "
             f"PS shards on hosts {args.ps_hosts}; task {args.task}, transport {args.transport}",
             "", "| strategy | seed | reached | TTA s | updates | plan switches | slow links detected |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        tta = "" if r["tta_s"] is None else f"{r['tta_s']:.2f}"
        lines.append(f"| {r['strategy']} | {r['seed']} | {r['reached']} | {tta} | {r['updates']} | {r['plans'] or '—'} | "
                     f"{r['slow_links'] or '—'} |")
    lines += ["", "| strategy | median TTA s (90% interval) |", "|---|---|"]
    lines += [f"| {s} | {_fmt(m.median)} ({_fmt(m.lo)}–{_fmt(m.hi)}) |" for s, m in medians.items()]
    fixed = [s for s in strategies if s != "auto" and medians[s].median is not None]
    best = min(fixed, key=lambda s: medians[s].median) if fixed else None
    verdict = {"medians_s": {s: m.median for s, m in medians.items()}, "best_fixed": best, "cap_mbit": args.cap_mbit,
               "workers": args.nodes, "repeats": args.repeats}
    if best is not None and "auto" in medians:
        ratio = bootstrap_ratio(_ttas(rows, "auto"), _ttas(rows, best))
        verdict.update(auto_over_best=ratio.median, auto_over_best_lo=ratio.lo, auto_over_best_hi=ratio.hi)
        lines += ["", f"auto / {best} (best fixed), paired: {_fmt(ratio.median)} ({_fmt(ratio.lo)}–{_fmt(ratio.hi)})"]
    return "\n".join(lines) + "\n\n" + json.dumps(verdict)


def _fmt(value: float | None) -> str:
    return "miss" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.slow_link", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4, help="hosts, one worker each")
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--ps-hosts", default="0,2", help="the hosts that run the PS shards (not the capped one)")
    parser.add_argument("--cap-host", type=int, default=1)
    parser.add_argument("--strategies", default="ssgd,kofn,auto")
    add_job_flags(parser, cap_mbit=10.0, max_time_s=150.0, repeats=3, out="runs/slow_link")
    args = parser.parse_args(argv)
    if str(args.cap_host) in args.ps_hosts.split(","):
        parser.error(f"--cap-host {args.cap_host} is among --ps-hosts {args.ps_hosts}: the capped host must hold no shard")
    for strategy in [s.strip() for s in args.strategies.split(",") if s.strip()] or [""]:
        try:  # refused here, in one line, before any host is built
            job_config(args, strategy, 0, Path(args.out))
        except ConfigError as error:
            parser.error(f"{error} (--strategies {args.strategies!r}, --ps-hosts {args.ps_hosts!r}, --task {args.task!r})")
    return run_and_report("slow_link", args, run, summary)


if __name__ == "__main__":
    sys.exit(main())
