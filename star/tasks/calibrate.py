"""Reproduce how each task's defaults were chosen, in one process.

`simulate` runs synchronous data-parallel SGD exactly as the cluster would
(each worker's gradient on its own shard, averaged, one optimizer step), so
a task's default target/lr can be checked without starting servers.
`time_step` measures one worker iteration's compute, fp32 vs bf16 autocast.

    python -m star.tasks.calibrate digits --workers 4 --threads 1
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch

from star.tasks.base import Task
from star.tasks.registry import get_task
from star.tasks.dataset import batch_stream
from star.tasks.sharding import BatchStream


@dataclass(frozen=True)
class SimulationResult:
    steps_to_target: int | None
    history: tuple[tuple[int, float], ...]


def make_optimizer(task: Task, params, lr: float | None = None) -> torch.optim.Optimizer:
    """The task's default optimizer (for calibration only; servers own theirs)."""
    lr = task.default_lr if lr is None else lr
    if task.default_optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=task.default_momentum)
    if task.default_optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(task.default_momentum or 0.9, 0.999))
    return torch.optim.AdamW(params, lr=lr, betas=(task.default_momentum or 0.9, 0.999))


def simulate(
    task: Task,
    workers: int = 4,
    max_steps: int = 1000,
    eval_every: int = 10,
    seed: int = 0,
    lr: float | None = None,
    batch_size: int | None = None,
    target: float | None = None,
    init_seed: int | None = None,
    cut: tuple[int, int] | None = None,
) -> SimulationResult:
    """Synchronous SGD with `workers` averaged gradients per step until target.

    `init_seed` (default `seed`) builds the model, so the data order's share of the
    run-to-run spread can be told apart from the initialisation's. `cut` = (round,
    samples): in that round (0-based, the update it makes is round + 1) the last worker
    computes only the first `samples` of its batch, weighted by samples as the PS weighs
    it — what a straggler's batch cut at once does to one round (star.worker.worker)."""
    batch_size = batch_size or task.default_batch_size
    target = task.default_target if target is None else target
    model = task.build_model(seed if init_seed is None else init_seed)
    optimizer = make_optimizer(task, model.parameters(), lr)
    streams = [BatchStream(task.train, w, workers, seed) for w in range(workers)]
    history = []
    for step in range(1, max_steps + 1):
        optimizer.zero_grad()
        for w, stream in enumerate(streams):
            inputs, targets = stream.next_batch(batch_size)
            weight = 1.0
            if cut is not None and step == cut[0] + 1 and w == workers - 1:
                inputs, targets, weight = inputs[:cut[1]], targets[:cut[1]], cut[1] / batch_size
            (task.loss_fn(model(inputs), targets) * weight / workers).backward()
        optimizer.step()
        if step % eval_every == 0:
            metric = task.evaluate(model)
            history.append((step, metric))
            if task.reached(metric, target):
                return SimulationResult(step, tuple(history))
    return SimulationResult(None, tuple(history))


def time_step(task: Task, amp: bool, batch_size: int | None = None, repeats: int = 20) -> float:
    """Median seconds of one forward+backward on a default-size batch."""
    batch_size = batch_size or task.default_batch_size
    model = task.build_model(0)
    stream = batch_stream(task, 0, 1, 0, batch_size)  # in-memory tensors or a Dataset
    inputs, targets = stream.next_batch(batch_size)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = task.loss_fn(model(inputs), targets)
        loss.backward()

    for _ in range(3):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--target", type=float, default=None)
    parser.add_argument("--no-train", action="store_true", help="only time one step")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    task = get_task(args.task)
    n_params = sum(p.numel() for p in task.build_model(0).parameters())
    print(f"{task.name}: {n_params} params, batch {task.default_batch_size}")
    print(f"step fp32 {time_step(task, False) * 1e3:.1f} ms, bf16 {time_step(task, True) * 1e3:.1f} ms")
    if args.no_train:
        return
    start = time.perf_counter()
    result = simulate(task, args.workers, args.max_steps, args.eval_every, args.seed, args.lr, target=args.target)
    for step, metric in result.history:
        print(f"  step {step}: {task.metric_name} {metric:.4f}")
    print(f"steps_to_target({args.target or task.default_target}) = {result.steps_to_target} "
          f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
