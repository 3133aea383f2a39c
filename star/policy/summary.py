"""One worker's recent behaviour as the controller judges it (star.report_book and star.cluster build them)."""

from __future__ import annotations

from typing import NamedTuple


class WorkerSummary(NamedTuple):
    """One worker's recent behaviour, from reports made under its current AMP setting.
    (A NamedTuple: a decision at 1,000 workers builds a thousand of them.)"""

    per_sample_s: float  # median compute seconds per sample (includes replayed slowdown)
    comm_s: float  # median push seconds x 2 (pull moves the same bytes; its blocked time excluded) + fixed compute (report_book)
    batch_size: int
    amp_reports: int  # recent reports that ran with AMP on
    reports: int  # recent reports summarised
    silent_s: float = 0.0  # seconds since its last report
    recent_per_sample_s: float | None = None  # median over fewer, newer reports: what batch sizing acts on (None: per_sample_s)
    sizing_rel_error: float = 0.0  # relative standard error of sizing_per_sample_s, from its reports' spread (0: unknown)
    fixed_compute_s: float = 0.0  # the part of comm_s that is the step's fixed compute (star.report_book; 0 on CPUs)

    @property
    def sizing_per_sample_s(self) -> float:
        """The per-sample time batch sizing acts on: the newest reports' when known. A slowdown shows
        in them a report or two before it dominates the longer median the detector judges."""
        return self.per_sample_s if self.recent_per_sample_s is None else self.recent_per_sample_s

    @property
    def link_s(self) -> float:
        """Seconds its pushes and pulls take an iteration: comm_s without the step's fixed compute (star.policy.links)."""
        return self.comm_s - self.fixed_compute_s
