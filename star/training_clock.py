"""Whether a job has started training, from the PSs' clock as the evaluator reads it.

The coordinator ends a job that has not trained within `startup_timeout_s` of its start. Two readings
are not "no update yet" although they look like it: a PS that cannot be reached for a while mid-job (a
crash and restart: the evaluator reads -1), which before this ended a job older than the timeout as
"no update before the start-up timeout"; and a resumed job, whose PSs hold their clock at the stopped
run's training time until the first update (star.ps_server.restoring), so it reads >= 0 but stands still.
So the job has trained once the clock has been seen moving, and stays so.
"""

from __future__ import annotations


class TrainingClock:
    def __init__(self, startup_timeout_s: float, now: float):
        self.deadline = now + startup_timeout_s
        self._first: float | None = None  # the first reading >= 0 (a resumed job's standing clock)
        self._repeats = 0  # later readings equal to it: the clock stands
        self.moved = False

    def read(self, since: float) -> None:
        """One reading of seconds since the first update (< 0: none, or no PS answered)."""
        if since < 0 or self.moved:
            return
        if self._first is None:
            self._first = since
        elif since != self._first:
            self.moved = True
        else:
            self._repeats += 1

    def stalled_at_start(self, now: float) -> bool:
        """The start-up timeout passed and no update was ever seen being made: no reading >= 0, or a clock read
        standing still. One reading >= 0 alone is not enough to tell (a first update just made), so it waits."""
        if self.moved or now <= self.deadline:
            return False
        return self._first is None or self._repeats > 0
