"""Convergence model: training progress per applied update, and the metric it maps to.

Progress is counted in SSGD steps: one update that sums N gradients of base_batch with
no staleness is worth exactly 1, so the target is reached at `updates_to_target`.
An update summing gradients of total batch B is worth (B / (N·b)) / eff(B), with
eff(B) = (1 + B_noise/B) / (1 + B_noise/(N·b)) — small batches are noisier per sample
— divided by 1 + penalty·s for mean staleness s. A gradient computed under AMP counts
amp_update_worth of its samples (the engine scales B before it gets here). This is the same shape the heuristic
selector assumes, so the simulator can check whether its choices pay off under it.
"""

from __future__ import annotations

import math

import numpy as np

from star.sim.config import ConvergenceConfig


class ConvergenceModel:
    def __init__(self, config: ConvergenceConfig, num_workers: int, base_batch: int):
        self.config = config
        self.full_batch = float(num_workers * base_batch)
        c = config
        # metric(p) = final - (final - initial)·exp(-p/tau), passing target at p = updates_to_target.
        self._tau = c.updates_to_target / math.log((c.final_metric - c.initial_metric) / (c.final_metric - c.target_metric))

    def progress(self, batch: np.ndarray, staleness: np.ndarray) -> np.ndarray:
        """Progress of updates with summed batch `batch` and mean staleness `staleness`."""
        b_noise = self.config.b_noise
        share = batch / self.full_batch
        if b_noise > 0:
            share = share * (1 + b_noise / self.full_batch) / (1 + b_noise / batch)
        return share / (1 + self.config.staleness_penalty * staleness)

    def metric(self, progress: np.ndarray | float) -> np.ndarray | float:
        c = self.config
        return c.final_metric - (c.final_metric - c.initial_metric) * np.exp(-np.asarray(progress) / self._tau)

    def reached(self, progress: float) -> bool:
        return progress >= self.config.updates_to_target - 1e-9
