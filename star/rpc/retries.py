"""Which gRPC failures are worth another try, and the backoff loop that tries again."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

import grpc

T = TypeVar("T")

RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def with_retries(call: Callable[[], T], *, attempts: int, base_delay_s: float, on_retry: Callable[[int, Exception], None]) -> T:
    """Retry `call` on UNAVAILABLE/DEADLINE_EXCEEDED with exponential backoff, then re-raise."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() not in RETRYABLE or attempt == attempts:
                raise
            on_retry(attempt, exc)
            time.sleep(min(base_delay_s * 2 ** (attempt - 1), 5.0))
    raise AssertionError("unreachable")
