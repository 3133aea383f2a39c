"""Every strategy on the same task and trace, in one invocation: TTA table and mitigation ratio.

    python -m benchmarks.strategies --trace mid3x --out benchmarks/results/mid3x
    python -m benchmarks.strategies --trace ../shared/traces/alibaba-pai-2020/job_1_norm.csv --trace-workers 3,4,5,6 --trace-stretch 0.06

mitigation = (T_straggled − T_strategy) / (T_straggled − T_clean), with T_clean = SSGD
without the trace and T_straggled = SSGD with it. Also runs `auto` without a trace to
count false-positive detections. Each run is a real `star launch` (processes on
127.0.0.1). Paired design: `--repeats N` runs every strategy with seeds seed..seed+N-1,
interleaved (order rotated per repeat, so a slow spell on the machine hits all strategies
alike). Per run name, summary.csv has the median TTA and its bootstrap interval
(`tta_lo_s`, `tta_hi_s`; --level, default 90%), TTA's two factors (median
`updates_to_target`, median `s_per_update`, and the CV of updates to target across seeds),
and paired ratios with bootstrap intervals to SSGD on the trace (`vs_ssgd*`) and to the
best other strategy on it (`vs_best*`, the one named in `best`). With 3 repeats a
bootstrap interval of a median is [min, max] of the three (true coverage 75%).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

from star.cli_checks import check_task, check_trace, check_trace_workers
from star.config import ConfigError, from_dict, JobConfig
from star.launch import launch_or_stop
from star.report import write_report
from star.traces import Trace, write_simple_csv
from star.tta import bootstrap_median, bootstrap_ratio, coefficient_of_variation

STRATEGIES = ("ssgd", "asgd", "kofn", "grouped", "exclude", "amp", "batch", "auto")


def middle_half_trace(path: Path, worker: int, factor: float, start: int, end: int, workers: int) -> Path:
    """One worker `factor`x slower for iterations [start, end): "the middle half of the run"."""
    rows = [(0, w, 1.0) for w in range(workers)] + [(start, worker, factor), (end, worker, 1.0), (100 * end, worker, 1.0)]
    write_simple_csv(Trace.from_rows(rows), path)
    return path


def run_config(args: argparse.Namespace, strategy: str, trace: str | None, out: Path, seed: int) -> JobConfig:
    """The job one run launches (raises ConfigError naming a bad field, as `star launch` would)."""
    data = {
        "task": args.task, "workers": args.workers, "ps": args.ps, "out": str(out), "seed": seed,
        "max_time_s": args.max_time_s, "plan": {"mode": strategy},
    }
    if trace:
        data["trace"] = {"path": trace, "stretch": args.trace_stretch, **({"workers": args.trace_workers} if args.trace_workers else {})}
    return from_dict(JobConfig, data)


def run_one(args: argparse.Namespace, strategy: str, trace: str | None, out: Path, seed: int) -> dict:
    result = launch_or_stop(run_config(args, strategy, trace, out, seed))
    write_report([out])  # OUT/<run>/seed<N>/report.png and report.md
    return result


def measure(args: argparse.Namespace, runs: list[tuple], seeds: list[int], out: Path, raw: list[dict]) -> None:
    """Every run for every seed, interleaved; each run's row is appended to `raw` (and runs.csv) as it ends."""
    total = len(runs) * len(seeds)
    for repeat, seed in enumerate(seeds):
        order = runs[repeat % len(runs):] + runs[:repeat % len(runs)]  # rotated: no strategy always runs first
        for index, (strategy, run_trace, name) in enumerate(order, 1):
            print(f"[{repeat * len(runs) + index}/{total}] {name} seed={seed} ...", file=sys.stderr, flush=True)
            result = run_one(args, strategy, run_trace, out / name / f"seed{seed}", seed)
            raw.append({
                "run": name, "strategy": strategy, "trace": Path(run_trace).name if run_trace else "none", "seed": seed,
                "reached": result["reached"], "tta_s": result["tta_s"], "final_metric": result["final_metric"],
                "updates": result["updates"], "updates_to_target": result.get("updates_to_target"),
                "s_per_update": result.get("s_per_update"), "detections": result.get("straggler_detections", 0),
                "plan_switches": result.get("plan_switches", 0), "amp_toggles": result.get("amp_toggles", 0),
                "batch_resizes": result.get("batch_resizes", 0),
            })
            print(f"    reached={result['reached']} tta_s={result['tta_s']} updates_to_target={result.get('updates_to_target')} "
                  f"detections={raw[-1]['detections']} batch_resizes={raw[-1]['batch_resizes']}", file=sys.stderr)
            write_csv(out / "runs.csv", raw)  # after every run: an interrupted benchmark keeps what it measured


