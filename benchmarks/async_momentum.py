"""Asynchronous plans with SGD's momentum fixed or matched to the asynchrony (optimizer.async_momentum).

Asynchrony adds momentum of its own (star.optim.matched_momentum), so a PS that keeps the task's 0.9 under
ASGD or SSP steps with more momentum than a synchronous run does. On digits that overshot: held-out accuracy
climbed to ~0.8 and fell back to chance again and again (benchmarks/results/ssp_collapses_29nov). This runs
each mode under both rules, paired (same seeds, interleaved, the order rotated per seed), and prints per mode
the median time to target with its interval, the paired ratio matched / fixed, and the collapses per run
(evaluations more than --drop below the best so far).

    python -m benchmarks.async_momentum --modes asgd,ssp --seeds 3 --out benchmarks/results/async_momentum_v1

`--trace FILE` replays a slowdown trace (star.traces format) in every run: for the strategies that change plans
live, such as `exclude`, which runs a straggler alone (2 groups: momentum 0.8 from 0.9) while it is slow.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Sequence

from star.config import ConfigError, from_dict, JobConfig
from star.launch import launch_or_stop
from star.tta import bootstrap_median, bootstrap_ratio

RULES = ("fixed", "matched")


def collapses(metrics: Sequence[float], drop: float) -> int:
    """Evaluations more than `drop` below the best metric seen before them (higher is better)."""
    best, count = float("-inf"), 0
    for metric in metrics:
        if best - metric > drop:
            count += 1
        best = max(best, metric)
    return count


def read_curve(path: Path) -> list[float]:
    with path.open() as f:
        return [float(row["metric"]) for row in csv.DictReader(f)]


def run_one(args: argparse.Namespace, mode: str, rule: str, seed: int, out: Path) -> dict:
    config = from_dict(JobConfig, {"task": args.task, "workers": args.workers, "ps": args.ps, "out": str(out),
                                   "seed": seed, "max_time_s": args.max_time_s, "plan": {"mode": mode},
                                   "optimizer": {"async_momentum": rule},
                                   **({"trace": {"path": args.trace}} if args.trace else {})})
    result = launch_or_stop(config)
    metrics = read_curve(out / "curve.csv")
    return {"mode": mode, "rule": rule, "seed": seed, "reached": result["reached"], "tta_s": result["tta_s"],
            "updates_to_target": result.get("updates_to_target"), "final_metric": result["final_metric"],
            "best_metric": max(metrics), "evaluations": len(metrics), "collapses": collapses(metrics, args.drop)}


def summarise(rows: list[dict], modes: Sequence[str], level: float) -> list[dict]:
    """Per mode: each rule's median TTA (misses count as +inf), the paired ratio matched / fixed, collapses."""
    table = []
    for mode in modes:
        by_rule = {rule: sorted((r for r in rows if r["mode"] == mode and r["rule"] == rule), key=lambda r: r["seed"])
                   for rule in RULES}
        entry: dict = {"mode": mode, "runs": len(by_rule["fixed"])}
        for rule in RULES:
            tta = bootstrap_median([r["tta_s"] if r["reached"] else None for r in by_rule[rule]], level)
            entry.update({f"{rule}_tta_s": tta.median, f"{rule}_tta_lo": tta.lo, f"{rule}_tta_hi": tta.hi,
                          f"{rule}_reached": sum(r["reached"] for r in by_rule[rule]),
                          f"{rule}_collapses": [r["collapses"] for r in by_rule[rule]]})
        ratio = bootstrap_ratio([r["tta_s"] if r["reached"] else None for r in by_rule["matched"]],
                                [r["tta_s"] if r["reached"] else None for r in by_rule["fixed"]], level)
        entry.update({"matched_over_fixed": ratio.median, "ratio_lo": ratio.lo, "ratio_hi": ratio.hi})
        table.append(entry)
    return table


def _fmt(value) -> str:
    return "miss" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.async_momentum", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="digits")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--modes", default="asgd,ssp", help="comma-separated asynchronous modes")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1, each running every mode under both rules")
    parser.add_argument("--max-time-s", type=float, default=60.0, help="a run that misses the target stops here")
    parser.add_argument("--drop", type=float, default=0.3, help="a collapse: an evaluation this far below the best so far")
    parser.add_argument("--level", type=float, default=0.9, help="bootstrap interval level")
    parser.add_argument("--trace", default=None, help="slowdown trace replayed in every run (default: none)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.trace and not Path(args.trace).is_file():
        parser.error(f"--trace {args.trace!r} is not a file")
    modes = [m for m in args.modes.split(",") if m]
    try:
        for mode in modes:  # every mode's config checked before the first run
            from_dict(JobConfig, {"task": args.task, "workers": args.workers, "ps": args.ps, "plan": {"mode": mode}})
    except ConfigError as error:
        parser.error(f"bad config: {error}")
    runs = [(mode, rule) for mode in modes for rule in RULES]
    rows: list[dict] = []
    for seed in range(args.seeds):
        order = runs[seed % len(runs):] + runs[:seed % len(runs)]
        for mode, rule in order:
            print(f"[{len(rows) + 1}/{len(runs) * args.seeds}] {mode} async_momentum={rule} seed={seed} ...", file=sys.stderr, flush=True)
            rows.append(run_one(args, mode, rule, seed, args.out / f"{mode}_{rule}" / f"seed{seed}"))
            print(f"    {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
            (args.out / "runs.json").write_text(json.dumps(rows, indent=1))  # kept if interrupted
    table = summarise(rows, modes, args.level)
    columns = list(table[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(entry[c]) for c in columns) + " |" for entry in table]
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
