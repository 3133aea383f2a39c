"""Simulator vs real runs over several traces: Kendall tau of the strategy rankings and TTA errors.

    python -m benchmarks.sim_vs_real \\
        --case mid3x benchmarks/results/strategies_mid3x/summary.csv benchmarks/results/strategies_mid3x/mid3x.csv \\
        --case job1 benchmarks/results/strategies_job1/summary.csv ../shared/traces/alibaba-pai-2020/job_1_norm.csv \\
               trace_workers=3,4,5,6 stretch=0.06 \\
        --out benchmarks/results/sim_vs_real

Each `--case NAME SUMMARY TRACE [trace_workers=A,B,..] [stretch=F]` names one trace: SUMMARY is the
summary.csv of the real runs on it (`python -m benchmarks.strategies`, or a real `star bench` with one
trace), TRACE the file those runs replayed, with the same worker subset and stretch. The simulator
(calibration `--calibration`, default the shipped one for `--task`) runs clean SSGD and every strategy
the real table has, on `--seeds` seeds (the median TTA is used, as the real table's is), and
DIR/sim_vs_real.md gets per trace the Kendall tau of the two rankings (goal >= 0.7) and the mean |TTA
error| (goal <= 15%), raw and relative to each side's clean SSGD, then the per-run rows.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from star.bench import BenchConfig, TraceSpec, run_sim, summary_rows
from star.tta import median_or_none
from star.config import load_toml
from star.task_calibration import shipped_calibration
from star.sim.compare import (CLEAN, REAL_RUN_NAMES, agreement, agreement_table, compare_with_real, read_real_summary,
                               seed_agreement, sim_vs_real_table)


@dataclass(frozen=True)
class Case:
    """One trace the real runs replayed."""

    name: str  # trace name in the tables
    summary: str  # the real runs' summary.csv
    trace: str  # the trace file they replayed
    trace_workers: str | None = None  # as star launch --trace-workers
    stretch: float = 1.0  # as star launch --trace-stretch


def parse_case(words: list[str]) -> Case:
    """NAME SUMMARY TRACE [trace_workers=...] [stretch=F] -> Case (ValueError naming the bad word)."""
    if len(words) < 3:
        raise ValueError(f"--case needs NAME SUMMARY TRACE [trace_workers=..] [stretch=F], got {' '.join(words)!r}")
    options: dict[str, Any] = {}
    for word in words[3:]:
        key, sep, value = word.partition("=")
        if not sep or key not in ("trace_workers", "stretch"):
            raise ValueError(f"--case option {word!r}: expected trace_workers=A,B,.. or stretch=F")
        if key == "stretch":
            try:
                options[key] = float(value)
            except ValueError:
                raise ValueError(f"--case stretch={value!r}: not a number") from None
        else:
            options[key] = value
    for what, path in (("SUMMARY", words[1]), ("TRACE", words[2])):
        if not Path(path).is_file():
            raise ValueError(f"--case {words[0]}: {what} {path!r} is not a file")
    return Case(words[0], words[1], words[2], **options)


def median_tta(results: list[dict[str, Any]]) -> float | None:
    """Median TTA over seeds with benchmarks.strategies' rule (a miss counts as +inf; None when half or more missed)."""
    return median_or_none([r["tta_s"] if r.get("reached") else None for r in results])


TIME_FIELDS = ("base_compute_s", "overhead_s", "latency_s", "ps_update_s", "resize_s")  # seconds: scale with the machine


def scaled_cost(cost: dict[str, Any], factor: float) -> dict[str, Any]:
    """A [cost] table whose every duration is `factor` x longer (bandwidth `factor` x lower)."""
    out = {k: v * factor for k, v in cost.items() if k in TIME_FIELDS}
    if "bandwidth_bytes_per_s" in cost:
        out["bandwidth_bytes_per_s"] = cost["bandwidth_bytes_per_s"] / factor
    return out


def _read_runs(runs_csv: Path) -> list[dict[str, str]]:
    with open(runs_csv, newline="") as handle:
        return list(csv.DictReader(handle))


