"""Cost model: how long one worker iteration takes, vectorised over workers.

iteration = pull + compute + push + overhead, with
compute = base_compute_s x trace factor x (amp_time_factor if AMP is on) x batch/base_batch x noise.
The trace factor multiplies the compute the worker really does (as the real worker's
replay sleeps the difference), so AMP or a smaller batch also shortens a slowed step.
"""

from __future__ import annotations

import math

import numpy as np

from star.sim.config import CostConfig
from star.sim.replay import FactorTable


class CostModel:
    def __init__(self, config: CostConfig, factors: FactorTable, rng: np.random.Generator):
        self.config = config
        self.factors = factors
        self.rng = rng
        cv = config.compute_noise_cv
        self._sigma = math.sqrt(math.log1p(cv * cv)) if cv > 0 else 0.0

    @property
    def transfer_s(self) -> float:
        return self.config.transfer_s

    def compute_s(self, workers: np.ndarray, iterations: np.ndarray, amp: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Compute seconds (incl. replayed slowdown) of each worker's given iteration."""
        c = self.config
        t = c.base_compute_s * self.factors.factors(workers, iterations) * (batch / c.base_batch)
        t = np.where(amp, t * c.amp_time_factor, t)
        if self._sigma > 0:
            # Mean-one lognormal noise: jitter without changing the average step.
            t = t * self.rng.lognormal(-0.5 * self._sigma**2, self._sigma, len(t))
        return t

    def fixed_s(self) -> float:
        """Seconds of an iteration that are not compute: pull + push + overhead."""
        return 2 * self.config.transfer_s + self.config.overhead_s
