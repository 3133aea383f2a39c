"""PyTorch DDP against STAR on the same job, in one invocation: clean speed and TTA under a straggler trace.

    python -m benchmarks.ddp_vs_star --task gpt --preset 10m --workers 4 --ps 2 --trace mid3x --repeats 3

Per repeat (seed, seed+1, ...; every run of a repeat uses the same seed, and the runs are
interleaved so a slow spell of a shared machine hits every row alike):
  ddp clean, STAR ssgd clean, ddp under the trace, STAR ssgd under it, STAR auto under it.
Seconds per iteration come from each run's curve.csv, the same way for both systems:
(last - first evaluation time) / (last - first version), one version being one
synchronous step (a DDP step; a STAR round). TTA is the time from the first update to
the first evaluation at the target (median over repeats; a miss counts as +inf).
Prints a table, writes OUT/runs.csv and OUT/summary.md, and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Callable

from benchmarks.strategies import middle_half_trace, write_csv
from star.config import ConfigError, JobConfig, from_dict
from star.devices import check_device_available
from star.launch import launch_or_stop
from star.tasks.registry import PRESET_SPECS, TASK_NAMES
from star.tta import median_or_none

RUNS = (  # (row name, plan mode, under the trace?)
    ("ddp-clean", "ddp", False),
    ("star-ssgd-clean", "ssgd", False),
    ("ddp", "ddp", True),
    ("star-ssgd", "ssgd", True),
    ("star-auto", "auto", True),
)


class BenchError(ValueError):
    """A bad command line: names the flag."""


def task_name(task: str, preset: str | None) -> str:
    """`--task gpt --preset 50m` -> gpt-50m; a combination the registry lacks names the flag."""
    name = f"{task}-{preset}" if preset else task
    if name not in TASK_NAMES and name not in PRESET_SPECS:
        flag = "--preset" if preset else "--task"
        known = sorted(n for n in (*TASK_NAMES, *PRESET_SPECS))
        raise BenchError(f"{flag} {preset or task!r}: no built-in task {name!r} (known: {', '.join(known)})")
    return name


def s_per_iter(curve_path: Path) -> float | None:
    """Seconds per synchronous step between the first sightings of the first and last versions evaluated
    (a run that stops mid-step leaves a flat tail of one version, which must not count); None with fewer
    than two versions."""
    first_seen: dict[int, float] = {}
    try:
        with open(curve_path, newline="") as handle:
            for row in csv.DictReader(handle):
                first_seen.setdefault(int(row["version"]), float(row["time_s"]))
    except OSError:
        return None
    if len(first_seen) < 2:
        return None
    low, high = min(first_seen), max(first_seen)
    return (first_seen[high] - first_seen[low]) / (high - low)


def job(args: argparse.Namespace, task: str, mode: str, trace: str | None, out: Path, seed: int) -> JobConfig:
    data = {"task": task, "workers": args.workers, "out": str(out), "seed": seed, "max_time_s": args.max_time_s,
            "plan": {"mode": mode}, "device": args.device, "threads_per_process": args.threads_per_process}
    if mode != "ddp":
        data["ps"] = args.ps
        if args.checkpoint_every_s is not None:
            data["faults"] = {"checkpoint_every_s": args.checkpoint_every_s}
    if args.target is not None:
        data["target"] = args.target
    if args.batch_size is not None:
        data["batch_size"] = args.batch_size
    if trace:
        data["trace"] = {"path": trace, "stretch": args.trace_stretch, **({"workers": args.trace_workers} if args.trace_workers else {})}
    return from_dict(JobConfig, data)


def summarise(raw: list[dict]) -> list[dict]:
    rows = []
    for name, mode, traced in RUNS:
        runs = [r for r in raw if r["run"] == name]
        if not runs:
            continue
        speeds = [r["s_per_iter"] for r in runs if r["s_per_iter"] is not None]
        reached = [r["tta_s"] for r in runs if r["reached"]]
        rows.append({"run": name, "mode": mode, "trace": runs[0]["trace"], "runs": len(runs),
                     "reached": f"{len(reached)}/{len(runs)}",
                     "s_per_iter": round(statistics.median(speeds), 4) if speeds else None,
                     "tta_s": median_or_none([r["tta_s"] if r["reached"] else None for r in runs]),
                     "tta_min_s": min(reached) if reached else None, "tta_max_s": max(reached) if reached else None})
    return rows


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return round(numerator / denominator, 3) if numerator is not None and denominator else None


def headline(args: argparse.Namespace, task: str, trace_name: str, rows: list[dict]) -> dict:
    """The final JSON line: medians per row and the two ratios the goals are stated in."""
    by_run = {r["run"]: r for r in rows}
    get = lambda run, key: by_run.get(run, {}).get(key)  # noqa: E731
    figures = {
        "task": task, "trace": trace_name, "workers": args.workers, "ps": args.ps, "repeats": args.repeats,
        "device": args.device,
        "ddp_clean_s_per_iter": get("ddp-clean", "s_per_iter"), "star_clean_s_per_iter": get("star-ssgd-clean", "s_per_iter"),
        "ddp_clean_tta_s": get("ddp-clean", "tta_s"), "star_clean_tta_s": get("star-ssgd-clean", "tta_s"),
        "ddp_tta_s": get("ddp", "tta_s"), "star_ssgd_tta_s": get("star-ssgd", "tta_s"), "star_auto_tta_s": get("star-auto", "tta_s"),
    }
    figures["star_vs_ddp_clean_s_per_iter"] = ratio(figures["star_clean_s_per_iter"], figures["ddp_clean_s_per_iter"])
    figures["star_auto_vs_ddp_tta"] = ratio(figures["star_auto_tta_s"], figures["ddp_tta_s"])
    return figures


def markdown(rows: list[dict]) -> str:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join("" if r[c] is None else (f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]))
                                for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ddp_vs_star", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="gpt", help="built-in task (gpt, resnet, digits, ...)")
    p.add_argument("--preset", default=None, help="size preset of the task, e.g. 1m, 10m, 50m, 120m for gpt")
    p.add_argument("--workers", type=int, default=4, help="workers (STAR) = ranks (DDP)")
    p.add_argument("--ps", type=int, default=2, help="STAR parameter servers")
    p.add_argument("--trace", default="mid3x", help="a trace file, or 'mid3x': the last worker 3x slower for the middle of the run")
    p.add_argument("--trace-workers", default=None, help="trace workers for run workers 0..N-1, e.g. 3,4,5,6")
    p.add_argument("--trace-stretch", type=float, default=1.0)
    p.add_argument("--mid-start", type=int, default=20, help="mid3x: first slow iteration")
    p.add_argument("--mid-end", type=int, default=60, help="mid3x: first normal iteration again")
    p.add_argument("--repeats", type=int, default=3, help="paired seeds; the table shows medians")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, default=None, help="metric target (default the task's)")
    p.add_argument("--batch-size", type=int, default=None, help="per worker (default the task's)")
    p.add_argument("--max-time-s", type=float, default=300.0, help="per run")
    p.add_argument("--threads-per-process", type=int, default=1,
                   help="torch intra-op threads of every worker, PS and DDP rank (a GPU host's spare cores speed the PSs' CPU update)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="where workers and DDP ranks compute (cuda: they share the visible GPUs round-robin)")
    p.add_argument("--checkpoint-every-s", type=float, default=None,
                   help="STAR rows: each PS checkpoints this often (default STAR's own, 10 s; 0: only at the end). "
                        "DDP rows write no checkpoints, so 0 compares the two without STAR's fault tolerance")
    p.add_argument("--rows", default=",".join(name for name, _, _ in RUNS), help="which rows to run (default all)")
    p.add_argument("--from-runs", action="store_true", help="run nothing: summarise OUT/runs.csv and the runs' curves again")
    p.add_argument("--out", default="benchmarks/results/ddp_vs_star")
    return p


def main(argv: list[str] | None = None, run: Callable[[JobConfig], dict] = launch_or_stop) -> int:
    """`run` starts one job and returns its result (tests pass a fake). Ctrl-C or SIGTERM stops the
    benchmark (exit 130) with the runs measured so far in OUT/runs.csv."""
    args = parser().parse_args(argv)
    try:
        task = task_name(args.task, args.preset)
        if args.workers < 1 or args.ps < 1 or args.repeats < 1:
            raise BenchError(f"--workers {args.workers}, --ps {args.ps}, --repeats {args.repeats}: each must be >= 1")
        if args.threads_per_process < 1:
            raise BenchError(f"--threads-per-process {args.threads_per_process}: must be >= 1")
        if args.checkpoint_every_s is not None and not args.checkpoint_every_s >= 0:
            raise BenchError(f"--checkpoint-every-s {args.checkpoint_every_s}: must be >= 0")
        unknown = set(args.rows.split(",")) - {name for name, _, _ in RUNS}
        if unknown:
            raise BenchError(f"--rows: unknown {', '.join(sorted(unknown))} (known: {', '.join(n for n, _, _ in RUNS)})")
        if args.trace != "mid3x" and not Path(args.trace).is_file():
            raise BenchError(f"--trace {args.trace!r}: no such file (or use 'mid3x')")
        check_device_available("--device", args.device)
    except (BenchError, ConfigError) as exc:
        print(f"ddp_vs_star: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = args.trace
    if trace == "mid3x":
        trace = str(middle_half_trace(out / "mid3x.csv", args.workers - 1, 3.0, args.mid_start, args.mid_end, args.workers))
    raw: list[dict] = []
    if args.from_runs:  # summarise runs already made (OUT/runs.csv), measuring their curves again
        with open(out / "runs.csv", newline="") as handle:
            raw = [{**r, "seed": int(r["seed"]), "reached": r["reached"] == "True",
                    "tta_s": float(r["tta_s"]) if r["tta_s"] else None,
                    "s_per_iter": s_per_iter(out / r["run"] / f"seed{r['seed']}" / "curve.csv")} for r in csv.DictReader(handle)]
    rows_to_run = [] if args.from_runs else [r for r in RUNS if r[0] in args.rows.split(",")]
    total = len(rows_to_run) * args.repeats
    try:
        for repeat in range(args.repeats):
            seed = args.seed + repeat
            for index, (name, mode, traced) in enumerate(rows_to_run, 1):
                print(f"[{repeat * len(rows_to_run) + index}/{total}] {name} seed={seed} ...", file=sys.stderr, flush=True)
                run_out = out / name / f"seed{seed}"
                result = run(job(args, task, mode, trace if traced else None, run_out, seed))
                raw.append({"run": name, "mode": mode, "trace": Path(trace).name if traced else "none", "seed": seed,
                            "reached": result["reached"], "tta_s": result["tta_s"], "final_metric": result["final_metric"],
                            "updates": result["updates"], "s_per_iter": s_per_iter(run_out / "curve.csv")})
                print(f"    reached={result['reached']} tta_s={result['tta_s']} s_per_iter={raw[-1]['s_per_iter']}", file=sys.stderr)
                write_csv(out / "runs.csv", raw)  # after every run: an interrupted benchmark keeps what it measured
    except KeyboardInterrupt:
        print(f"interrupted: the {len(raw)} runs measured so far are in {out / 'runs.csv'}", file=sys.stderr)
        return 130
    write_csv(out / "runs.csv", raw)
    rows = summarise(raw)
    table = markdown(rows)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    print(json.dumps(headline(args, task, "mid3x" if args.trace == "mid3x" else Path(args.trace).name, rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
