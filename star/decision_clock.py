"""When the coordinator decides next: at the end of every decision period, or at once when a report
crosses the control loop's slowdown watch (star.control_loop.ControlLoop.slowdown_watch), or makes the
last unsized worker of the plan sizable (its sizing watch: the start, after an AMP switch).

Why: a worker that slows down sharply while it holds a large batch holds every synchronous round back
until its batch is cut. Waiting for the period's end added up to a period (on average half of one) to
that, in which a 3x straggler at a large batch ran another iteration or two at its slow speed. The
report that shows the slowdown is the evidence the decision needs; the clock lets it in at once.

The gRPC thread that accepts a report calls `wake()`; the control thread calls `wait()`. The watch is
armed by the control thread after each decision, under the service's lock, and cleared by `wake()`, so
reports bring at most one decision forward before the loop re-arms it.

The report that woke a decision is answered only once that decision is made (`wait_decided`, a few tens of
ms at most): the reply carries its directives to the worker that needs them first, the straggler, which
reads it before its next iteration and can shrink that iteration's batch at once (star.policy.batch_queue,
PendingBatch) where otherwise it would run one more iteration at its old size.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterable, Mapping

import numpy as np

STOP_POLL_S = 0.1  # how often a waiting control thread looks at the stop flag
EARLY_REPLY_WAIT_S = 0.12  # the longest a report that woke a decision waits for it (a worker waits 0.15 s for replies)


class DecisionClock:
    def __init__(self, period_s: float):
        self.period_s = period_s
        self.watch: Mapping[int, float] = {}  # worker -> per-sample time above which its report wakes the loop
        self.since = np.zeros(0, dtype=np.int64)  # per worker, its report count when the watch was armed
        self.unsized: frozenset[int] = frozenset()  # workers batch sizing waited for when armed: the report that ...
        self.min_reports = 0  # ... brings the last of them to this many reports under its AMP setting wakes the loop
        self.confirming: frozenset[int] = frozenset()  # watched workers confirming a step (ReportBook.sizing_above)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._woken_by: list[int] = []
        self._next_s = time.monotonic() + period_s
        self._decided = threading.Condition(self._lock)
        self._started = 0  # decisions wait() has let start
        self._finished = 0  # decisions the control thread has carried out (decided())

    def arm(self, watch: Mapping[int, float], report_counts: np.ndarray, unsized: Iterable[int] = (),
            min_reports: int = 0, confirming: frozenset[int] = frozenset()) -> None:
        """After a decision: the loop's slowdown watch as it now stands, for reports after `report_counts` (and the
        workers of it confirming a step), and its sizing watch: the `unsized` workers of the plan and the report
        count that makes them sizable."""
        with self._lock:
            self.watch, self.since, self.confirming = watch, report_counts, confirming
            self.unsized, self.min_reports = frozenset(unsized), min_reports

    def crossed(self, worker: int, cluster: Any, amp_state: Mapping[int, bool], plan_workers: Iterable[int]) -> bool:
        """Whether the report just accepted from `worker` crosses a watch: it shows a slowdown over the worker's
        threshold, or it is the one that leaves no worker of the plan unsized. `cluster`: a star.cluster.ClusterView."""
        threshold = self.watch.get(worker)
        if threshold is not None and cluster.sizing_above({worker: threshold}, amp_state, self.since, self.confirming):
            return True
        return worker in self.unsized and not cluster.unsized(tuple(plan_workers), amp_state, self.min_reports)

    def wake(self, worker: int) -> int:
        """Decide now: a report from `worker` crossed a watch; both are off until the loop re-arms them.
        Returns the ticket `wait_decided` takes: the decision woken here is the first to finish after it."""
        with self._lock:
            self.watch, self.unsized = {}, frozenset()
            self._woken_by.append(worker)
            self._wake.set()
            return self._started

    def decided(self) -> None:
        """The control thread has carried out the decision wait() last returned (its directives are in place)."""
        with self._decided:
            self._finished += 1
            self._decided.notify_all()

    def wait_decided(self, ticket: int, timeout_s: float) -> bool:
        """Block until the decision a wake() returned `ticket` for is carried out, or `timeout_s` passed.
        A decision under way at the wake was made without its report: the woken one is the one after it."""
        with self._decided:
            return self._decided.wait_for(lambda: self._finished > ticket, timeout=timeout_s)

    def wait(self, stop: threading.Event) -> tuple[int, ...] | None:
        """Block until the next decision: the workers whose reports woke it for an early one, () at the
        period's end, None once `stop` is set."""
        while not stop.is_set():
            now = time.monotonic()
            if now < self._next_s and not self._wake.wait(min(self._next_s - now, STOP_POLL_S)):
                continue
            with self._lock:
                self._wake.clear()
                woken_by, self._woken_by = tuple(self._woken_by), []
                self._started += 1
            if not woken_by:  # the period's end
                self._next_s = time.monotonic() + self.period_s
            return woken_by
        return None
