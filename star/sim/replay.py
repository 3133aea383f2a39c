"""Vectorised trace replay: the slowdown factor of many (worker, iteration) pairs at once.

Built from the trace's rows with star.traces' rules (the run-worker -> trace-worker
mapping of `Trace.trace_worker_for`; the stretch and wrap-around are
`star.traces.trace_position`, which `WorkerSlowdown.factor_at` uses too; the first run
worker's `Trace.slowdown_for` validates the mapping and the stretch), in O(workers + rows): asking `slowdown_for` for every run worker
costs O(workers x rows), 20 s for 10,000 workers. The lookup is batched (one
searchsorted over all workers' rows), so 1,000 workers cost one numpy call per step.
Tests check it agrees with `Trace.for_run_workers` factor by factor.
"""

from __future__ import annotations

import numpy as np

from star.trace_values import WorkerList, parse_worker_list
from star.traces import Trace, trace_position


class FactorTable:
    """factor(worker, iteration) for run workers 0..N-1, identical to WorkerSlowdown.factor_at."""

    def __init__(self, trace: Trace | None, num_workers: int, trace_workers: WorkerList = None, stretch: float = 1.0):
        self.num_workers = num_workers
        if trace is None:
            self._keys = None
            return
        mapping = parse_worker_list(trace_workers) if isinstance(trace_workers, str) else (
            None if trace_workers is None else tuple(trace_workers))
        first = trace.slowdown_for(0, num_workers, mapping, stretch)  # validates the mapping and the stretch
        sources = trace.workers
        self._stretch = first.stretch_fraction
        self._max_iteration = first.max_iteration
        self._stride = first.max_iteration + 1
        keys, factors, offsets = [], [], []
        for run_worker in range(num_workers):
            if mapping is not None:
                source = mapping[run_worker]
            else:
                source = sources[run_worker] if run_worker < len(sources) else None
            pairs = trace.steps[source] if source is not None else ()
            offsets.append(len(keys))
            if not pairs:
                pairs = ((0, 1.0),)
            keys.extend(run_worker * self._stride + it for it, _ in pairs)
            factors.extend(f for _, f in pairs)
        self._keys = np.asarray(keys, dtype=np.int64)
        self._factors = np.asarray(factors, dtype=np.float64)
        self._offsets = np.asarray(offsets, dtype=np.int64)

    def factors(self, workers: np.ndarray, iterations: np.ndarray) -> np.ndarray:
        """Slowdown factors for paired arrays of worker ids and 0-based iterations."""
        if self._keys is None:
            return np.ones(len(workers))
        position = trace_position(iterations.astype(np.int64), self._stretch, self._max_iteration)
        index = np.searchsorted(self._keys, workers * self._stride + position, side="right") - 1
        return self._factors[np.maximum(index, self._offsets[workers])]