def mitigation(t_clean: float | None, t_straggled: float | None, t: float | None) -> float | None:
    if None in (t_clean, t_straggled, t) or t_straggled <= t_clean:
        return None
    return (t_straggled - t) / (t_straggled - t_clean)


def _median(values: list[float | None]) -> float | None:
    """The median, or None when there are none (misses are left out of these factor medians)."""
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 4) if present else None


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def summarise(raw: list[dict], names: list[str], level: float = 0.9) -> list[dict]:
    """One row per run name: median TTA over the paired repeats and its bootstrap interval, the
    two factors of TTA (median updates to target, median s/update), and paired ratios to SSGD on
    the trace, to the best other strategy on it and to clean SSGD (median over seeds, bootstrap interval:
    with three seeds, auto-clean's 1.06 on the medians can be one slow run of an identical job)."""
    seeds = sorted({r["seed"] for r in raw})
    tta = {}  # run name -> TTA per seed (None: missed or not run)
    rows = []
    for name in names:
        by_seed = {r["seed"]: r for r in raw if r["run"] == name}
        runs = list(by_seed.values())
        tta[name] = [by_seed[s]["tta_s"] if s in by_seed and by_seed[s]["reached"] else None for s in seeds]
        interval = bootstrap_median(tta[name], level)
        updates = [r["updates_to_target"] for r in runs if r["reached"]]
        rows.append({
            "run": name, "strategy": runs[0]["strategy"], "trace": runs[0]["trace"], "runs": len(runs),
            "reached": f"{sum(r['reached'] for r in runs)}/{len(runs)}",
            "tta_s": _round(interval.median), "tta_lo_s": _round(interval.lo), "tta_hi_s": _round(interval.hi),
            "updates_to_target": _median(updates), "s_per_update": _median([r["s_per_update"] for r in runs if r["reached"]]),
            "updates_cv": _round(coefficient_of_variation(updates)),
            "detections": statistics.median(r["detections"] for r in runs),
            "plan_switches": statistics.median(r["plan_switches"] for r in runs),
            "amp_toggles": statistics.median(r["amp_toggles"] for r in runs),
            "batch_resizes": statistics.median(r["batch_resizes"] for r in runs),
        })
    medians = {r["run"]: r["tta_s"] for r in rows}
    others = [r["run"] for r in rows if r["trace"] != "none" and r["strategy"] != "auto" and medians[r["run"]] is not None]
    best = min(others, key=lambda n: medians[n], default=None)
    for row in rows:
        name = row["run"]
        for label, ref in (("vs_ssgd", "ssgd"), ("vs_best", best), ("vs_clean", "clean")):
            ratio = bootstrap_ratio(tta[name], tta[ref], level) if ref in tta else None
            row[label], row[f"{label}_lo"], row[f"{label}_hi"] = (None, None, None) if ratio is None else map(_round, ratio)
        row["best"] = best
        m = mitigation(medians.get("clean"), medians.get("ssgd"), medians[name]) if row["trace"] != "none" else None
        row["mitigation"] = _round(m)
        row["mitigation_paired"], row["mitigation_paired_lo"], row["mitigation_paired_hi"] = paired_mitigation(
            tta.get("clean"), tta.get("ssgd"), tta[name], level) if row["trace"] != "none" else (None, None, None)
    return rows


def paired_mitigation(clean: list[float | None] | None, straggled: list[float | None] | None, runs: list[float | None],
                      level: float) -> tuple[float | None, float | None, float | None]:
    """Mitigation seed by seed (each seed's run against that seed's clean and SSGD runs), its median and bootstrap
    interval. `mitigation` above divides medians that may come from different seeds; with updates to target
    varying by seed (36-44 on digits), that mixes the seeds' convergence into the share of delay removed.
    Seeds where it is undefined (a miss, or SSGD no slower than clean) are left out."""
    if clean is None or straggled is None:
        return None, None, None
    per_seed = [mitigation(c, s, t) for c, s, t in zip(clean, straggled, runs)]
    interval = bootstrap_median([m for m in per_seed if m is not None], level)
    return _round(interval.median), _round(interval.lo), _round(interval.hi)


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def write_tables(out: Path, rows: list[dict]) -> str:
    """summary.csv and summary.md in `out`; returns the markdown table."""
    write_csv(out / "summary.csv", rows)
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join("" if r[c] is None else (f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c])) for c in columns) + " |" for r in rows]
    table = "\n".join(lines)
    (out / "summary.md").write_text(table + "\n")
    return table


