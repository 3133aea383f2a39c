"""Vectorised trace replay: the slowdown factor of many (worker, iteration) pairs at once.

Built from `Trace.slowdown_for`, so the mapping, stretch and wrap-around rules are the
ones star.traces defines for real workers; only the lookup is batched (one searchsorted
over all workers' rows) so 1,000 workers cost one numpy call per step.
"""

from __future__ import annotations

import numpy as np

from star.traces import Trace, WorkerList


class FactorTable:
    """factor(worker, iteration) for run workers 0..N-1, identical to WorkerSlowdown.factor_at."""

    def __init__(self, trace: Trace | None, num_workers: int, trace_workers: WorkerList = None, stretch: float = 1.0):
        self.num_workers = num_workers
        if trace is None:
            self._keys = None
            return
        schedules = trace.for_run_workers(num_workers, trace_workers, stretch)
        first = schedules[0]
        self._num = first._stretch_q.numerator
        self._den = first._stretch_q.denominator
        self._span = first.max_iteration * self._num
        self._stride = first.max_iteration + 1
        keys, factors, offsets = [], [], []
        for s in schedules:
            offsets.append(len(keys))
            iterations, values = (s.iterations, s.factors) if s.iterations else ((0,), (1.0,))
            keys.extend(s.run_worker * self._stride + it for it in iterations)
            factors.extend(values)
        self._keys = np.asarray(keys, dtype=np.int64)
        self._factors = np.asarray(factors, dtype=np.float64)
        self._offsets = np.asarray(offsets, dtype=np.int64)

    def factors(self, workers: np.ndarray, iterations: np.ndarray) -> np.ndarray:
        """Slowdown factors for paired arrays of worker ids and 0-based iterations."""
        if self._keys is None:
            return np.ones(len(workers))
        position = (iterations.astype(np.int64) * self._den % self._span) // self._num
        index = np.searchsorted(self._keys, workers * self._stride + position, side="right") - 1
        return self._factors[np.maximum(index, self._offsets[workers])]
