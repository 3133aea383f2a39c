"""The worker's link to the coordinator: join once, then report every iteration off the hot path.

Reports go through a background thread, so a slow or restarting coordinator never
stalls training; the latest directives it answered with are read at the next
iteration boundary.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from dataclasses import dataclass

import grpc
import psutil

from star.logs import log
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CONTROL_CHANNEL_OPTIONS
from star.rpc.security import Credentials

logger = logging.getLogger("worker")


@dataclass(frozen=True)
class IterationTimes:
    iteration: int
    compute_s: float
    push_s: float
    pull_s: float
    batch_size: int
    amp: bool
    loss: float
    slowdown: float
    paced_s: float = 0.0  # waited for the plan's push pace (not part of push_s)
    fixed_samples: float = 0.0  # a step's fixed compute in samples' worth (star.worker.step_cost; 0: in proportion)


class CoordinatorLink:
    def __init__(self, address: str, worker_id: int, join_timeout_s: float = 60.0, credentials: Credentials | None = None):
        self.worker_id = worker_id
        self.join_timeout_s = join_timeout_s
        credentials = credentials if credentials is not None else Credentials.load()
        self._channel = credentials.channel(address, CONTROL_CHANNEL_OPTIONS)
        self._stub = pb_grpc.CoordinatorStub(self._channel)
        self._queue: queue.Queue[pb.IterationReport | None] = queue.Queue(maxsize=256)
        self._latest: pb.Directives | None = None
        self.dropped = 0  # reports never delivered (coordinator down or far behind): training never waits for one
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)  # notified when every queued report has had its reply
        self._unanswered = 0  # reports queued and not yet answered (or failed, or dropped)
        self._healthy = True  # the last report got a reply: waiting for the next one is worth it
        self._process = psutil.Process()
        self._process.cpu_percent(None)
        self._thread = threading.Thread(target=self._send_loop, name="reporter", daemon=True)
        self._thread.start()

    def join(self, batch_size: int, amp: bool, stop: threading.Event) -> list[str]:
        """Announce this worker; returns the PS addresses. Retries until join_timeout_s."""
        request = pb.JoinRequest(worker_id=self.worker_id, host=socket.gethostname(), pid=os.getpid(), batch_size=batch_size)
        deadline = time.monotonic() + self.join_timeout_s
        delay = 0.2
        while not stop.is_set():
            try:
                reply = self._stub.Join(request, timeout=5.0)
                with self._lock:
                    self._latest = reply.directives
                return list(reply.ps_addresses)
            except grpc.RpcError as exc:
                if time.monotonic() > deadline or exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                log(logger, logging.WARNING, "coordinator unreachable, retrying join", error=exc.code())
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        return []

    def report(self, times: IterationTimes) -> None:
        message = pb.IterationReport(
            worker_id=self.worker_id,
            iteration=times.iteration,
            compute_s=times.compute_s,
            push_s=times.push_s,
            pull_s=times.pull_s,
            batch_size=times.batch_size,
            amp=times.amp,
            loss=times.loss,
            slowdown=times.slowdown,
            paced_s=times.paced_s,
            fixed_samples=times.fixed_samples,
            cpu_percent=self._process.cpu_percent(None),
        )
        with self._lock:
            self._unanswered += 1
        try:
            self._queue.put_nowait(message)
        except queue.Full:  # coordinator far behind: the newest report matters most
            try:
                self._queue.get_nowait()
                self.dropped += 1
                self._settle()
            except queue.Empty:
                pass
            self._queue.put_nowait(message)

    def wait_for_replies(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` until every report queued so far has its reply, so that directives()
        reflects decisions made before the newest report reached the coordinator. Returns at once while
        the coordinator is not answering (training never waits for it). True when all were answered."""
        with self._answered:
            if not self._healthy:
                return self._unanswered == 0
            return self._answered.wait_for(lambda: self._unanswered == 0, timeout=timeout_s)

    def _settle(self) -> None:
        with self._answered:
            self._unanswered = max(0, self._unanswered - 1)
            if self._unanswered == 0:
                self._answered.notify_all()

    def heartbeat(self, iteration: int) -> None:
        """Say "alive, just blocked": a worker waiting on others must not be taken for lost."""
        with self._lock:
            self._unanswered += 1
        try:
            self._queue.put_nowait(pb.IterationReport(worker_id=self.worker_id, iteration=iteration, heartbeat=True))
        except queue.Full:
            self._settle()  # reports are queued: those prove liveness too

    def directives(self) -> pb.Directives | None:
        with self._lock:
            return self._latest

    def close(self) -> None:
        if self.dropped:
            log(logger, logging.INFO, "reports never delivered", worker=self.worker_id, reports_dropped=self.dropped)
        self._queue.put(None)
        self._thread.join(timeout=2.0)
        self._channel.close()

    def _send_loop(self) -> None:
        warned = False
        while True:
            message = self._queue.get()
            if message is None:
                return
            try:
                reply = self._stub.Report(message, timeout=5.0)
                with self._lock:
                    self._latest = reply
                    self._healthy = True
                if warned:
                    log(logger, logging.INFO, "coordinator reachable again", reports_dropped=self.dropped)
                warned = False
            except grpc.RpcError as exc:
                with self._lock:
                    self._healthy = False
                if not message.heartbeat:
                    self.dropped += 1
                if not warned:
                    log(logger, logging.WARNING, "report to coordinator failed; dropped, training goes on", error=exc.code())
                    warned = True
            finally:
                self._settle()
