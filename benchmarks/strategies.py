"""Every strategy on the same task and trace, in one invocation: TTA table and mitigation ratio.

    python -m benchmarks.strategies --trace mid3x --out benchmarks/results/mid3x
    python -m benchmarks.strategies --trace ../shared/traces/alibaba-pai-2020/job_1_norm.csv --trace-workers 3,4,5,6 --trace-stretch 0.06

mitigation = (T_straggled − T_strategy) / (T_straggled − T_clean), with T_clean = SSGD
without the trace and T_straggled = SSGD with it. Also runs `auto` without a trace to
count false-positive detections. Each run is a real `star launch` (processes on
127.0.0.1), so figures on a shared 2-core machine vary by some ±10–20% between runs.
"""

from __future__ import annotations

import argparse
import csv
import json
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


def run_one(args: argparse.Namespace, strategy: str, trace: str | None, out: Path) -> dict:
    data = {
        "task": args.task, "workers": args.workers, "ps": args.ps, "out": str(out), "seed": args.seed,
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
    parser.add_argument("--out", default="benchmarks/results/strategies")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = args.trace
    if trace == "mid3x":
        trace = str(middle_half_trace(out / "mid3x.csv", args.workers - 1, 3.0, args.mid_start, args.mid_end, args.workers))

    runs = [("ssgd", None, "clean")] + [(s, trace, s) for s in args.strategies.split(",")] + [("auto", None, "auto-clean")]
    rows = []
    for index, (strategy, run_trace, name) in enumerate(runs, 1):
        print(f"[{index}/{len(runs)}] {name} ...", file=sys.stderr, flush=True)
        result = run_one(args, strategy, run_trace, out / name)
        rows.append({
            "run": name, "strategy": strategy, "trace": Path(run_trace).name if run_trace else "none",
            "reached": result["reached"], "tta_s": result["tta_s"], "final_metric": result["final_metric"],
            "updates": result["updates"], "detections": result.get("straggler_detections", 0),
            "plan_switches": result.get("plan_switches", 0), "amp_toggles": result.get("amp_toggles", 0),
        })
        print(f"    reached={result['reached']} tta_s={result['tta_s']} detections={rows[-1]['detections']}", file=sys.stderr)

    tta = {r["run"]: (r["tta_s"] if r["reached"] else None) for r in rows}
    for row in rows:
        row["vs_ssgd"] = round(tta[row["run"]] / tta["ssgd"], 3) if tta.get("ssgd") and tta[row["run"]] else None
        row["mitigation"] = mitigation(tta.get("clean"), tta.get("ssgd"), tta[row["run"]]) if row["trace"] != "none" else None
        if row["mitigation"] is not None:
            row["mitigation"] = round(row["mitigation"], 3)

    columns = list(rows[0])
    with open(out / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join("" if r[c] is None else (f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c])) for c in columns) + " |" for r in rows]
    table = "\n".join(lines)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    print(json.dumps({"task": args.task, "trace": Path(trace).name, "tta_s": tta}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