def read_runs(path: Path) -> list[dict]:
    """runs.csv back into the rows `measure` appended (numbers as numbers, misses as None)."""
    def number(text: str, kind=float):
        return None if text in ("", "None") else kind(float(text)) if kind is int else kind(text)

    with open(path, newline="") as handle:
        return [{**r, "seed": int(r["seed"]), "reached": r["reached"] == "True", "tta_s": number(r["tta_s"]),
                 "final_metric": number(r["final_metric"]), "updates": number(r["updates"], int),
                 "updates_to_target": number(r["updates_to_target"], int), "s_per_update": number(r["s_per_update"]),
                 **{k: number(r[k], int) for k in ("detections", "plan_switches", "amp_toggles", "batch_resizes")}}
                for r in csv.DictReader(handle)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.strategies", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="digits")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace", default="mid3x", help="a trace file, or 'mid3x': the last worker is 3x slower from --mid-start to --mid-end")
    parser.add_argument("--trace-workers", default=None)
    parser.add_argument("--trace-stretch", type=float, default=1.0)
    # digits' clean SSGD reaches its target in ~40 updates (inputs standardised; ~80 before): the middle half
    parser.add_argument("--mid-start", type=int, default=10, help="mid3x: first slow iteration")
    parser.add_argument("--mid-end", type=int, default=30, help="mid3x: first normal iteration again")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--max-time-s", type=float, default=150.0)
    parser.add_argument("--repeats", type=int, default=1, help="runs per strategy (seeds seed, seed+1, ...); the table shows medians")
    parser.add_argument("--level", type=float, default=0.9, help="bootstrap interval level")
    parser.add_argument("--out", default="benchmarks/results/strategies")
    parser.add_argument("--summarise-only", action="store_true",
                        help="run nothing: summarise OUT/runs.csv again (summary.csv and summary.md) with this code's columns")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if not 0 < args.level < 1:
        print(f"strategies: {ConfigError('--level', args.level, 'must be in (0, 1), e.g. 0.9')}", file=sys.stderr)
        return 2
    if args.summarise_only:
        if not (out / "runs.csv").is_file():
            print(f"strategies: --summarise-only needs {out / 'runs.csv'} (a folder an earlier run wrote); not found",
                  file=sys.stderr)
            return 2
        raw = read_runs(out / "runs.csv")
        names = list(dict.fromkeys(r["run"] for r in raw))
        names = [n for n in ("clean",) if n in names] + [n for n in names if n not in ("clean", "auto-clean")] + \
            [n for n in ("auto-clean",) if n in names]
        print(write_tables(out, summarise(raw, names, args.level)))
        return 0
    try:  # before any run: a bad value would otherwise end the benchmark at the first run that uses it, or in its workers
        for flag, value in (("--repeats", args.repeats), ("--workers", args.workers)):
            if value < 1:
                raise ConfigError(flag, value, "must be >= 1")
        check_task("--task", args.task)
        if args.trace == "mid3x":
            if args.mid_start < 0:
                raise ConfigError("--mid-start", args.mid_start, "must be >= 0")
            if args.mid_end <= args.mid_start:
                raise ConfigError("--mid-end", args.mid_end, f"must be > --mid-start ({args.mid_start})")
        else:
            check_trace_workers("--trace-workers", check_trace("--trace", args.trace), args.trace_workers, args.workers)
    except ConfigError as exc:
        print(f"strategies: {exc}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    trace = args.trace
    if trace == "mid3x":
        trace = str(middle_half_trace(out / "mid3x.csv", args.workers - 1, 3.0, args.mid_start, args.mid_end, args.workers))

    runs = [("ssgd", None, "clean")] + [(s, trace, s) for s in args.strategies.split(",")] + [("auto", None, "auto-clean")]
    seeds = [args.seed + r for r in range(args.repeats)]
    try:
        for strategy, run_trace, name in runs:
            run_config(args, strategy, run_trace, out / name / f"seed{seeds[0]}", seeds[0])
    except ConfigError as exc:
        print(f"strategies: {exc}", file=sys.stderr)
        return 2
    raw: list[dict] = []
    try:
        measure(args, runs, seeds, out, raw)
    except KeyboardInterrupt:
        print(f"interrupted: the {len(raw)} runs measured so far are in {out / 'runs.csv'}", file=sys.stderr)
        return 130
    rows = summarise(raw, [name for _, _, name in runs], args.level)
    table = write_tables(out, rows)
    write_report([out / name / f"seed{seeds[0]}" for _, _, name in runs], out)  # the first seed's curves overlaid: OUT/report.png
    print(table)
    print(json.dumps({"task": args.task, "trace": Path(trace).name, "repeats": args.repeats,
                      "median_tta_s": {r["run"]: r["tta_s"] for r in rows}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
