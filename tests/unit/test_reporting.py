"""A worker's link to the coordinator: reports are sent in the background, and a worker can wait
briefly for the reply to its last report (which carries the directives decided before it arrived),
but never waits on a coordinator that is not answering."""

from __future__ import annotations

import time
from concurrent import futures
from contextlib import closing

import grpc
import pytest

from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.security import Credentials
from star.worker.reporting import CoordinatorLink, IterationTimes


class _SlowCoordinator(pb_grpc.CoordinatorServicer):
    """Answers each report after `delay_s` with a directive naming the report's iteration."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self.reports: list[int] = []

    def Report(self, request, context):
        time.sleep(self.delay_s)
        self.reports.append(request.iteration)
        return pb.Directives(batch_size=100 + request.iteration)


@pytest.fixture
def coordinator():
    servicers = []

    def start(delay_s: float):
        servicer = _SlowCoordinator(delay_s)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_CoordinatorServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servicers.append(server)
        return servicer, f"127.0.0.1:{port}"

    yield start
    for server in servicers:
        server.stop(grace=None)


def _times(iteration: int) -> IterationTimes:
    return IterationTimes(iteration, 0.1, 0.01, 0.01, 64, False, 1.0, 1.0, 0.0)


def test_waiting_for_replies_returns_once_the_last_report_is_answered_with_its_directives(coordinator):
    servicer, address = coordinator(delay_s=0.2)
    with closing(CoordinatorLink(address, worker_id=0, credentials=Credentials())) as link:
        link.report(_times(1))
        link.report(_times(2))
        assert link.wait_for_replies(timeout_s=5.0)
        assert servicer.reports == [1, 2]
        assert link.directives().batch_size == 102


def test_waiting_gives_up_after_the_timeout_when_the_reply_is_slow(coordinator):
    _, address = coordinator(delay_s=1.0)
    with closing(CoordinatorLink(address, worker_id=0, credentials=Credentials())) as link:
        link.report(_times(1))
        started = time.monotonic()
        assert not link.wait_for_replies(timeout_s=0.05)
        assert time.monotonic() - started < 0.9  # did not wait for the reply itself
        assert link.wait_for_replies(timeout_s=5.0) and link.directives().batch_size == 101


def test_a_worker_never_waits_on_a_coordinator_that_does_not_answer():
    with closing(CoordinatorLink("127.0.0.1:1", worker_id=0, credentials=Credentials())) as link:  # nothing listens there
        link.report(_times(1))
        assert link.wait_for_replies(timeout_s=10.0)  # the failed report counts as settled
        link.report(_times(2))
        started = time.monotonic()
        link.wait_for_replies(timeout_s=10.0)
        assert time.monotonic() - started < 1.0  # after a failure it does not wait for the next reply


def test_every_report_and_heartbeat_is_settled_even_when_the_queue_overflows(coordinator):
    _, address = coordinator(delay_s=0.0)
    with closing(CoordinatorLink(address, worker_id=0, credentials=Credentials())) as link:
        for i in range(300):  # more than the queue holds: the oldest are dropped, each settled
            link.report(_times(i))
            link.heartbeat(i)
        assert link.wait_for_replies(timeout_s=20.0)
