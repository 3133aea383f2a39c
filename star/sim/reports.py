"""Simulated per-iteration reports and the WorkerSummary values the Controller reads.

Mirrors `star.coordinator.ClusterView.summaries`: per worker, medians over its latest
`window` reports made under its current AMP setting (compute seconds per sample, 2 x
push seconds), its latest batch size, and seconds since its last report. Reports are
kept in per-AMP-setting ring buffers (numpy, one row per worker), so summarising 1,000
workers is a few array operations plus building the summary objects.
"""

from __future__ import annotations

import warnings

import numpy as np

from star.policy.controller import WorkerSummary


class ReportBook:
    def __init__(self, num_workers: int, window: int = 4):
        self.window = window
        self.per_sample_s = np.full((2, num_workers, window), np.nan)
        self.push_s = np.full((2, num_workers, window), np.nan)
        self.count = np.zeros((2, num_workers), dtype=np.int64)
        self.batch = np.zeros(num_workers, dtype=np.int64)
        self.last_s = np.full(num_workers, np.nan)  # time of the latest report (nan: never reported)

    def record(self, workers: np.ndarray, now_s: np.ndarray, compute_s: np.ndarray, push_s: float,
               batch: np.ndarray, amp: np.ndarray) -> None:
        """One report per listed worker (each listed at most once)."""
        a = amp.astype(np.int64)
        slot = self.count[a, workers] % self.window
        self.per_sample_s[a, workers, slot] = compute_s / batch
        self.push_s[a, workers, slot] = push_s
        self.count[a, workers] += 1
        self.batch[workers] = batch
        self.last_s[workers] = now_s

    def summaries(self, now_s: float, amp_state: np.ndarray) -> dict[int, WorkerSummary]:
        """WorkerSummary per worker that has reported at least once (as ClusterView does)."""
        workers = np.flatnonzero(~np.isnan(self.last_s))
        a = amp_state[workers].astype(np.int64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-nan rows: no report under this AMP setting
            per_sample = np.nanmedian(self.per_sample_s[a, workers], axis=1)
            comm = 2 * np.nanmedian(self.push_s[a, workers], axis=1)
        reports = np.minimum(self.count[a, workers], self.window)
        silent = now_s - self.last_s[workers]
        out = {}
        for w, ps, cs, b, amp_on, n, quiet in zip(workers.tolist(), per_sample.tolist(), comm.tolist(),
                                                 self.batch[workers].tolist(), a.tolist(), reports.tolist(), silent.tolist()):
            if n == 0:
                out[w] = WorkerSummary(1.0, 0.0, 1, 0, 0, quiet)
            else:
                out[w] = WorkerSummary(ps, cs, b, n if amp_on else 0, n, quiet)
        return out
