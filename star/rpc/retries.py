"""Which gRPC failures are worth another try, and the backoff loop that tries again."""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

import grpc

T = TypeVar("T")

RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
MAX_DELAY_S = 5.0


def with_retries(call: Callable[[], T], *, attempts: int, base_delay_s: float, on_retry: Callable[[int, Exception], None],
                 stop: threading.Event | None = None) -> T:
    """Retry `call` on UNAVAILABLE/DEADLINE_EXCEEDED with exponential backoff, then re-raise. A set `stop` (the
    process was asked to end) ends the backoff at once and re-raises the last failure: a process told to stop
    must not spend its grace period retrying a PS that is shutting down too."""
    stop = stop or threading.Event()
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() not in RETRYABLE or attempt == attempts or stop.is_set():
                raise
            on_retry(attempt, exc)
            if stop.wait(min(base_delay_s * 2 ** (attempt - 1), MAX_DELAY_S)):
                raise
    raise AssertionError("unreachable")
