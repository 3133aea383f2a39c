"""What the coordinator knows about the workers (ClusterView), and its PSs' layout and noise scale."""

from __future__ import annotations

import statistics
from collections import deque
from typing import Mapping

import numpy as np

from star.control_loop import PsInput
from star.coordinator_checks import ABSURD_S
from star.policy.noise import noise_scale
from star.policy.summary import WorkerSummary
from star.report_book import WINDOW, ReportBook
from star.rpc import star_pb2 as pb
from star.rpc.common import host_of


class ClusterView:
    """What the coordinator knows about the workers.

    Two records, each with its own job: `book` holds what the policies decide on (per-sample
    speeds by AMP setting, when each worker was last heard: the rule the simulator runs too), and
    `reports` the raw reports, for the iteration counts and the run's compute/communication summary.
    """

    def __init__(self, num_workers: int, window: int):
        self.num_workers = num_workers
        self.reports: dict[int, deque[pb.IterationReport]] = {}
        self.window = window
        self.book = ReportBook(num_workers, window=min(WINDOW, window), keep=window)  # what the Controller reads
        self.joined: set[int] = set()
        self.ignored: dict[str, int] = {}
        self._first_report_s: float | None = None

    def accept(self, report: pb.IterationReport, now_s: float) -> bool:
        """Record a report; reports from unknown workers, or going backwards, are counted and ignored.
        A heartbeat only proves the worker alive (it is blocked, e.g. in an SSGD pull)."""
        if report.worker_id >= self.num_workers:
            return self._ignore("unknown_worker")
        if report.heartbeat:
            if report.worker_id in self.reports:
                self.book.heard(report.worker_id, now_s)
            return False
        history = self.reports.setdefault(report.worker_id, deque(maxlen=self.window))
        if history and report.iteration <= history[-1].iteration:
            return self._ignore("out_of_order")
        times = (report.compute_s, report.push_s, report.pull_s)
        if min(times) < 0:
            return self._ignore("negative_time")
        if max(times) > ABSURD_S or any(t != t for t in times):
            return self._ignore("absurd_time")
        history.append(report)
        if report.batch_size > 0:
            self.book.record(np.array([report.worker_id]), now_s, np.array([report.compute_s]), report.push_s,
                             np.array([report.batch_size]), np.array([report.amp]), max(report.fixed_samples, 0.0))
        else:
            self.book.record_without_speed(report.worker_id, now_s)
        if self._first_report_s is None:
            self._first_report_s = now_s
        return True

    def forget(self, worker: int) -> None:
        """Drop a worker's history (it restarted); it is judged again once it has reported anew."""
        self.reports.pop(worker, None)
        self.book.forget(worker)

    def _ignore(self, reason: str) -> bool:
        self.ignored[reason] = self.ignored.get(reason, 0) + 1
        return False

    def summaries(self, now_s: float, amp_state: dict[int, bool]) -> dict[int, WorkerSummary]:
        """Per worker: medians over its latest reports made under its current AMP setting (the rule
        is `star.report_book`'s, which the simulator runs too)."""
        return self.book.summaries(now_s, self._amp_array(amp_state))

    def _amp_array(self, amp_state: dict[int, bool]) -> np.ndarray:
        amp = np.zeros(self.num_workers, dtype=bool)
        for worker, on in amp_state.items():
            if 0 <= worker < self.num_workers:
                amp[worker] = on
        return amp

    def sizing_above(self, thresholds: Mapping[int, float], amp_state: dict[int, bool], since: np.ndarray,
                     confirming: frozenset[int] = frozenset()) -> list[int]:
        """The workers of `thresholds` whose reports since the report counts `since` show a per-sample time
        above their threshold (star.report_book.ReportBook.sizing_above, the rule the simulator runs too)."""
        return self.book.sizing_above(thresholds, self._amp_array(amp_state), since, confirming)

    def unsized(self, workers: list[int] | tuple[int, ...], amp_state: dict[int, bool], min_reports: int) -> list[int]:
        """The listed workers the controller cannot size yet (star.report_book.ReportBook.unsized)."""
        return self.book.unsized(workers, self._amp_array(amp_state), min_reports)

    def amp_switched(self, worker: int, amp_on: bool) -> None:
        """The coordinator switched `worker`'s AMP: its older reports under the new setting are not summarised."""
        if 0 <= worker < self.num_workers:
            self.book.amp_switched(worker, amp_on)

    def report_counts(self) -> np.ndarray:
        """Reports accepted per worker so far (what `sizing_above` counts a report as new against)."""
        return self.book.count.copy()

    def compute_vs_comm(self) -> dict[str, float | None]:
        """Median compute and communication seconds per iteration over the recent reports.

        Communication = push + pull of the same bytes, estimated as 2 x push: a pull's
        time also includes blocking on other workers, which is not communication.
        """
        reports = [r for history in self.reports.values() for r in history]
        if not reports:
            return {"compute_s_median": None, "comm_s_median": None, "compute_to_comm": None, "compute_s_cv": None}
        compute = statistics.median(r.compute_s for r in reports)
        comm = 2 * statistics.median(r.push_s for r in reports)
        spreads = [statistics.pstdev(times) / statistics.fmean(times) for times in
                   ([r.compute_s for r in history] for history in self.reports.values()) if len(times) >= 2 and statistics.fmean(times) > 0]
        return {
            "compute_s_median": round(compute, 5),
            "comm_s_median": round(comm, 5),
            "compute_to_comm": round(compute / comm, 2) if comm > 0 else None,
            # per-iteration noise: each worker's coefficient of variation of compute seconds, median over workers
            "compute_s_cv": round(statistics.median(spreads), 4) if spreads else None,
        }

    def max_iteration(self) -> int:
        return max((h[-1].iteration for h in self.reports.values() if h), default=0)

    def last_iteration(self, worker: int) -> int:
        """The iteration of this worker's latest report (0 before its first)."""
        history = self.reports.get(worker)
        return history[-1].iteration if history else 0

    def total_iterations(self) -> int:
        return sum(h[-1].iteration for h in self.reports.values() if h)


def ps_input(addresses: list[str], stats: list) -> PsInput:
    """The control loop's view of the PSs: noise scale and shard layout (no layout while a PS is down)."""
    b_noise = shards_noise_scale(stats, len(addresses))
    ranges = {s.ps_index: 4.0 * (s.range_end - s.range_start) for s in stats}
    if len(stats) < len(addresses) or len(ranges) < len(addresses):
        return PsInput(b_noise)
    return PsInput(b_noise, tuple(host_of(a) for a in addresses), tuple(ranges[i] for i in range(len(addresses))))


def shards_noise_scale(stats: list, num_ps: int) -> float:
    """B_noise summed over shards; 0 while it cannot be estimated (or a PS is down)."""
    if len(stats) < num_ps:
        return 0.0
    small_batch = max((s.noise_small_batch for s in stats), default=0.0)
    big_batch = max((s.noise_big_batch for s in stats), default=0.0)
    value = noise_scale(sum(s.noise_small_sq for s in stats), sum(s.noise_big_sq for s in stats), small_batch, big_batch)
    return value or 0.0
