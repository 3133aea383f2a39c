"""Time to other targets, read from the curves a benchmark run already saved: no new runs.

Why: a target that lies on a loss plateau makes updates-to-target chaotic (gpt-1m at 3.1: the same
arithmetic crossed it dozens of updates apart), and re-running a benchmark to try another target
costs tens of minutes. Every run of `benchmarks.strategies` and `benchmarks.ddp_vs_star` keeps its
evaluation curve (`DIR/<run>/seed<N>/curve.csv`), so the time and updates to any target that the
runs passed through can be read back with the same rule the runs used (star.tta: the mean of the
last `evaluation.smoothing` evaluations, from each run's config.toml). A target beyond where a run
stopped (runs stop at their own target) counts as a miss. curve.csv keeps 6 decimals, so a target is
taken as reached within CURVE_ROUNDING of it (a run that stopped exactly at its target still reads so).

    python -m benchmarks.retarget DIR --targets 3.4,3.3,3.2,3.1 [--runs ddp,star-auto] [--ratio-to ddp]

Prints, per run and target, the median TTA with its bootstrap 90% interval and the median updates to
target, then (with --ratio-to) each run's median TTA over that run's; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tomllib
from pathlib import Path

from star.tta import EvalPoint, bootstrap_median, first_reaching, median_or_none


CURVE_ROUNDING = 1e-6  # curve.csv's metric precision: a mean of rounded values can fall this far short


def load_curve(run_dir: Path) -> list[EvalPoint]:
    with open(run_dir / "curve.csv", newline="") as f:
        return [EvalPoint(float(r["time_s"]), int(r["version"]), float(r["metric"])) for r in csv.DictReader(f)]


def run_facts(run_dir: Path) -> tuple[int, bool]:
    """(smoothing, higher_is_better) of one saved run: from its config.toml and result.json."""
    config = tomllib.loads((run_dir / "config.toml").read_text())
    smoothing = int(config.get("evaluation", {}).get("smoothing", 1))
    result = json.loads((run_dir / "result.json").read_text())
    return smoothing, result.get("metric") == "accuracy"


def retarget(root: Path, targets: list[float], runs: list[str] | None = None) -> dict[str, dict[float, list[tuple[float | None, int | None]]]]:
    """{run: {target: [(tta_s or None, updates or None) per seed, in seed order]}}."""
    found: dict[str, dict[float, list[tuple[float | None, int | None]]]] = {}
    names = runs or sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("seed*/curve.csv")))
    for name in names:
        seeds = sorted((root / name).glob("seed*"), key=lambda p: int(p.name[4:]))
        if not seeds:
            raise SystemExit(f"retarget: {root / name} has no seed*/ runs")
        per_target: dict[float, list[tuple[float | None, int | None]]] = {t: [] for t in targets}
        for seed_dir in seeds:
            points = load_curve(seed_dir)
            smoothing, higher = run_facts(seed_dir)
            for target in targets:
                reach = target - CURVE_ROUNDING if higher else target + CURVE_ROUNDING
                point = first_reaching(points, reach, higher, smoothing)
                per_target[target].append((None, None) if point is None else (point.time_s, point.version))
        found[name] = per_target
    return found


def _fmt(value: float | None) -> str:
    return "miss" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.retarget", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path, help="a benchmark's --out folder (DIR/<run>/seed<N>/curve.csv)")
    p.add_argument("--targets", required=True, help="comma-separated metric targets, e.g. 3.4,3.3,3.2,3.1")
    p.add_argument("--runs", default="", help="comma-separated run names (default: every run folder)")
    p.add_argument("--ratio-to", default="", help="a run name: also print every run's median TTA over its")
    args = p.parse_args(argv)
    try:
        targets = [float(t) for t in args.targets.split(",") if t.strip()]
    except ValueError:
        p.error(f"--targets {args.targets!r}: give numbers separated by commas")
    if not args.dir.is_dir():
        p.error(f"{args.dir} is not a folder")
    runs = [r for r in args.runs.split(",") if r] or None
    try:
        found = retarget(args.dir, targets, runs)
    except (OSError, KeyError, ValueError, tomllib.TOMLDecodeError) as exc:
        p.error(f"{args.dir}: not a benchmark's saved runs ({type(exc).__name__}: {exc})")
    if not found:
        p.error(f"{args.dir} holds no <run>/seed<N>/curve.csv")
    if args.ratio_to and args.ratio_to not in found:
        p.error(f"--ratio-to {args.ratio_to!r} is not one of the runs: {', '.join(found)}")
    print("| run | target | runs | reached | TTA median s (90% interval) | updates median | per seed (s / updates) |")
    print("|---|---|---|---|---|---|---|")
    summary: dict = {}
    for name, per_target in found.items():
        for target, values in per_target.items():
            times = [t for t, _ in values]
            interval = bootstrap_median(times)
            updates = median_or_none([u for _, u in values])
            seeds = ", ".join(f"{_fmt(t)} / {u if u is not None else 'miss'}" for t, u in values)
            print(f"| {name} | {target:g} | {len(values)} | {sum(t is not None for t in times)}/{len(values)} | "
                  f"{_fmt(interval.median)} ({_fmt(interval.lo)}–{_fmt(interval.hi)}) | {_fmt(updates)} | {seeds} |")
            summary.setdefault(name, {})[f"{target:g}"] = {"tta_s": interval.median, "updates": updates}
    if args.ratio_to:
        print()
        for target in targets:
            base = summary[args.ratio_to][f"{target:g}"]["tta_s"]
            ratios = {name: (None if base is None or s[f"{target:g}"]["tta_s"] is None else s[f"{target:g}"]["tta_s"] / base)
                      for name, s in summary.items()}
            print(f"target {target:g}: median TTA ÷ {args.ratio_to}'s: "
                  + ", ".join(f"{name} {_fmt(r)}" for name, r in ratios.items()))
    print(json.dumps({"dir": str(args.dir), "targets": targets, "runs": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
