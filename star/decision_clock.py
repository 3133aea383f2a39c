"""When the coordinator decides next: at the end of every decision period, or at once when a report
crosses the control loop's slowdown watch (star.control_loop.ControlLoop.slowdown_watch).

Why: a worker that slows down sharply while it holds a large batch holds every synchronous round back
until its batch is cut. Waiting for the period's end added up to a period (on average half of one) to
that, in which a 3x straggler at a large batch ran another iteration or two at its slow speed. The
report that shows the slowdown is the evidence the decision needs; the clock lets it in at once.

The gRPC thread that accepts a report calls `wake()`; the control thread calls `wait()`. The watch is
armed by the control thread after each decision, under the service's lock, and cleared by `wake()`, so
reports bring at most one decision forward before the loop re-arms it.
"""

from __future__ import annotations

import threading
import time
from typing import Mapping

import numpy as np

STOP_POLL_S = 0.1  # how often a waiting control thread looks at the stop flag


class DecisionClock:
    def __init__(self, period_s: float):
        self.period_s = period_s
        self.watch: Mapping[int, float] = {}  # worker -> per-sample time above which its report wakes the loop
        self.since = np.zeros(0, dtype=np.int64)  # per worker, its report count when the watch was armed
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._woken_by: list[int] = []
        self._next_s = time.monotonic() + period_s

    def arm(self, watch: Mapping[int, float], report_counts: np.ndarray) -> None:
        """After a decision: the loop's slowdown watch as it now stands, for reports after `report_counts`."""
        with self._lock:
            self.watch, self.since = watch, report_counts

    def threshold(self, worker: int) -> float | None:
        """The per-sample time a report from `worker` is checked against (None: not watched)."""
        return self.watch.get(worker)

    def wake(self, worker: int) -> None:
        """Decide now: a report from `worker` crossed the watch, which is off until the loop re-arms it."""
        with self._lock:
            self.watch = {}
            self._woken_by.append(worker)
            self._wake.set()

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
            if not woken_by:  # the period's end
                self._next_s = time.monotonic() + self.period_s
            return woken_by
        return None
