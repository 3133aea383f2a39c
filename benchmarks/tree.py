"""Tree aggregation vs every worker pushing for itself, with the PS behind one slow link.

    python -m benchmarks.tree --cap-mbit 40 --fanouts 0,2,4 --repeats 1 --out runs/tree
    python -m benchmarks.tree --fanouts 0,2 --relief-fanouts 2 --repeats 3 --out runs/tree_relief

Builds WORKERS + 1 network namespaces (benchmarks.netns): one worker on each of hosts
0..WORKERS-1 and the only PS shard on the last host, whose link is capped with tc. Every
push and pull then crosses that link. The same SSGD job runs once per fanout (0: no
trees), arms rotated each repeat so drift on the shared machine hits all alike. With trees
of fanout f, children hand their gradients to their parent over the uncapped links, and
only about WORKERS/f pushes a round reach the PS's link; pulls are unchanged.

`--relief-fanouts 2` adds an arm "relief2": the job starts without trees and the traffic guard
turns trees of 2 on when the PS host's NIC stays hot (`control.traffic.relief = "tree"`), as
a user who has not configured trees would get; its row says when they went on.

Prints and writes OUT/tree.md and OUT/tree.csv: TTA, updates, pushes and push bytes the
PS received per update, per run, and the median TTA of each arm against no trees.
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


def run(args: argparse.Namespace) -> list[dict]:
    out = Path(args.out)
    fanouts: list[int | str] = list(args.fanouts)
    fanouts += [f"relief{f}" for f in args.relief_fanouts]
    nodes = args.workers + 1
    ps_host = nodes - 1  # workers go to node w % nodes: the last node runs the PS and no worker
    rows = []
    with NetNamespaces(nodes=nodes) as net:
        applied = net.cap(ps_host, rate_mbit=args.cap_mbit, delay_ms=args.cap_delay_ms)
        print(f"{nodes} hosts; PS on host {ps_host}, its link capped: {applied}", flush=True)
        for repeat in range(args.repeats):
            for fanout in fanouts[repeat % len(fanouts):] + fanouts[: repeat % len(fanouts)]:
                run_dir = out / f"fanout{fanout}-{repeat}"
                relief = isinstance(fanout, str)
                traffic = {"pace": True, "relief": "tree", "tree_fanout": int(fanout[len("relief"):])} if relief \
                    else {"pace": False}  # trees alone: no pacing, no moves
                config = from_dict(JobConfig, {
                    "task": args.task, "workers": args.workers, "ps": 1, "out": str(run_dir / "job"),
                    "max_time_s": args.max_time_s, "seed": args.seed, "transport": args.transport,
                    "plan": {"mode": "ssgd", "tree_fanout": None if relief else fanout or None},
                    "node": {"ps_ranks": str(ps_host)}, "placement": {"replace": False, "cpu_aware": False},
                    "control": {"traffic": traffic}})
                started = time.monotonic()
                result = run_job(net, config, run_dir, timeout_s=args.max_time_s + 180)
                (ps,) = result["ps_stats"]
                updates = max(1, result["updates"])
                trees = [json.loads(line) for line in (run_dir / "job" / "events.jsonl").read_text().splitlines()
                         if '"kind": "tree"' in line]
                row = {"fanout": fanout, "repeat": repeat, "reached": result["reached"], "tta_s": result["tta_s"],
                       "updates": result["updates"], "pushes_per_update": round(ps["counters"].get("pushes", 0) / updates, 2),
                       "tree_pushes": ps["counters"].get("tree_pushes", 0),
                       "push_mb_per_update": round(ps.get("push_bytes_received", 0) / updates / 1e6, 3),
                       "trees_switched": [f"{e['tree_fanout'] or 'off'} at {e['t']:.1f}s" for e in trees],
                       "wall_s": round(time.monotonic() - started, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def summary(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [f"{args.workers} workers on {args.workers} hosts, 1 PS shard alone on a host whose link is capped at "
             f"{args.cap_mbit} Mbit/s; task {args.task}, SSGD", "",
             "| fanout | repeat | reached | TTA s | updates | pushes at PS / update | push MB at PS / update | trees switched |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tta = "" if r["tta_s"] is None else f"{r['tta_s']:.2f}"
        lines.append(f"| {r['fanout'] or 'none'} | {r['repeat']} | {r['reached']} | {tta} | {r['updates']} | "
                     f"{r['pushes_per_update']} | {r['push_mb_per_update']} | {', '.join(r.get('trees_switched', [])) or '—'} |")
    medians = {}
    for fanout in sorted({r["fanout"] for r in rows}, key=str):
        ttas = [r["tta_s"] for r in rows if r["fanout"] == fanout and r["reached"]]
        medians[fanout] = statistics.median(ttas) if ttas else None
    lines.append("")
    flat = medians.get(0)
    for fanout, tta in medians.items():
        if fanout and tta is not None and flat:
            name = f"trees of {fanout}" if isinstance(fanout, int) else f"{fanout} (trees when the PS NIC runs hot)"
            lines.append(f"median TTA, {name}: {tta:.2f} s vs {flat:.2f} s without: ratio {tta / flat:.2f}")
    return "\n".join(lines) + "\n"


def _fanouts(text: str, allow_none: bool = False) -> list[int]:
    try:
        fanouts = [int(f) for f in text.split(",") if f.strip()]
    except ValueError:
        fanouts = []
    if not fanouts or any(f < 2 and not (allow_none and f == 0) for f in fanouts):
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated tree fanouts of at least 2"
                                         + (" (0: no trees)" if allow_none else ""))
    return fanouts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tree", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--fanouts", type=lambda text: _fanouts(text, allow_none=True), default=[0, 2, 4],
                        help="comma-separated tree fanouts; 0 = no trees")
    parser.add_argument("--relief-fanouts", type=_fanouts, default=[], help="comma-separated: arms that start without trees and let the "
                        "traffic guard turn trees of this fanout on when the PS NIC runs hot")
    add_job_flags(parser, cap_mbit=40.0, max_time_s=200.0, repeats=1, out="runs/tree")
    args = parser.parse_args(argv)
    return run_and_report("tree", args, run, summary)


if __name__ == "__main__":
    sys.exit(main())
