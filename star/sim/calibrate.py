"""Fit the simulator's cost and convergence models to a short real clean-SSGD run.

`run_calibration` launches a real job (`star.launch.launch`, processes on 127.0.0.1),
reads its result.json, curve.csv and events.jsonl, and `fit` (pure) turns them into
[cost] and [convergence] tables that `star sim --calibration FILE` merges under its
config:
- base_compute_s: median worker compute seconds per iteration (coordinator reports);
- transfers: median push seconds (x2 for push+pull) over the model's real bytes;
- overhead_s: seconds per SSGD round (slope of time vs version on the curve) not
  explained by compute + transfers (RPC, Python, a busy 2-core host: the residual);
- updates_to_target: the version at which the target was reached;
- amp_time_factor: bf16-autocast / fp32 step time of the task, timed in-process.
Only clean SSGD is used: no strategy is fitted, so sim-vs-real errors are honest.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from star.config import JobConfig


def fit(result: dict[str, Any], curve: list[tuple[float, int, float]], events: list[dict[str, Any]],
        model_bytes: float, amp_time_factor: float, batch_size: int, higher_is_better: bool = True) -> dict[str, dict[str, float]]:
    """[cost] and [convergence] tables from one clean SSGD run (see the module docstring)."""
    compute_s = float(result["compute_s_median"])
    comm_s = float(result["comm_s_median"])
    target = float(result["target"])
    reached = [e for e in events if e.get("kind") == "target_reached"]
    updates = float(reached[0]["version"] if reached else result["updates"])
    points = [p for p in curve if p[1] > 0]
    (t0, v0, _), (t1, v1, _) = points[0], points[-1]
    round_s = (t1 - t0) / (v1 - v0) if v1 > v0 else compute_s + comm_s
    best = max(p[2] for p in curve) if higher_is_better else min(p[2] for p in curve)
    margin = max(abs(best - target), 0.02)
    final = min(1.0, best + margin) if higher_is_better else max(0.0, best - margin)
    return {
        "cost": {
            "base_compute_s": round(compute_s, 6),
            "base_batch": int(batch_size),
            "amp_time_factor": round(amp_time_factor, 4),
            "model_bytes": float(model_bytes),
            "bandwidth_bytes_per_s": round(model_bytes / (comm_s / 2), 1),
            "latency_s": 0.0,
            "overhead_s": round(max(0.0, round_s - compute_s - comm_s), 6),
        },
        "convergence": {
            "updates_to_target": updates,
            "initial_metric": round(curve[0][2], 4),
            "target_metric": target,
            "final_metric": round(final, 4),
        },
    }


def read_run(out: Path) -> tuple[dict[str, Any], list[tuple[float, int, float]], list[dict[str, Any]]]:
    result = json.loads((out / "result.json").read_text())
    with open(out / "curve.csv", newline="") as handle:
        curve = [(float(r["time_s"]), int(r["version"]), float(r["metric"])) for r in csv.DictReader(handle)]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines() if line.strip()]
    return result, curve, events


def amp_factor(task_name: str, threads: int = 1) -> float:
    """bf16 autocast step time / fp32 step time, timed in this process."""
    import torch

    from star.tasks import get_task
    from star.tasks.calibrate import time_step

    torch.set_num_threads(threads)
    task = get_task(task_name)
    return time_step(task, True) / time_step(task, False)


def run_calibration(task: str, out: str, workers: int = 4, ps: int = 2, seed: int = 0, max_time_s: float = 150.0,
                    progress=None) -> dict[str, Any]:
    """Launch one clean SSGD job, fit, and write OUT/calibration.toml; returns the tables."""
    from star.flat import FlatModel
    from star.launch import launch
    from star.tasks import get_task

    out_path = Path(out)
    job = JobConfig(task=task, workers=workers, ps=ps, seed=seed, max_time_s=max_time_s, out=str(out_path / "ssgd"))
    result = launch(job, progress=progress)
    if not result.get("reached"):
        raise RuntimeError(f"calibration run did not reach the target: {result.get('reason')}")
    task_obj = get_task(task)
    model_bytes = FlatModel(task_obj.build_model(seed)).numel * 4.0
    tables = fit(*read_run(out_path / "ssgd"), model_bytes=model_bytes, amp_time_factor=amp_factor(task),
                 batch_size=job.batch_size or task_obj.default_batch_size, higher_is_better=task_obj.higher_is_better)
    tables["measured"] = {"task": task, "workers": workers, "ps": ps, "seed": seed, "tta_s": round(result["tta_s"], 4),
                          "updates": result["updates"]}
    write_calibration(out_path / "calibration.toml", tables)
    return tables


def write_calibration(path: Path, tables: dict[str, Any]) -> Path:
    lines = ["# Simulator calibration written by `star calibrate`; read by `star sim --calibration FILE`."]
    for name, table in tables.items():
        lines.append(f"\n[{name}]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in table.items())  # JSON scalars are valid TOML
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
