"""Observers waiting for a parameter version: the PS answers an evaluator's pull when the version it
asked for is applied, instead of the evaluator asking again every `evaluation.poll_s`.

Why: polling every 50 ms was ~40 calls a second to two PSs, 0.04–0.06 of a core on a 2-core host
(README, "The evaluator waits for its version"), for an evaluation every second update. A held call costs
nothing while it waits. The wait is bounded (`MAX_WAIT_S`), so an evaluator still hears how long the job has
run when no update comes, and a PS that stops or hands its shard over ends it at the bound.
"""

from __future__ import annotations

import asyncio
import time

MAX_WAIT_S = 5.0  # the longest a PS holds an observer's call, whatever it asked for


class VersionWatch:
    """Futures of observers, each resolved once the shard's version reaches what it waits for; and when
    the newest version was applied, so that an evaluation is timed when its parameters existed."""

    def __init__(self) -> None:
        self._waiting: list[tuple[int, asyncio.Future]] = []
        self._newest: tuple[int, float] | None = None  # (version, time.monotonic() when it was applied)

    def applied(self, version: int, at: float | None = None) -> None:
        """The shard is at `version` now (applied at monotonic time `at`, default now): wake everyone
        waiting for it or an earlier one."""
        self._newest = (version, time.monotonic() if at is None else at)
        still = []
        for wanted, future in self._waiting:
            if future.done():
                continue
            if version >= wanted:
                future.set_result(None)
            else:
                still.append((wanted, future))
        self._waiting = still

    async def wait_for(self, version: int, wait_s: float) -> None:
        """Return when `applied` reaches `version`, or after min(wait_s, MAX_WAIT_S) seconds."""
        future = asyncio.get_running_loop().create_future()
        self._waiting = [(w, f) for w, f in self._waiting if not f.done()]  # a stalled job's timed-out waits go
        self._waiting.append((version, future))
        try:
            await asyncio.wait_for(future, min(wait_s, MAX_WAIT_S))
        except asyncio.TimeoutError:
            pass
        finally:
            if not future.done():
                future.cancel()

    def applied_at(self, version: int) -> float | None:
        """The monotonic time `version` was applied here; None where this PS did not apply it (restored
        from a checkpoint, handed over) or has applied a newer one since."""
        if self._newest is None or self._newest[0] != version:
            return None
        return self._newest[1]

    @property
    def waiting(self) -> int:
        return sum(not f.done() for _, f in self._waiting)
