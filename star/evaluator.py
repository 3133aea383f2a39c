"""Held-out evaluation of the parameters the PSs hold, the metric curve, and time-to-accuracy.

TTA = seconds from the first applied update to the first evaluation whose smoothed metric
is at or past the target (rules in `star.tta`). Times come from the PS itself (`since_first_update_s` in the pull header),
so they do not depend on when the evaluator happened to start. An evaluation is timed when its version was
applied (`version_applied_s`), not when it was read: an evaluator still busy with the previous version reads
the next one late, and that lag is the evaluator's, not the training's (DDP's rank 0 times its snapshots at
the step that made them, the same rule).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

import torch

from star.flat import FlatModel
from star.rpc.ps_client import PSClient, ShardView
from star.rpc.security import Credentials
from star.tasks import Task
from star.tta import EvalPoint


class Evaluator:
    """Pulls parameters as an observer (never blocks a round) and evaluates them."""

    def __init__(self, task: Task, ps_addresses: Sequence[str], seed: int = 0, credentials: Credentials | None = None,
                 device: torch.device | None = None):
        self.task = task
        self.model = task.build_model(seed)
        self.flat = FlatModel(self.model)  # pulled into on the host
        self.device_flat: FlatModel | None = None  # a copy on the GPU of a CUDA job, evaluated there as DDP's rank 0 does
        if device is not None and device.type != "cpu":
            self.device_flat = FlatModel(task.build_model(seed).to(device))
        self.client = PSClient(ps_addresses, worker_id=0, credentials=credentials)
        self.client.register(self.flat.numel)

    def evaluate(self, min_version: int = 0, wait_s: float = 0.0) -> tuple[float, EvalPoint | None]:
        """(seconds since the first update, < 0 before it; the evaluation). No evaluation (None)
        before the first update, nor while some shard has applied fewer than `min_version` updates.
        `wait_s`: a shard below it may hold the call that long for the version to come."""
        # Polling for a version moves headers only: a full pull of a 10M-parameter model every poll_s
        # took a third of a core in the coordinator and a fifth in each PS, away from the workers.
        # Version 0 (before the first update) is never evaluated, so it is never pulled either.
        views = self.client.pull(self.flat.params, timeout_s=30.0, observer=True, min_version=max(1, min_version),
                                 wait_s=wait_s)
        since = max(v.since_first_update_s for v in views)
        if since < 0 or min(v.version for v in views) < max(1, min_version):
            return since, None
        model = self.model
        if self.device_flat is not None:
            self.device_flat.params.copy_(self.flat.params)
            model = self.device_flat.module
        with torch.no_grad():
            metric = float(self.task.evaluate(model))
        return since, EvalPoint(made_s(views), max(v.version for v in views), metric)

    def close(self) -> None:
        self.client.close()


class CurveWriter:
    """curve.csv: time_s, version, metric — appended as points arrive, so a crash loses nothing."""

    def __init__(self, path: str | Path, points: Sequence[EvalPoint] = ()):
        """`points`: the curve already in the file, which a restarted coordinator goes on appending to."""
        self._handle = open(path, "a" if points else "w", newline="", buffering=1)
        self._writer = csv.writer(self._handle)
        if not points:
            self._writer.writerow(["time_s", "version", "metric"])
        self.points: list[EvalPoint] = list(points)

    def add(self, point: EvalPoint) -> None:
        self.points.append(point)
        self._writer.writerow([f"{point.time_s:.4f}", point.version, f"{point.metric:.6f}"])

    def close(self) -> None:
        self._handle.close()


def made_s(views: Sequence[ShardView]) -> float:
    """When the pulled parameters existed, on the PSs' clock: the latest shard's apply time (each shard's
    version was current when it was read). A shard that does not know its version's time counts at its read."""
    return max(v.since_first_update_s if v.version_applied_s is None else v.version_applied_s for v in views)
