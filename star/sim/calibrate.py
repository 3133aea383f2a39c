"""Fit the simulator's cost and convergence models to a short real clean-SSGD run.

`run_calibration` launches a real job (`star.launch.launch`, processes on 127.0.0.1),
reads its result.json, curve.csv and events.jsonl, and `fit` (pure) turns them into
[cost] and [convergence] tables that `star sim --calibration FILE` merges under its
config:
- base_compute_s: median worker compute seconds per iteration (coordinator reports), as
  if computing alone: the job's workers share this host's cores (host_cores =
  os.cpu_count(), workers_per_host = workers), so a round's compute is stretched by
  workers / cores and the fit divides it out;
- compute_noise_cv: per worker, the coefficient of variation of its compute seconds
  (median over workers; the coordinator's compute_s_cv);
- transfers: median push seconds (x2 for push+pull) over the model's real bytes;
- overhead_s: seconds per SSGD round (slope of time vs version on the curve) not
  explained by compute + transfers (RPC, Python, a busy 2-core host: the residual);
- updates_to_target: the version at which the target was reached;
- amp_time_factor: bf16-autocast / fp32 step time of the task, timed in-process;
- resize_s: base_compute_s x the extra time of a first step at a new batch size over a
  steady one (`resize_cost_ratio`, timed in-process);
- staleness_penalty (convergence): from a second, clean ASGD run of the same job — the
  value of p for which the model's progress per ASGD update, averaged over the staleness
  histogram the PSs measured, reaches the target in as many updates as the real run
  took (`fit_staleness`). Without it (or if ASGD misses the target) the default stays.
No straggler strategy is fitted (both runs are clean), so sim-vs-real errors on
straggler traces are honest. B_noise is not fitted: the coordinator does not record
the online estimate for a fixed-mode run, so `[convergence] b_noise` stays 0 (every
batch equally efficient) unless set by hand.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from star.config import JobConfig


def fit(result: dict[str, Any], curve: list[tuple[float, int, float]], events: list[dict[str, Any]],
        model_bytes: float, amp_time_factor: float, batch_size: int, higher_is_better: bool = True,
        host_cores: float = 0.0, workers: int = 1) -> dict[str, dict[str, float]]:
    """[cost] and [convergence] tables from one clean SSGD run (see the module docstring)."""
    compute_s = float(result["compute_s_median"])
    stretch = max(1.0, workers / host_cores) if host_cores > 0 else 1.0  # a released round's workers share the cores
    comm_s = float(result["comm_s_median"])
    target = float(result["target"])
    updates = target_updates(result, events)
    points = [p for p in curve if p[1] > 0]
    (t0, v0, _), (t1, v1, _) = points[0], points[-1]
    round_s = (t1 - t0) / (v1 - v0) if v1 > v0 else compute_s + comm_s
    best = max(p[2] for p in curve) if higher_is_better else min(p[2] for p in curve)
    margin = max(abs(best - target), 0.02)
    final = min(1.0, best + margin) if higher_is_better else max(0.0, best - margin)
    return {
        "cost": {
            "base_compute_s": round(compute_s / stretch, 6),
            "base_batch": int(batch_size),
            "amp_time_factor": round(amp_time_factor, 4),
            "model_bytes": float(model_bytes),
            "bandwidth_bytes_per_s": round(model_bytes / (comm_s / 2), 1),
            "latency_s": 0.0,
            "overhead_s": round(max(0.0, round_s - compute_s - comm_s), 6),
            "compute_noise_cv": round(float(result.get("compute_s_cv") or 0.0), 4),
            **({"host_cores": float(host_cores), "workers_per_host": int(workers)} if host_cores > 0 else {}),
        },
        "convergence": {
            "updates_to_target": updates,
            "initial_metric": round(curve[0][2], 4),
            "target_metric": target,
            "final_metric": round(final, 4),
            "eval_period_s": 0.0,  # the evaluator evaluates at parameter versions, not on a clock: TTA is the
            # time of the update that reached the target (a 0.5 s grid tied strategies a few updates apart)
        },
    }


def fit_staleness(ssgd_updates: float, asgd_updates: float, staleness_histogram: dict[Any, int], workers: int,
                  b_noise: float = 0.0, batch_size: int = 1) -> float:
    """The staleness penalty p that makes the convergence model need `asgd_updates` single-gradient
    updates, with the measured staleness histogram, for the progress `ssgd_updates` SSGD updates give.

    Progress of one ASGD update with staleness s = (1/N)·e / (1 + p·s), e = the batch-efficiency
    ratio (1 + B_noise/(N·b)) / (1 + B_noise/b) (1 when B_noise = 0), so p solves
    mean_s 1/(1 + p·s) = N·U_ssgd / (e·U_asgd). Monotone in p: bisection. 0 when ASGD needed no more
    updates than staleness-free single gradients would."""
    counts = {int(k): int(v) for k, v in staleness_histogram.items() if int(v) > 0}
    if not counts or asgd_updates <= 0 or ssgd_updates <= 0:
        raise ValueError("fit_staleness needs positive update counts and a non-empty staleness histogram")
    total = sum(counts.values())
    efficiency = 1.0
    if b_noise > 0:
        efficiency = (1 + b_noise / (workers * batch_size)) / (1 + b_noise / batch_size)
    ratio = workers * ssgd_updates / (efficiency * asgd_updates)
    mean_worth = lambda p: sum(c / (1 + p * s) for s, c in counts.items()) / total  # noqa: E731
    if ratio >= 1 or max(counts) == 0:
        return 0.0
    lo, hi = 0.0, 1.0
    while mean_worth(hi) > ratio and hi < 1e6:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_worth(mid) > ratio else (lo, mid)
    return (lo + hi) / 2


def target_updates(result: dict[str, Any], events: list[dict[str, Any]]) -> float:
    """Updates applied when the target was reached (the run's last version if it has no such event)."""
    reached = [e for e in events if e.get("kind") == "target_reached"]
    return float(reached[0]["version"] if reached else result["updates"])


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


def resize_cost_ratio(task_name: str, base_batch: int, threads: int = 1, changes: int = 8, repeats: int = 5) -> float:
    """Extra time of the first step at a batch size the process has not run yet (what a worker pays when
    the coordinator resizes its batch), as a fraction of a later step at that size: median over `changes`
    sizes, timed in this process. A ratio, so it holds however busy the machine is while timing."""
    import torch

    from star.tasks import get_task
    from star.tasks.dataset import batch_stream

    torch.set_num_threads(threads)
    task = get_task(task_name)
    model = task.build_model(0)
    stream = batch_stream(task, 0, 1, 0, base_batch)  # in-memory tensors or a Dataset

    def step_s(batch: int) -> float:
        inputs, targets = stream.next_batch(batch)
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        task.loss_fn(model(inputs), targets).backward()
        return time.perf_counter() - start

    for _ in range(3):
        step_s(base_batch)
    extra = []
    for i in range(changes):
        size = max(1, base_batch + (i + 1) * (-1) ** i * 3)  # 67, 58, 73, ...: sizes not run before
        first = step_s(size)
        steady = sorted(step_s(size) for _ in range(repeats))[repeats // 2]
        extra.append((first - steady) / steady)
    return max(0.0, sorted(extra)[len(extra) // 2])


def run_calibration(task: str, out: str, workers: int = 4, ps: int = 2, seed: int = 0, max_time_s: float = 150.0,
                    progress=None, asgd: bool = True) -> dict[str, Any]:
    """Launch a clean SSGD job (and, with `asgd`, a clean ASGD one for the staleness penalty), fit, and
    write OUT/calibration.toml; returns the tables."""
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
                 batch_size=job.batch_size or task_obj.default_batch_size, higher_is_better=task_obj.higher_is_better,
                 host_cores=float(os.cpu_count() or 1), workers=workers)  # every process of the job runs on this host
    tables["cost"]["resize_s"] = round(resize_cost_ratio(task, tables["cost"]["base_batch"]) * tables["cost"]["base_compute_s"], 6)
    tables["measured"] = {"task": task, "workers": workers, "ps": ps, "seed": seed, "tta_s": round(result["tta_s"], 4),
                          "updates": result["updates"]}
    if asgd:
        asgd_job = dataclasses.replace(job, out=str(out_path / "asgd"), plan=dataclasses.replace(job.plan, mode="asgd"))
        asgd_result = launch(asgd_job, progress=progress)
        if asgd_result.get("reached") and asgd_result.get("ps_stats"):
            a_result, _, a_events = read_run(out_path / "asgd")
            a_updates = target_updates(a_result, a_events)
            histogram = asgd_result["ps_stats"][0]["staleness"]  # every PS applies every update: one is enough
            tables["convergence"]["staleness_penalty"] = round(fit_staleness(
                tables["convergence"]["updates_to_target"], a_updates, histogram, workers), 4)
            tables["measured"].update({"asgd_tta_s": round(asgd_result["tta_s"], 4), "asgd_updates": a_updates})
        else:
            tables["measured"]["asgd"] = f"did not reach the target ({asgd_result.get('reason')}): staleness_penalty not fitted"
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
