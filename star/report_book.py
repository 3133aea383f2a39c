"""Per-worker iteration reports and the WorkerSummary values the Controller reads: one rule
for the coordinator (`star.cluster.ClusterView`) and the simulator.

Per worker it keeps the latest `keep` reports (CoordinatorConfig.report_window, 20)
whatever their AMP setting, and summarises the latest `window` (4) of those made under
the worker's *current* AMP setting: median compute seconds per sample, 2 x median push
seconds, the batch size of the latest of them, how many there are, and seconds since the
worker was last heard of; and for batch sizing, the median of only the latest
`SIZING_WINDOW` (2) of them, which a step in speed fills two reports sooner (sizing has its
own smoothing and hysteresis, `star.policy.speeds`; the detector keeps the steadier median),
with its relative standard error from the window's spread (so that sizing does not act on
differences its measurements cannot resolve). When the adapter switches a worker's AMP it drops that
worker's older reports under the new setting (`amp_switched`: they are from an earlier spell), so right
after an AMP toggle a worker has no (or few) matching reports and the Controller waits for fresh ones;
reports under the other setting older than `keep` iterations are gone.

Workers whose step has a fixed compute cost (they report one: `star.worker.step_cost`; a GPU's kernel
launches) are read as if a step of b samples were b + F samples in proportion, F the lower median of
their reports: a worker's per-sample time stays put when its batch is cut, and the fixed part, F x its
per-sample median, is added to its fixed seconds per iteration (`comm_s`), which batch sizing and the plan
estimates add to per-sample x batch. With no fixed part (CPU workers, the simulator) nothing changes.

Stored as numpy ring buffers (one row per worker),
so summarising 1,000 simulated workers is a few array operations plus building the
summary objects, and the daemon's 4-16 workers cost microseconds.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from star.policy.summary import WorkerSummary

KEEP = 20  # reports kept per worker: star.coordinator.CoordinatorConfig.report_window's default (a test checks)
WINDOW = 4  # of those, the latest this many under the current AMP setting are summarised
SIZING_WINDOW = 2  # and the latest this many of them give the per-sample time batch sizing acts on
STEP_COST_REASON = ("its step costs compute for batch + fixed_samples samples' worth; every worker is read with the "
                    "lower median of the reported values (pooled)")
NEWEST_SHARE = 0.85  # a confirming worker's report crosses the slowdown watch when it is over this share of the limit


def _median_rows(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Median of each row's valid entries (nan where none): a sort of a few columns, no masked arrays."""
    ordered = np.sort(np.where(valid, values, np.inf), axis=1)
    n = valid.sum(axis=1)
    rows = np.arange(len(values))
    lo = ordered[rows, np.maximum((n - 1) // 2, 0)]
    hi = ordered[rows, np.maximum(n // 2, 0)]
    return np.where(n > 0, np.where(n % 2 == 1, lo, (lo + hi) / 2), np.nan)


def _relative_spread_rows(values: np.ndarray, valid: np.ndarray, median: np.ndarray) -> np.ndarray:
    """Each row's robust standard deviation of one report, relative to its median: 1.4826 x the median
    absolute deviation of its valid entries (0 where fewer than two)."""
    mad = _median_rows(np.abs(values - median[:, None]), valid)
    spread = 1.4826 * mad / np.where(median > 0, median, np.inf)
    return np.where(valid.sum(axis=1) >= 2, np.nan_to_num(spread), 0.0)


def _newest(valid: np.ndarray, seq: np.ndarray, k: int) -> np.ndarray:
    """Mask of each row's k valid entries with the largest report numbers."""
    newest_first = np.argsort(np.where(valid, -seq, 1), axis=1, kind="stable")[:, :k]
    mask = np.zeros_like(valid)
    np.put_along_axis(mask, newest_first, True, axis=1)
    return mask & valid


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
        self.compute_s = np.full(shape, np.nan)
        self.push_s = np.full(shape, np.nan)
        self.batch = np.zeros(shape, dtype=np.int64)
        self.seq = np.full(shape, -1, dtype=np.int64)  # the worker's report number (-1: empty slot)
        self.count_amp = np.zeros((2, num_workers), dtype=np.int64)  # reports made under each setting
        self.count = np.zeros(num_workers, dtype=np.int64)  # reports made
        self.last_s = np.full(num_workers, np.nan)  # time of the latest report (nan: never reported)
        self.fixed_samples = np.zeros(num_workers)  # each worker's reported fixed compute per step, in samples' worth

    def record(self, workers: np.ndarray, now_s: np.ndarray | float, compute_s: np.ndarray, push_s: np.ndarray | float,
               batch: np.ndarray, amp: np.ndarray, fixed_samples: np.ndarray | float = 0.0) -> None:
        """One report per listed worker (each listed at most once, each with a batch > 0)."""
        a = amp.astype(np.int64)
        slot = self.count_amp[a, workers] % self.window
        self.fixed_samples[workers] = fixed_samples
        self.compute_s[a, workers, slot] = compute_s
        self.push_s[a, workers, slot] = push_s
        self.batch[a, workers, slot] = batch
        self.seq[a, workers, slot] = self.count[workers]
        self.count_amp[a, workers] += 1
        self.count[workers] += 1
        self.last_s[workers] = now_s

    def record_without_speed(self, worker: int, now_s: float) -> None:
        """A report with no batch (0 samples): it counts among the latest `keep`, but has no
        speed to summarise."""
        self.count[worker] += 1
        self.last_s[worker] = now_s

    def heard(self, worker: int, now_s: float) -> None:
        """A sign of life without timings (a heartbeat from a worker blocked in a pull): it is not
        silent, but its speeds stay as they were. Ignored for a worker that never reported."""
        if not np.isnan(self.last_s[worker]):
            self.last_s[worker] = now_s

    def amp_switched(self, worker: int, amp_on: bool) -> None:
        """`worker` now runs with AMP `amp_on`: its older reports under that setting are from an earlier
        spell (for AMP switched off, from before it was switched on: the slow reports that had it switched
        on) and must not be summarised with the new ones, so the worker is judged again on fresh reports."""
        a = int(amp_on)
        self.compute_s[a, worker] = np.nan
        self.push_s[a, worker] = np.nan
        self.batch[a, worker] = 0
        self.seq[a, worker] = -1

    def forget(self, worker: int) -> None:
        """Drop a worker's reports (it restarted): it is summarised again once it reports anew."""
        self.compute_s[:, worker] = np.nan
        self.push_s[:, worker] = np.nan
        self.batch[:, worker] = 0
        self.seq[:, worker] = -1
        self.count_amp[:, worker] = 0
        self.count[worker] = 0
        self.last_s[worker] = np.nan
        self.fixed_samples[worker] = 0.0

    def summaries(self, now_s: float, amp_state: np.ndarray) -> dict[int, WorkerSummary]:
        """WorkerSummary per worker that has reported at least once (as ClusterView does)."""
        workers = np.flatnonzero(~np.isnan(self.last_s))
        if len(workers) == 0:
            return {}
        a = amp_state[workers].astype(np.int64)
        fixed_samples = self.pooled_fixed_samples()
        valid, per_sample_s, newest = self._rows(a, workers, fixed_samples)
        per_sample = _median_rows(per_sample_s, valid)
        sizing = _median_rows(per_sample_s, newest)
        # How far sizing's median may be from the worker's true speed by chance: one report's spread over
        # the window, over the square root of the reports in that median (star.policy.speeds.resolvable_speeds).
        sizing_error = _relative_spread_rows(per_sample_s, valid, per_sample) / np.sqrt(np.maximum(newest.sum(axis=1), 1))
        fixed_compute = fixed_samples * per_sample
        comm = 2 * _median_rows(self.push_s[a, workers], valid) + fixed_compute
        reports = valid.sum(axis=1)
        latest = (self.count_amp[a, workers] - 1) % self.window
        latest_batch = self.batch[a, workers, latest]
        silent = now_s - self.last_s[workers]
        # A worker with no report under its current setting gets the placeholder (1.0, 0.0, 1, 0, 0):
        # reports == 0 tells the Controller it cannot be judged yet.
        has = reports > 0
        columns = (np.where(has, per_sample, 1.0), np.where(has, comm, 0.0), np.where(has, latest_batch, 1),
                   np.where(a == 1, reports, 0), reports, silent, np.where(has, sizing, 1.0),
                   np.where(has, sizing_error, 0.0), np.where(has, fixed_compute, 0.0))
        return dict(zip(workers.tolist(), map(WorkerSummary._make, zip(*(c.tolist() for c in columns)))))

    def sizing_above(self, thresholds: Mapping[int, float], amp_state: np.ndarray, since: np.ndarray,
                     confirming: frozenset[int] = frozenset()) -> list[int]:
        """The workers of `thresholds` whose newest report, made after their count stood at `since` (the
        watch's arming: `count.copy()` then), is above their threshold, and so is their per-sample time for
        batch sizing (the summaries' median of their newest reports under their current AMP setting, which
        the controller's slowdown rule reads). The newest report alone must cross too: right after an AMP
        toggle, that median may still hold a report from before the switch under the same setting.
        `confirming` (star.control_loop.ControlLoop.confirming): workers an early decision just cut on a median
        that straddled their step; their next report's own reading scatters around the re-armed limit while
        the median that confirms the step is over it (real mid3x: 12.5 ms against 12.75 ms, median 13.7 ms; the
        report after it, a spike, woke the decision one 0.77 s iteration later), so theirs need only be over
        NEWEST_SHARE of it. Not for everyone: at 1,000 simulated workers on a spiky trace that woke decisions
        on spikes' echoes (batch sizing 1-2% slower)."""
        workers = np.array([w for w in thresholds if 0 <= w < len(self.count) and self.count[w] > since[w]], dtype=np.int64)
        if len(workers) == 0:
            return []
        a = amp_state[workers].astype(np.int64)
        valid, per_sample_s, newest = self._rows(a, workers)
        sizing = _median_rows(per_sample_s, newest)
        seq = np.where(valid, self.seq[a, workers], -1)
        latest = seq.argmax(axis=1)
        rows = np.arange(len(workers))
        fresh = seq[rows, latest] >= since[workers]
        limit = np.array([thresholds[w] for w in workers.tolist()])
        own_limit = np.where(np.isin(workers, list(confirming)), NEWEST_SHARE * limit, limit)
        crossed = fresh & (per_sample_s[rows, latest] > own_limit) & (sizing > limit)  # nan is never above
        return sorted(workers[crossed].tolist())

    def unsized(self, workers: list[int] | tuple[int, ...], amp_state: np.ndarray, min_reports: int) -> list[int]:
        """The listed workers with fewer than `min_reports` summarised reports under their current AMP setting
        (WorkerSummary.reports): those the controller cannot judge or size yet (the start, after an AMP switch)."""
        listed = np.array([w for w in workers if 0 <= w < len(self.count)], dtype=np.int64)
        if len(listed) == 0:
            return []
        valid, _, _ = self._rows(amp_state[listed].astype(np.int64), listed)
        return sorted(listed[valid.sum(axis=1) < min_reports].tolist())

    def _rows(self, a: np.ndarray, workers: np.ndarray, fixed_samples: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per listed worker under AMP setting `a`: which ring entries are still among its latest `keep`
        reports, their per-sample times, and which of them are the newest SIZING_WINDOW."""
        seq = self.seq[a, workers]
        valid = (seq >= 0) & (seq >= (self.count[workers] - self.keep)[:, None])  # still in the 20-report deque
        fixed = self.pooled_fixed_samples() if fixed_samples is None else fixed_samples
        per_sample_s = self.compute_s[a, workers] / (self.batch[a, workers] + fixed)
        return valid, per_sample_s, _newest(valid, seq, min(SIZING_WINDOW, self.window))

    def pooled_fixed_samples(self) -> float:
        """The fixed compute per step every worker is read with: the lower median of what the workers that
        reported measured, so a fixed part counts only once more than half of them measured one. A start-up
        timing can misread (on a 2-core host busy starting the others, 1 read of digits in 24, linear in
        fact, gave 10.6 samples); the same model on like devices has one step cost."""
        reported = np.sort(self.fixed_samples[self.count > 0])
        return float(reported[(len(reported) - 1) // 2]) if len(reported) else 0.0
