"""The PS-call backoff: retries what an outage explains, and gives up at once when the process is told to stop."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from star.rpc.retries import with_retries


class _Failure(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode):
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


def _always(code: grpc.StatusCode, calls: list):
    def call():
        calls.append(time.monotonic())
        raise _Failure(code)
    return call


def test_an_unavailable_ps_is_tried_again_up_to_the_attempts():
    calls: list = []
    with pytest.raises(_Failure):
        with_retries(_always(grpc.StatusCode.UNAVAILABLE, calls), attempts=3, base_delay_s=0.01, on_retry=lambda *_: None)
    assert len(calls) == 3


def test_a_refusal_is_not_retried():
    calls: list = []
    with pytest.raises(_Failure):
        with_retries(_always(grpc.StatusCode.INVALID_ARGUMENT, calls), attempts=3, base_delay_s=0.01, on_retry=lambda *_: None)
    assert len(calls) == 1


def test_a_stop_during_the_backoff_ends_the_retries_at_once():
    """A worker told to stop (SIGTERM) while its PS is gone used to retry for ~20 s holding its shared memory."""
    calls: list = []
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    with pytest.raises(_Failure):
        with_retries(_always(grpc.StatusCode.UNAVAILABLE, calls), attempts=8, base_delay_s=2.0, on_retry=lambda *_: None,
                     stop=stop)
    assert time.monotonic() - started < 1.5 and len(calls) == 1
