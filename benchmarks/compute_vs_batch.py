"""A task's forward+backward time at several batch sizes, in one process: is compute linear in the batch?

    python -m benchmarks.compute_vs_batch --task gpt --batches 1,2,4,8,16

Batch sizing and the straggler detector read a worker's speed as compute seconds per sample, which
is exact only when compute has no fixed part per iteration. This times the step a worker takes
(zero the flat gradient, forward, backward) alone, fp32 and bf16 autocast, so a fixed part seen in a
job's reports can be told apart from one the model itself has. Prints one line per (amp, batch)
and, last, one JSON object with the fitted fixed and per-sample seconds of each precision.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from star.flat import FlatModel
from star.tasks import TaskData, get_task
from star.tasks.registry import TaskSpecError


def step_s(task, model, flat: FlatModel, batch: int, amp: bool, repeats: int) -> float:
    inputs, targets = task.train.inputs[:batch], task.train.targets[:batch]
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        start = time.perf_counter()
        flat.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = task.loss_fn(model(inputs), targets)
        loss.backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def batch_sizes(text: str) -> list[int]:
    """argparse type: '1,2,4' -> [1, 2, 4], each >= 1."""
    try:
        sizes = [int(b) for b in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated whole numbers, e.g. 1,2,4,8") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every batch size must be >= 1")
    return sizes


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compute_vs_batch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="gpt", help="a built-in task whose train data is tensors (gpt, digits, ...)")
    p.add_argument("--batches", type=batch_sizes, default="1,2,4,8,16", help="batch sizes, comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="timed steps per batch size (median)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (a job's worker uses 1)")
    args = p.parse_args()
    if args.repeats < 1 or args.threads < 1:
        p.error(f"--repeats {args.repeats}, --threads {args.threads}: each must be >= 1")
    torch.set_num_threads(args.threads)
    try:
        task = get_task(args.task)
    except (TaskSpecError, ValueError) as exc:
        p.error(f"--task {args.task!r}: {exc}")
    if not isinstance(task.train, TaskData):
        p.error(f"--task {args.task!r}: its train data is a Dataset; this benchmark times tasks whose data are tensors")
    batches = args.batches
    if max(batches) > len(task.train.inputs):
        p.error(f"--batches: {max(batches)} exceeds the task's {len(task.train.inputs)} training samples")
    model = task.build_model(0)
    flat = FlatModel(model)
    fits = {}
    for amp in (False, True):
        seconds = [step_s(task, model, flat, b, amp, args.repeats) for b in batches]
        for b, s in zip(batches, seconds):
            print(f"amp={int(amp)} batch={b:4d} step_s={s:.4f} per_sample_s={s / b:.4f}", flush=True)
        per_sample, fixed = np.polyfit(batches, seconds, 1)
        fits["bf16" if amp else "fp32"] = {"fixed_s": round(float(fixed), 4), "per_sample_s": round(float(per_sample), 4)}
    print(json.dumps({"task": task.name, "threads": args.threads, "batches": batches, **fits}))


if __name__ == "__main__":
    main()
