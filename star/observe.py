"""The coordinator's observability: one object fed by its events, reports and evaluations.

It keeps the straggler ledger (result.json's `straggler_summary`), writes TensorBoard scalars
and OUT/iterations.csv (every worker report: what `star report` draws), and answers
Prometheus scrapes. The coordinator only calls the `on_*` hooks.
"""

from __future__ import annotations

import csv
import logging
import threading
import time
from pathlib import Path

from star.logs import log
from star.metrics import JobMetrics, SnapshotCollector, WorkerMetrics, job_families, serve_metrics
from star.straggler import StragglerLedger, mean_over_ps
from star.waits import CAUSED_PREFIX, per_worker_seconds

logger = logging.getLogger("coordinator")

ITERATIONS_FILE = "iterations.csv"
ITERATION_COLUMNS = ("t", "worker", "iteration", "compute_s", "push_s", "pull_s", "batch_size", "amp", "slowdown")


class JobObserver:
    def __init__(self, out: Path, tensorboard: bool, clock=time.monotonic):
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self.ledger = StragglerLedger()
        self._latest: dict[int, object] = {}  # worker -> its latest accepted report
        self._amp: dict[int, bool] = {}
        self._mode = ""
        self._epoch = 0
        self._metric: tuple[float, int] | None = None  # (value, version)
        self._version_changed_at: float | None = None
        self._finished = False
        self._closed = False
        path = out / ITERATIONS_FILE
        fresh = not path.exists() or path.stat().st_size == 0
        self._iterations_handle = open(path, "a", newline="")  # a restarted coordinator appends
        self._iterations = csv.writer(self._iterations_handle)
        if fresh:
            self._iterations.writerow(ITERATION_COLUMNS)
        self.tensorboard = None
        if tensorboard:
            from star.tensorboard_log import TensorBoardLog

            self.tensorboard = TensorBoardLog(out / "tensorboard")

    def _now(self) -> float:
        return self._clock() - self._start

    # ---- hooks -----------------------------------------------------------------------
    def on_event(self, event: dict) -> None:
        with self._lock:
            if self._closed:
                return
            self.ledger.on_event(event)
            kind = event.get("kind")
            if kind == "plan":
                self._mode, self._epoch = str(event.get("mode", "")), int(event.get("epoch", 0))
            elif kind in ("amp", "directives") and "worker" in event:
                self._amp[event["worker"]] = bool(event.get("amp"))
            elif kind == "result_written":
                self._finished = True
            if self.tensorboard is not None:
                self.tensorboard.decision(event)

    def on_report(self, report) -> None:
        """An accepted (non-heartbeat) IterationReport."""
        with self._lock:
            if self._closed:
                return
            w = report.worker_id
            self._latest[w] = report
            self.ledger.on_report(w, report.iteration, report.compute_s, report.push_s, report.pull_s)
            self._iterations.writerow((round(self._now(), 4), w, report.iteration, round(report.compute_s, 6),
                                       round(report.push_s, 6), round(report.pull_s, 6), report.batch_size,
                                       int(report.amp), round(report.slowdown, 4)))
            if self.tensorboard is not None:
                self.tensorboard.iteration(w, report.iteration, report.compute_s, report.push_s, report.pull_s, report.loss)

    def on_eval(self, metric_name: str, metric: float, version: int) -> None:
        with self._lock:
            if self._metric is None or version != self._metric[1]:
                self._version_changed_at = self._now()
            self._metric = (metric, version)
            if self.tensorboard is not None:
                self.tensorboard.metric(metric_name, metric, version)

    # ---- outputs ---------------------------------------------------------------------
    def straggler_summary(self, ps_counters: list[dict[str, int]]) -> dict[str, dict]:
        caused = mean_over_ps([per_worker_seconds(c, CAUSED_PREFIX) for c in ps_counters])
        with self._lock:
            return self.ledger.summary(self._now(), caused)

    def snapshot(self, metric_name: str) -> JobMetrics:
        with self._lock:
            now = self._now()
            workers = {
                w: WorkerMetrics(iterations=r.iteration, compute_s=r.compute_s, push_s=r.push_s, pull_wait_s=r.pull_s,
                                 batch_size=r.batch_size, amp=bool(r.amp), straggler=self.ledger.flagged(w),
                                 flagged_slow_s=self.ledger.flagged_s(w, now))
                for w, r in self._latest.items()
            }
            metric, version = self._metric if self._metric is not None else (None, 0)
            since = None if self._version_changed_at is None else now - self._version_changed_at
            return JobMetrics(workers=workers, mode=self._mode, plan_epoch=self._epoch, metric_name=metric_name,
                              metric=metric, version=version, seconds_since_update=since, elapsed_s=now,
                              finished=self._finished)

    def serve_metrics(self, host: str, port: int, metric_name: str) -> int:
        _server, bound = serve_metrics(SnapshotCollector(lambda: self.snapshot(metric_name), job_families), host, port)
        log(logger, logging.INFO, "serving /metrics", port=bound)
        return bound

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._iterations_handle.close()
            if self.tensorboard is not None:
                self.tensorboard.close()
                self.tensorboard = None
