"""Headroom placement vs naive round-robin placement, on hosts with one slow link.

    python -m benchmarks.placement --nodes 4 --cap-host 1 --cap-mbit 10 --repeats 2 --out runs/placement

Builds NODES network namespaces on this machine (benchmarks.netns), caps host
CAP_HOST's link with tc, and runs the same job — one worker per host, PS shards placed
by `star node` — in three arms, rotated each repeat (so drift on a shared machine hits
all alike), REPEATS times each:

- headroom: `placement.strategy = headroom` (the default, re-placement on);
- round_robin: the naive baseline, shard i on host i, re-placement off;
- round_robin+replace: the same bad start, with the coordinator's re-placement on, which
  should notice the saturated PS host and move its shard away mid-run.

With CAP_HOST=1 round robin puts a shard behind the slow link, so every worker's push and
pull of it crosses that link; headroom placement reads the link's shaped rate and keeps
the shards elsewhere, so only the capped host's own worker pays. The hosts are
namespaces of one machine and share its CPU, so placement runs with cpu_aware = false
(CPU load would look the same on every host and tell them apart by noise only).

Prints and writes OUT/placement.md and OUT/placement.csv: TTA per run, the medians,
and TTA(headroom) / TTA(round robin) (goal: <= 0.7, i.e. at least 30% sooner).
Needs root (network namespaces); says why and exits 2 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from benchmarks.multihost import add_job_flags, run_and_report, run_job
from benchmarks.netns import NetNamespaces
from star.config import JobConfig, from_dict

ARMS = {  # name -> placement config
    "headroom": {"strategy": "headroom", "replace": True},
    "round_robin": {"strategy": "round_robin", "replace": False},
    "round_robin+replace": {"strategy": "round_robin", "replace": True},
}


def run(args: argparse.Namespace) -> list[dict]:
    out = Path(args.out)
    rows = []
    with NetNamespaces(nodes=args.nodes) as net:
        applied = net.cap(args.cap_host, rate_mbit=args.cap_mbit, delay_ms=args.cap_delay_ms)
        print(f"hosts {[net.address(r) for r in range(args.nodes)]}; host {args.cap_host} capped: {applied}", flush=True)
        names = [a for a in ARMS if a in args.arms.split(",")]
        for repeat in range(args.repeats):
            for arm in names[repeat % len(names):] + names[: repeat % len(names)]:
                run_dir = out / f"{arm}-{repeat}"
                config = from_dict(JobConfig, {
                    "task": args.task, "workers": args.workers or args.nodes, "ps": args.ps, "out": str(run_dir / "job"),
                    "max_time_s": args.max_time_s, "seed": args.seed, "plan": {"mode": args.mode}, "transport": args.transport,
                    "placement": {**ARMS[arm], "cpu_aware": False}})
                started = time.monotonic()
                result = run_job(net, config, run_dir, timeout_s=args.max_time_s + 180)
                ranks = result["placement"]["ranks"]
                moves = [json.loads(line) for line in (run_dir / "job" / "events.jsonl").read_text().splitlines()
                         if '"ps_moved"' in line]
                row = {"strategy": arm, "repeat": repeat, "reached": result["reached"], "tta_s": result["tta_s"],
                       "updates": result["updates"], "shard_hosts": ranks, "behind_capped_link": args.cap_host in ranks,
                       "moves": [f"shard {m['shard']} {m['from_host']}->{m['to_host']} at {m['t']:.0f}s lost {m['updates_lost']}"
                                 for m in moves],
                       "wall_s": round(time.monotonic() - started, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def summary(rows: list[dict], args: argparse.Namespace) -> str:
    medians = {}
    for strategy in ARMS:
        ttas = [r["tta_s"] for r in rows if r["strategy"] == strategy and r["reached"]]
        medians[strategy] = statistics.median(ttas) if ttas else None
    lines = [f"{args.nodes} hosts (namespaces), host {args.cap_host}'s link capped at {args.cap_mbit} Mbit/s; "
             f"task {args.task}, {args.workers or args.nodes} workers (one per host), {args.ps} PS shards, mode {args.mode}",
             "", "| arm | repeat | shard hosts at start | behind capped link | moves | reached | TTA s | updates |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tta = "" if r["tta_s"] is None else f"{r['tta_s']:.2f}"
        lines.append(f"| {r['strategy']} | {r['repeat']} | {r['shard_hosts']} | {r['behind_capped_link']} | "
                     f"{'; '.join(r['moves']) or '—'} | {r['reached']} | {tta} | {r['updates']} |")
    head, naive = medians.get("headroom"), medians.get("round_robin")
    rescued = medians.get("round_robin+replace")
    lines.append("")
    if rescued is not None and naive is not None:
        lines.append(f"median TTA with re-placement from the round-robin start: {rescued:.2f} s ({1 - rescued / naive:.0%} sooner than round robin)")
    if head is not None and naive is not None:
        ratio = head / naive
        lines.append(f"median TTA: headroom {head:.2f} s, round robin {naive:.2f} s: ratio {ratio:.2f} "
                     f"({1 - ratio:.0%} sooner; goal at least 30%: {'met' if ratio <= 0.7 else 'NOT met'})")
    else:
        lines.append(f"median TTA: headroom {head}, round robin {naive} (a strategy never reached the target)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.placement", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--workers", type=int, default=None, help="default: one per node")
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--cap-host", type=int, default=1, help="the host whose link is capped (round robin puts shard i on host i)")
    parser.add_argument("--mode", default="ssgd")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated: " + ", ".join(ARMS))
    add_job_flags(parser, cap_mbit=10.0, max_time_s=150.0, repeats=1, out="runs/placement")
    args = parser.parse_args(argv)
    return run_and_report("placement", args, run, summary)


if __name__ == "__main__":
    sys.exit(main())