def _reached(row: dict[str, str]) -> bool:
    return row["reached"] in ("True", "true", "1") and bool(row["tta_s"])


def seed_anchors(runs_csv: Path) -> dict[int, tuple[float, float]]:
    """seed -> (TTA s, updates to target) of the real clean SSGD run with that seed (runs.csv of
    benchmarks.strategies: its updates_to_target column, or the older tables' updates)."""
    out = {}
    for r in _read_runs(runs_csv):
        updates = r.get("updates_to_target") or r.get("updates")
        if r["run"] == "clean" and _reached(r) and updates:
            out[int(r["seed"])] = (float(r["tta_s"]), float(updates))
    return out


def real_ranges(summary: Path) -> dict[str, dict[str, float | None]]:
    """strategy -> {real_lo_s, real_hi_s}: the real TTA range over seeds (tta_lo_s/tta_hi_s, else tta_min_s/tta_max_s)."""
    with open(summary, newline="") as handle:
        rows = list(csv.DictReader(handle))
    out = {}
    for r in rows:
        lo, hi = (r.get("tta_lo_s"), r.get("tta_hi_s")) if "tta_lo_s" in r else (r.get("tta_min_s"), r.get("tta_max_s"))
        if r.get("run") == "auto-clean" or lo is None:
            continue
        strategy = REAL_RUN_NAMES.get(r["run"], r["run"]) if "run" in r else r["strategy"]
        out[strategy] = {"real_lo_s": float(lo) if lo else None, "real_hi_s": float(hi) if hi else None}
    return out


def per_seed_ttas(runs_csv: Path) -> dict[int, dict[str, float | None]]:
    """seed -> {run name: TTA (None: missed)} of the strategies on the trace (not clean, not auto-clean)."""
    out: dict[int, dict[str, float | None]] = {}
    for r in _read_runs(runs_csv):
        if r["run"] not in ("clean", "auto-clean"):
            out.setdefault(int(r["seed"]), {})[r["run"]] = float(r["tta_s"]) if _reached(r) else None
    return out


def simulate_case(case: Case, strategies: list[str], config: BenchConfig, seeds: int, out: Path) -> list[dict[str, Any]]:
    """Summary rows (bench.summary_rows) of the simulated clean SSGD and strategies on the case's trace.

    Paired with the real runs when their runs.csv lies beside the summary: per real seed, the
    simulator takes that seed's clean-SSGD updates to target and rescales its durations so its clean
    run takes the real clean run's time (both vary with the seed and the machine's load); the
    strategies are then predicted under that anchor and their median over seeds compared. Else the
    calibration as it is, on `seeds` seeds."""
    spec = TraceSpec(case.name, Path(case.trace), case.trace_workers, case.stretch)
    runs_csv = Path(case.summary).with_name("runs.csv")
    anchors = seed_anchors(runs_csv) if runs_csv.is_file() else {}
    settings: list[tuple[int, dict[str, Any]]] = [(s, {}) for s in range(config.seed, config.seed + seeds)]
    if anchors:
        calibration = config.calibration or shipped_calibration(config.task)
        cost = load_toml(calibration).get("cost", {})
        settings = []
        for seed, (tta_s, updates) in sorted(anchors.items()):
            convergence = {"convergence": {"updates_to_target": updates}}
            clean = run_sim(BenchConfig(**{**config.__dict__, "seed": seed}), CLEAN, None, out / "anchor" / str(seed), convergence)
            factor = tta_s / clean["tta_s"] if clean.get("reached") and clean.get("tta_s") else 1.0
            settings.append((seed, {**convergence, "cost": scaled_cost(cost, factor)}))
    runs, factors = [], {}
    for strategy in [CLEAN] + [s for s in strategies if s != CLEAN]:
        results = [run_sim(BenchConfig(**{**config.__dict__, "seed": seed}), strategy, None if strategy == CLEAN else spec,
                           out / case.name / strategy / f"seed{seed}", overrides) for seed, overrides in settings]
        tta = median_tta(results)
        runs.append({"trace": case.name, "strategy": strategy, "workers": config.workers, "tta_s": tta, "reached": tta is not None})
        factors[strategy] = tta_factors(results)
    return [{**row, **factors[row["strategy"]]} for row in summary_rows(runs)]


