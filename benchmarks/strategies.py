"""Every strategy on the same task and trace, in one invocation: TTA table and mitigation ratio.

    python -m benchmarks.strategies --trace mid3x --out benchmarks/results/mid3x
    python -m benchmarks.strategies --trace ../shared/traces/alibaba-pai-2020/job_1_norm.csv --trace-workers 3,4,5,6 --trace-stretch 0.06

mitigation = (T_straggled − T_strategy) / (T_straggled − T_clean), with T_clean = SSGD
without the trace and T_straggled = SSGD with it. Also runs `auto` without a trace to
count false-positive detections. Each run is a real `star launch` (processes on
127.0.0.1), so a single TTA on a shared 2-core machine varies by some ±10–20%:
`--repeats N` runs every strategy with seeds seed..seed+N-1 (interleaved, so a slow
spell on the machine hits all strategies alike) and reports the median TTA and the
min–max range; the mitigation ratio is computed from the medians.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

from star.config import from_dict, JobConfig
from star.launch import launch
from star.traces import Trace, write_simple_csv

STRATEGIES = ("ssgd", "asgd", "kofn", "grouped", "exclude", "amp", "batch", "auto")


def middle_half_trace(path: Path, worker: int, factor: float, start: int, end: int, workers: int) -> Path:
    """One worker `factor`x slower for iterations [start, end): "the middle half of the run"."""
    rows = [(0, w, 1.0) for w in range(workers)] + [(start, worker, factor), (end, worker, 1.0), (100 * end, worker, 1.0)]
    write_simple_csv(Trace.from_rows(rows), path)
    return path


def run_one(args: argparse.Namespace, strategy: str, trace: str | None, out: Path, seed: int) -> dict:
    data = {
        "task": args.task, "workers": args.workers, "ps": args.ps, "out": str(out), "seed": seed,
        "max_time_s": args.max_time_s, "plan": {"mode": strategy},
    }
    if trace:
        data["trace"] = {"path": trace, "stretch": args.trace_stretch, **({"workers": args.trace_workers} if args.trace_workers else {})}
    result = launch(from_dict(JobConfig, data))
    return result


def mitigation(t_clean: float | None, t_straggled: float | None, t: float | None) -> float | None:
    if None in (t_clean, t_straggled, t) or t_straggled <= t_clean:
        return None
    return (t_straggled - t) / (t_straggled - t_clean)


def median_or_none(values: list[float | None]) -> float | None:
    """The median TTA, or None when half or more of the runs missed the target (a miss counts as +inf)."""
    ordered = sorted(float("inf") if v is None else v for v in values)
    m = statistics.median(ordered) if ordered else float("inf")
    return None if m == float("inf") else round(m, 3)


def summarise(raw: list[dict], names: list[str]) -> list[dict]:
    """One row per run name: median TTA over repeats, its range, and ratios computed from the medians."""
    rows = []
    for name in names:
        runs = [r for r in raw if r["run"] == name]
        ttas = [r["tta_s"] if r["reached"] else None for r in runs]
        reached = [t for t in ttas if t is not None]
        rows.append({
            "run": name, "strategy": runs[0]["strategy"], "trace": runs[0]["trace"], "runs": len(runs),
            "reached": f"{len(reached)}/{len(runs)}", "tta_s": median_or_none(ttas),
            "tta_min_s": min(reached) if reached else None, "tta_max_s": max(reached) if reached else None,
            "detections": statistics.median(r["detections"] for r in runs),
            "plan_switches": statistics.median(r["plan_switches"] for r in runs),
            "amp_toggles": statistics.median(r["amp_toggles"] for r in runs),
        })
    tta = {r["run"]: r["tta_s"] for r in rows}
    for row in rows:
        row["vs_ssgd"] = round(tta[row["run"]] / tta["ssgd"], 3) if tta.get("ssgd") and tta[row["run"]] else None
        row["vs_clean"] = round(tta[row["run"]] / tta["clean"], 3) if tta.get("clean") and tta[row["run"]] else None
        m = mitigation(tta.get("clean"), tta.get("ssgd"), tta[row["run"]]) if row["trace"] != "none" else None
        row["mitigation"] = None if m is None else round(m, 3)
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="digits")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace", default="mid3x", help="a trace file, or 'mid3x': worker 3 is 3x slower for the middle half")
    parser.add_argument("--trace-workers", default=None)
    parser.add_argument("--trace-stretch", type=float, default=1.0)
    parser.add_argument("--mid-start", type=int, default=20, help="mid3x: first slow iteration")
    parser.add_argument("--mid-end", type=int, default=60, help="mid3x: first normal iteration again")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--max-time-s", type=float, default=150.0)
    parser.add_argument("--repeats", type=int, default=1, help="runs per strategy (seeds seed, seed+1, ...); the table shows medians")
    parser.add_argument("--out", default="benchmarks/results/strategies")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = args.trace
    if trace == "mid3x":
        trace = str(middle_half_trace(out / "mid3x.csv", args.workers - 1, 3.0, args.mid_start, args.mid_end, args.workers))

    runs = [("ssgd", None, "clean")] + [(s, trace, s) for s in args.strategies.split(",")] + [("auto", None, "auto-clean")]
    seeds = [args.seed + r for r in range(args.repeats)]
    raw: list[dict] = []
    total = len(runs) * len(seeds)
    for repeat, seed in enumerate(seeds):
        for index, (strategy, run_trace, name) in enumerate(runs, 1):
            print(f"[{repeat * len(runs) + index}/{total}] {name} seed={seed} ...", file=sys.stderr, flush=True)
            result = run_one(args, strategy, run_trace, out / name / f"seed{seed}", seed)
            raw.append({
                "run": name, "strategy": strategy, "trace": Path(run_trace).name if run_trace else "none", "seed": seed,
                "reached": result["reached"], "tta_s": result["tta_s"], "final_metric": result["final_metric"],
                "updates": result["updates"], "detections": result.get("straggler_detections", 0),
                "plan_switches": result.get("plan_switches", 0), "amp_toggles": result.get("amp_toggles", 0),
            })
            print(f"    reached={result['reached']} tta_s={result['tta_s']} detections={raw[-1]['detections']}", file=sys.stderr)
    write_csv(out / "runs.csv", raw)
    rows = summarise(raw, [name for _, _, name in runs])
    write_csv(out / "summary.csv", rows)
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join("" if r[c] is None else (f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c])) for c in columns) + " |" for r in rows]
    table = "\n".join(lines)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    print(json.dumps({"task": args.task, "trace": Path(trace).name, "repeats": args.repeats,
                      "median_tta_s": {r["run"]: r["tta_s"] for r in rows}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
