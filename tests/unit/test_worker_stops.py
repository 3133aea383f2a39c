"""How a worker ends: blocked in a synchronous pull when the job is over; refused by a PS for good."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import grpc
import pytest
import torch

from star.rpc import star_pb2 as pb
from star.worker.worker import Worker


class _RoundNeverCloses(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self):
        return "the round waits for a worker that stopped"


class _BlockedPS:
    pulled_key = (1,)

    def pull(self, params, timeout_s):
        raise _RoundNeverCloses()


class _Link:
    """The coordinator link: its replies to heartbeats say stop once the job is done."""

    def __init__(self, done_after_beats: int):
        self.beats, self.done_after = 0, done_after_beats

    def heartbeat(self, iteration: int) -> None:
        self.beats += 1

    def directives(self) -> pb.Directives:
        return pb.Directives(stop=self.beats >= self.done_after)


def test_a_worker_whose_round_never_closes_stops_when_a_heartbeat_reply_says_the_job_is_done():
    """Started by hand (no launcher to SIGTERM it), a worker waiting on a round the stopped workers would never
    close kept pulling and heartbeating after the job ended."""
    worker = Worker.__new__(Worker)  # only what _pull uses
    worker.stop, worker.iteration, worker.relay = threading.Event(), 7, None
    worker.link = _Link(done_after_beats=3)
    worker.config = SimpleNamespace(pull_poll_s=0.01, ps_retry_attempts=3, ps_retry_base_s=0.01)
    worker.host = SimpleNamespace(params=torch.zeros(4))
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("pulled", worker._pull(_BlockedPS())), daemon=True)
    thread.start()
    thread.join(10.0)
    assert not thread.is_alive(), "the worker kept waiting on a round after the job ended"
    assert outcome["pulled"] is False and worker.stop.is_set() and worker.link.beats == 3


class _Refused(grpc.RpcError):
    def __init__(self, code):
        self._code = code

    def code(self):
        return self._code

    def details(self):
        return "total_numel 121674 does not match this job's model (254720 elements)"


@pytest.mark.parametrize("code, ends", [(grpc.StatusCode.INVALID_ARGUMENT, 3), (grpc.StatusCode.UNAUTHENTICATED, 3),
                                        (grpc.StatusCode.INTERNAL, None)])
def test_a_worker_refused_for_good_exits_3_with_one_line_and_other_errors_keep_their_traceback(monkeypatch, caplog, code, ends):
    """A hand-started worker with another --task than the job's (or a wrong token) ended in a gRPC traceback."""
    from star.worker import worker as worker_module

    class RefusedWorker:
        def __init__(self, config):
            self.stop = threading.Event()

        def run(self):
            raise _Refused(code)

    monkeypatch.setattr(worker_module, "Worker", RefusedWorker)
    monkeypatch.setattr(worker_module.signal, "signal", lambda *args: None)
    config = SimpleNamespace(threads=1, worker_id=1)
    if ends is None:
        with pytest.raises(grpc.RpcError):
            worker_module.run_worker(config)
        return
    with caplog.at_level("ERROR"):
        assert worker_module.run_worker(config) == ends
    assert f"refused: {code.name}: total_numel 121674 does not match" in caplog.text