def tta_factors(results: list[dict[str, Any]]) -> dict[str, float | None]:
    """TTA's two factors over the seeds that reached the target, as benchmarks.strategies reports them: median
    updates to target and median seconds per update (None when none reached)."""
    reached = [r for r in results if r.get("reached") and r.get("tta_s") and r.get("updates")]
    if not reached:
        return {"updates_to_target": None, "s_per_update": None}
    return {"updates_to_target": statistics.median(r["updates"] for r in reached),
            "s_per_update": statistics.median(r["tta_s"] / r["updates"] for r in reached)}


def compare_cases(cases: list[Case], config: BenchConfig, seeds: int, out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(per-run comparison rows, per-trace agreement rows) over every case."""
    compared = []
    for case in cases:
        real = [{**r, "trace": case.name} for r in read_real_summary(Path(case.summary))]
        strategies = [r["strategy"] for r in real]
        sim = simulate_case(case, strategies, config, seeds, out)
        ranges = real_ranges(Path(case.summary))
        compared += [{**c, **ranges.get(c["strategy"], {})} for c in compare_with_real(sim, real)]
    agree = agreement(compared)
    by_name = {case.name: Path(case.summary).with_name("runs.csv") for case in cases}
    for row in agree:
        runs_csv = by_name[row["trace"]]
        row["seed_tau"] = seed_agreement(per_seed_ttas(runs_csv)) if runs_csv.is_file() else None
    return compared, agree


def report(compared: list[dict[str, Any]], agree: list[dict[str, Any]], cases: list[Case], config: BenchConfig, seeds: int) -> str:
    calibration = config.calibration or f"{config.task} (shipped)"
    lines = [f"# Simulator vs real runs\n\nSimulated: {config.workers} workers, calibration {calibration}, median TTA over the "
             f"real runs' seeds, each paired with that seed's real clean SSGD (its updates to target and time scale; "
             f"{seeds} unpaired seeds where no runs.csv lies beside the summary). Real: the medians of each case's "
             "summary.csv. Clean SSGD is the reference, left out of the ranking and of the mean errors:\n"]
    lines += [f"- {c.name}: `{c.summary}` (trace `{c.trace}`"
              + (f", workers {c.trace_workers}" if c.trace_workers else "") + f", stretch {c.stretch})" for c in cases]
    lines += ["", "## Ranking and error per trace", "", agreement_table(agree), "## Per run", "", sim_vs_real_table(compared)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sim_vs_real", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", nargs="+", action="append", required=True, metavar="WORD",
                        help="NAME SUMMARY TRACE [trace_workers=A,B,..] [stretch=F]")
    parser.add_argument("--calibration", default=None, help="simulator calibration TOML (default: shipped for --task)")
    parser.add_argument("--task", default="digits")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=3, help="simulated seeds per strategy (median TTA)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        cases = [parse_case(words) for words in args.case]
        if args.seeds < 1:
            raise ValueError(f"--seeds {args.seeds}: must be >= 1")
        if args.calibration and not Path(args.calibration).is_file():
            raise ValueError(f"--calibration {args.calibration!r} is not a file")
    except ValueError as exc:
        print(f"sim_vs_real: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = BenchConfig(traces=(), out=str(out), sim=True, workers=args.workers, seed=args.seed, task=args.task,
                         calibration=args.calibration)
    with tempfile.TemporaryDirectory(prefix="sim_vs_real-") as runs:  # per-run sim files are not kept
        compared, agree = compare_cases(cases, config, args.seeds, Path(runs))
    text = report(compared, agree, cases, config, args.seeds)
    (out / "sim_vs_real.md").write_text(text)
    print(agreement_table(agree))
    print(f"wrote {out / 'sim_vs_real.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
