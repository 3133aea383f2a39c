"""Simulated per-iteration reports and the WorkerSummary values the Controller reads.

Mirrors `star.coordinator.ClusterView`: per worker it keeps the latest `keep` reports
(CoordinatorConfig.report_window, 20) whatever their AMP setting, and summarises the
latest `window` (4) of those made under the worker's *current* AMP setting: median
compute seconds per sample, 2 x median push seconds, the batch size of the latest of
them, how many there are, and seconds since the worker's last report. So right after
an AMP toggle a worker has no (or few) matching reports and the Controller waits for
fresh ones, and reports under the other setting older than `keep` iterations are gone,
exactly as in a real run. Stored as numpy ring buffers (one row per worker), so
summarising 1,000 workers is a few array operations plus building the summary objects.
"""

from __future__ import annotations

import numpy as np

from star.policy.controller import WorkerSummary

KEEP = 20  # star.coordinator.CoordinatorConfig.report_window (tests check they agree)
WINDOW = 4  # star.coordinator.ClusterView.summaries(window=4)


def _median_rows(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Median of each row's valid entries (nan where none): a sort of a few columns, no masked arrays."""
    ordered = np.sort(np.where(valid, values, np.inf), axis=1)
    n = valid.sum(axis=1)
    rows = np.arange(len(values))
    lo = ordered[rows, np.maximum((n - 1) // 2, 0)]
    hi = ordered[rows, np.maximum(n // 2, 0)]
    return np.where(n > 0, np.where(n % 2 == 1, lo, (lo + hi) / 2), np.nan)


class ReportBook:
    """Per worker and AMP setting, a ring of its latest `window` reports, each with its report number.

    The latest `window` reports under one setting among the latest `keep` overall are exactly
    the entries of that setting's ring whose number is > count - keep - 1, so the 20-report
    deque of ClusterView never needs to be stored.
    """

    def __init__(self, num_workers: int, window: int = WINDOW, keep: int = KEEP):
        if not 1 <= window <= keep:
            raise ValueError(f"need 1 <= window ({window}) <= keep ({keep})")
        self.window = window
        self.keep = keep
        shape = (2, num_workers, window)
        self.per_sample_s = np.full(shape, np.nan)
        self.push_s = np.full(shape, np.nan)
        self.batch = np.zeros(shape, dtype=np.int64)
        self.seq = np.full(shape, -1, dtype=np.int64)  # the worker's report number (-1: empty slot)
        self.count_amp = np.zeros((2, num_workers), dtype=np.int64)  # reports made under each setting
        self.count = np.zeros(num_workers, dtype=np.int64)  # reports made
        self.last_s = np.full(num_workers, np.nan)  # time of the latest report (nan: never reported)

    def record(self, workers: np.ndarray, now_s: np.ndarray, compute_s: np.ndarray, push_s: float,
               batch: np.ndarray, amp: np.ndarray) -> None:
        """One report per listed worker (each listed at most once)."""
        a = amp.astype(np.int64)
        slot = self.count_amp[a, workers] % self.window
        self.per_sample_s[a, workers, slot] = compute_s / batch
        self.push_s[a, workers, slot] = push_s
        self.batch[a, workers, slot] = batch
        self.seq[a, workers, slot] = self.count[workers]
        self.count_amp[a, workers] += 1
        self.count[workers] += 1
        self.last_s[workers] = now_s

    def summaries(self, now_s: float, amp_state: np.ndarray) -> dict[int, WorkerSummary]:
        """WorkerSummary per worker that has reported at least once (as ClusterView does)."""
        workers = np.flatnonzero(~np.isnan(self.last_s))
        if len(workers) == 0:
            return {}
        a = amp_state[workers].astype(np.int64)
        seq = self.seq[a, workers]
        valid = (seq >= 0) & (seq >= (self.count[workers] - self.keep)[:, None])  # still in the 20-report deque
        per_sample = _median_rows(self.per_sample_s[a, workers], valid)
        comm = 2 * _median_rows(self.push_s[a, workers], valid)
        reports = valid.sum(axis=1)
        latest = (self.count_amp[a, workers] - 1) % self.window
        latest_batch = self.batch[a, workers, latest]
        silent = now_s - self.last_s[workers]
        out = {}
        for w, ps, cs, b, amp_on, n, quiet in zip(workers.tolist(), per_sample.tolist(), comm.tolist(),
                                                 latest_batch.tolist(), a.tolist(), reports.tolist(), silent.tolist()):
            if n == 0:
                out[w] = WorkerSummary(1.0, 0.0, 1, 0, 0, quiet)
            else:
                out[w] = WorkerSummary(ps, cs, b, n if amp_on else 0, n, quiet)
        return out
