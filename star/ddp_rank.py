"""One rank of the DDP baseline: torch.nn.parallel.DistributedDataParallel over the same job as STAR.

Started by `star launch --mode ddp` (star.ddp) with torchrun's environment variables
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), or by
torchrun itself: `torchrun --nproc-per-node N -m star.ddp_rank --config OUT/config.toml`.
It trains what a STAR worker would: the same task, seed, per-rank data shard and batch,
the same optimizer (what a PS would run) and the same trace replay. Rank 0 also plays
the coordinator's part: it evaluates snapshots of the parameters on a background thread
(as the coordinator's evaluator does, beside the training), decides when the job is done
(target reached or max_time_s), and writes curve.csv, events.jsonl and result.json.

Trace replay: a STAR worker sleeps (factor - 1) x its compute time after computing. Here
the backward pass contains the all-reduce (it waits for the other ranks), so compute is
estimated as forward x (1 + r), r = this rank's backward/forward time ratio measured before
training on a probe batch under `no_sync()` (no all-reduce); the sleep comes between
forward and backward, where it holds up everyone's all-reduce as a slow GPU would. A fixed
r = 2 under-counted compute on gpt-1m: a 3x slow step added 0.83 s under DDP against 1.24 s
under STAR, which flattered DDP under every trace.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import threading
import time
from collections import deque
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from star.config import JobConfig, from_dict, load_toml
from star.ddp_rules import DDP_MODE, ddp_backend
from star.devices import local_device
from star.evaluator import CurveWriter
from star.tta import EvalPoint, next_version, reached
from star.events import EventLog
from star.optim import build_optimizer
from star.processes import die_with_parent
from star.tasks import BatchStream, Task, get_task
from star.traces import load_worker_slowdown, slowdown_sleep_s

BACKWARD_TO_FORWARD = 2.0  # backward ~ 2 x forward: the fallback when the probe cannot time a forward
PROBE_STEPS = 3  # forward+backward steps timed under no_sync() for the replay's backward/forward ratio


WAITING_SNAPSHOTS = 2  # grid versions kept while rank 0's evaluator is busy; a third is skipped


class Evaluations:
    """Rank 0's evaluator, off the training thread, with the rule STAR's evaluator follows
    (`evaluation` in the job config): parameters are evaluated at each multiple of `every_updates`
    steps that the evaluator has not yet passed (every `eval_period_s` when it is 0), and the target
    counts as reached when the mean of the last `smoothing` evaluations is at or past it. The same
    rule on both sides, or a DDP run would stop at one lucky evaluation that a STAR run has to confirm."""

    def __init__(self, task: Task, model: torch.nn.Module, config: JobConfig, target: float, out: Path, events: EventLog):
        self.task, self.config, self.target, self.events = task, config, target, events
        self.rule = config.evaluation
        self.model = copy.deepcopy(model)
        self.curve = CurveWriter(out / "curve.csv")
        self.lock = threading.Lock()
        self.waiting: deque[tuple[float, int, list[torch.Tensor]]] = deque()  # snapshots the evaluator has yet to take
        self.next_version = 0  # the grid: the first version worth a snapshot
        self.tta_s: float | None = None
        self.updates_to_target: int | None = None  # the step whose evaluation reached the target
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="evaluator", daemon=True)

    def offer(self, time_s: float, version: int, model: torch.nn.Module, final: bool = False) -> None:
        """Called after a step: keep a copy of the parameters if the evaluator wants this version (`final`: the
        last step's, whatever its version). A grid version waits while the evaluator is busy with the one before
        (up to WAITING_SNAPSHOTS: before, it was skipped and the next step's taken, off the grid, as under load);
        on the wall-clock period only a free evaluator takes one."""
        with self.lock:
            due = final or self.rule.every_updates == 0 or version >= self.next_version
            room = WAITING_SNAPSHOTS if self.rule.every_updates else 1
            if not due or (len(self.waiting) >= room and not final):
                return
            if len(self.waiting) >= room:
                self.waiting.pop()  # the last step's parameters replace the newest waiting snapshot
            self.waiting.append((time_s, version, [p.detach().clone() for p in model.parameters()]))
            if self.rule.every_updates:
                self.next_version = next_version(version, self.rule.every_updates)

    def evaluate_one(self) -> bool:
        """Evaluate the waiting snapshot, if any: a curve point, and the TTA once the smoothed metric
        reaches the target. False when there was none."""
        with self.lock:
            taken = self.waiting.popleft() if self.waiting else None
        if taken is None:
            return False
        time_s, version, params = taken
        with torch.no_grad():
            for mine, theirs in zip(self.model.parameters(), params):
                mine.copy_(theirs)
            metric = float(self.task.evaluate(self.model))
        point = EvalPoint(time_s, version, metric)
        self.curve.add(point)
        self.events.emit("evaluation", time_s=round(time_s, 4), version=version, metric=metric)
        if self.tta_s is None and reached(self.curve.points, self.target, self.task.higher_is_better, self.rule.smoothing):
            self.tta_s, self.updates_to_target = time_s, version
            self.events.emit("target_reached", tta_s=round(time_s, 4), metric=metric, version=version,
                             smoothed_over=self.rule.smoothing)
        return True

    def _run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            if not self.evaluate_one():
                self.stop.wait(self.rule.poll_s)
                continue
            if not self.rule.every_updates:
                self.stop.wait(max(0.0, self.config.eval_period_s - (time.monotonic() - started)))

    @property
    def points(self) -> list[EvalPoint]:
        return self.curve.points

    def finish(self) -> None:
        """Stop the thread, then evaluate the snapshots still waiting (the last step's among them)."""
        self.stop.set()
        if self.thread.ident is not None:  # started
            self.thread.join()
        while self.evaluate_one():
            pass
        self.curve.close()


def backward_to_forward(ddp: DistributedDataParallel, task: Task, inputs: torch.Tensor, targets: torch.Tensor,
                        device: torch.device, autocast_dtype: torch.dtype, amp: bool, steps: int = PROBE_STEPS) -> float:
    """Median backward/forward time ratio of this rank's steps without the all-reduce (`no_sync()`),
    on a probe batch; the gradients are thrown away. The first step is a warm-up."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    ratios = []
    with ddp.no_sync():
        for step in range(steps + 1):
            sync()
            t0 = time.monotonic()
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=amp):
                loss = task.loss_fn(ddp(inputs), targets)
            sync()
            t1 = time.monotonic()
            loss.backward()
            sync()
            t2 = time.monotonic()
            if step and t1 > t0:
                ratios.append((t2 - t1) / (t1 - t0))
    ddp.zero_grad(set_to_none=True)
    return statistics.median(ratios) if ratios else BACKWARD_TO_FORWARD


def rendezvous_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's variables; a missing one names itself."""
    values = []
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        raw = os.environ.get(name)
        if raw is None or not raw.isdigit():
            raise SystemExit(f"star ddp rank: environment variable {name}={raw!r}: must be set to an integer (torchrun sets it)")
        values.append(int(raw))
    return values[0], values[1], values[2]


def train(config: JobConfig, device: torch.device, amp: bool) -> None:
    rank, world, _ = rendezvous_env()
    if world != config.workers:
        raise SystemExit(f"star ddp rank: WORLD_SIZE={world} but workers={config.workers}")
    torch.set_num_threads(config.threads_per_process)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    backend = ddp_backend(device.type, local_world, torch.cuda.device_count() if device.type == "cuda" else 0)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        _train(config, rank, world, device, amp)
        # Tear down together: rank 0 still evaluates and writes result.json after the last step, and a
        # gloo rank whose peer is torn down under it was seen to abort ("terminate called without an
        # active exception", exit -6) on a run that reached its target within a few steps.
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _train(config: JobConfig, rank: int, world: int, device: torch.device, amp: bool) -> None:
    task = get_task(config.task)
    optimizer_config = config.optimizer.resolved(task.default_optimizer, task.default_lr, task.default_momentum)
    model = task.build_model(config.seed).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = build_optimizer(optimizer_config, ddp.parameters())
    batch_size = config.batch_size or task.default_batch_size
    batches = BatchStream(task.train, rank, world, seed=config.seed)
    trace = config.trace
    slowdown = load_worker_slowdown(trace.path, rank, world, trace.workers, trace.stretch) if trace.path else None
    autocast_dtype = torch.bfloat16 if device.type == "cpu" else torch.float16
    ratio = BACKWARD_TO_FORWARD
    if slowdown is not None:  # a probe batch from a stream of its own: the training batches stay STAR's
        probe_inputs, probe_targets = (t.to(device) for t in BatchStream(task.train, rank, world, seed=config.seed + 1).next_batch(batch_size))
        ratio = backward_to_forward(ddp, task, probe_inputs, probe_targets, device, autocast_dtype, amp)
    scaler = torch.amp.GradScaler("cuda") if amp and device.type == "cuda" else None
    out = Path(config.out)
    target = config.target if config.target is not None else task.default_target
    events = EventLog(out / "events.jsonl") if rank == 0 else None
    evaluations = Evaluations(task, model, config, target, out, events) if rank == 0 else None
    if events is not None:
        events.emit("ddp_start", workers=world, task=config.task, backend=dist.get_backend(), device=str(device), amp=amp,
                    replay_backward_to_forward=round(ratio, 3) if slowdown is not None else None)
        evaluations.thread.start()
    step_s: list[float] = []
    first_step_end: float | None = None
    reason, iteration, started = "max_time", 0, time.monotonic()
    decision = torch.zeros(1, device=device)
    while True:
        t0 = time.monotonic()
        inputs, targets = (t.to(device) for t in batches.next_batch(batch_size))
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=amp):
            loss = task.loss_fn(ddp(inputs), targets)
        if device.type == "cuda":  # kernels run asynchronously: the clock must wait for the forward to end
            torch.cuda.synchronize(device)
        forward_s = time.monotonic() - t0
        factor = slowdown.factor_at(iteration) if slowdown else 1.0
        time.sleep(slowdown_sleep_s(forward_s * (1 + ratio), factor))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        iteration += 1
        now = time.monotonic()
        step_s.append(now - t0)
        first_step_end = first_step_end if first_step_end is not None else now
        if rank == 0:
            evaluations.offer(now - first_step_end, iteration, model)
            done = evaluations.tta_s is not None and config.stop_at_target
            reason = "target_reached" if done else reason  # a STAR coordinator's names for why a job ended
            decision.fill_(1.0 if done or now - started >= config.max_time_s else 0.0)
        else:
            decision.zero_()
        dist.all_reduce(decision)  # everyone stops at the same step, as rank 0 decides
        if decision.item() > 0:
            break
    if rank == 0:
        evaluations.offer(time.monotonic() - first_step_end, iteration, model, final=True)
        evaluations.finish()
        events.emit("job_done", reason=reason)
        write_result(config, task, target, evaluations, iteration, step_s, reason, events)
        events.close()


def write_result(config: JobConfig, task: Task, target: float, evaluations: Evaluations, iterations: int,
                 step_s: list[float], reason: str, events: EventLog) -> None:
    """result.json with the keys a STAR run writes (PS-only ones empty), so reports treat ddp as a strategy."""
    points = evaluations.points
    result = {
        "task": config.task, "mode": DDP_MODE, "workers": config.workers, "ps": 0,
        "metric": task.metric_name, "target": target,
        "reached": evaluations.tta_s is not None, "tta_s": evaluations.tta_s,
        "updates_to_target": evaluations.updates_to_target,  # TTA = updates_to_target x s_per_update, as for STAR
        "s_per_update": (evaluations.tta_s / evaluations.updates_to_target
                         if evaluations.tta_s and evaluations.updates_to_target else None),
        "final_metric": points[-1].metric if points else None,
        "best_metric": (max if task.higher_is_better else min)(p.metric for p in points) if points else None,
        "iterations": iterations, "updates": iterations,
        "train_s": points[-1].time_s if points else 0.0, "reason": reason, "evaluations": len(points),
        "s_per_iter_median": round(statistics.median(step_s), 5) if step_s else None,
        "ps_stats": [], "reports_ignored": {},
        "transport": f"ddp-{dist.get_backend()}" if dist.is_initialized() else "ddp", "wire": "float32",
        "compute_s_median": None, "comm_s_median": None, "compute_to_comm": None,
        "straggler_detections": 0, "plan_switches": 0, "amp_toggles": 0, "batch_resizes": 0, "final_plan": DDP_MODE,
        "faults": {"workers_lost": 0, "workers_restarted": 0, "workers_rejoined": 0, "ps_restored": 0, "updates_lost": 0},
    }
    out = Path(config.out)
    tmp = out / "result.json.tmp"
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, out / "result.json")
    events.emit("result_written", reached=result["reached"], tta_s=result["tta_s"], updates=iterations)


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    parser = argparse.ArgumentParser(prog="python -m star.ddp_rank", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the job's TOML (star launch writes OUT/config.toml)")
    parser.add_argument("--device", default=None, choices=("cpu", "cuda"),
                        help="override the job's `device` (cuda: GPU LOCAL_RANK %% visible GPUs; NCCL when each rank has its own)")
    parser.add_argument("--amp", action="store_true", help="autocast: bf16 on CPU, fp16 with GradScaler on CUDA")
    args = parser.parse_args(argv)
    config = from_dict(JobConfig, load_toml(args.config))
    device = local_device(args.device or config.device, int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    train(config, device, args.amp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
