"""Held-out evaluation of the parameters the PSs hold, the metric curve, and time-to-accuracy.

TTA = seconds from the first applied update to the first evaluation at or past the
target. Times come from the PS itself (`since_first_update_s` in the pull header),
so they do not depend on when the evaluator happened to start.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from star.flat import FlatModel
from star.rpc.ps_client import PSClient
from star.rpc.security import Credentials
from star.tasks import Task


@dataclass(frozen=True)
class EvalPoint:
    time_s: float  # since the first update (max over PSs)
    version: int  # parameter versions applied (max over PSs)
    metric: float


def time_to_target(points: Sequence[EvalPoint], target: float, higher_is_better: bool) -> float | None:
    """The time of the first point at or past the target, or None."""
    for point in points:
        if math.isfinite(point.metric) and (point.metric >= target if higher_is_better else point.metric <= target):
            return point.time_s
    return None


class Evaluator:
    """Pulls parameters as an observer (never blocks a round) and evaluates them."""

    def __init__(self, task: Task, ps_addresses: Sequence[str], seed: int = 0, credentials: Credentials | None = None):
        self.task = task
        self.model = task.build_model(seed)
        self.flat = FlatModel(self.model)
        self.client = PSClient(ps_addresses, worker_id=0, credentials=credentials)
        self.client.register(self.flat.numel)

    def evaluate(self) -> EvalPoint | None:
        """None until every PS has parameters and at least one update was applied."""
        views = self.client.pull(self.flat.params, timeout_s=30.0, observer=True)
        since = max(v.since_first_update_s for v in views)
        if since < 0:
            return None
        with torch.no_grad():
            metric = float(self.task.evaluate(self.model))
        return EvalPoint(since, max(v.version for v in views), metric)

    def close(self) -> None:
        self.client.close()


class CurveWriter:
    """curve.csv: time_s, version, metric — appended as points arrive, so a crash loses nothing."""

    def __init__(self, path: str | Path):
        self._handle = open(path, "w", newline="", buffering=1)
        self._writer = csv.writer(self._handle)
        self._writer.writerow(["time_s", "version", "metric"])
        self.points: list[EvalPoint] = []

    def add(self, point: EvalPoint) -> None:
        self.points.append(point)
        self._writer.writerow([f"{point.time_s:.4f}", point.version, f"{point.metric:.6f}"])

    def close(self) -> None:
        self._handle.close()
