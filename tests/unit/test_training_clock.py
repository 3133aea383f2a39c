"""The coordinator's start-up timeout reads the PSs' clock: when has a job trained?"""

from __future__ import annotations

import pytest

from star.training_clock import TrainingClock


def _clock(readings: list[float]) -> TrainingClock:
    clock = TrainingClock(startup_timeout_s=10.0, now=0.0)
    for since in readings:
        clock.read(since)
    return clock


@pytest.mark.parametrize("readings, stalled", [
    ([], True),  # nothing answered
    ([-1.0, -1.0, -1.0], True),  # the PSs answer, no update yet
    ([-1.0, 0.02, 0.51], False),  # a fresh job's first update, then its clock runs
    ([42.0, 42.0, 42.0], True),  # a resumed job whose PSs hold the stopped run's time: no update since
    ([42.0, 42.0, 42.3], False),  # ... until its first update moves the clock on
    ([0.02, 0.5, -1.0, -1.0, -1.0], False),  # a PS unreachable mid-job (a restart): it has trained, nothing stalled
    ([-1.0, 179.9], False),  # a first update just before the timeout, read once: wait for the next reading
    ([42.0], False),  # one reading of a clock: not yet known to stand
])
def test_a_job_is_stalled_at_start_only_if_its_clock_was_never_seen_moving(readings, stalled):
    assert _clock(readings).stalled_at_start(now=11.0) is stalled


def test_nothing_is_stalled_before_the_start_up_timeout():
    assert not _clock([-1.0]).stalled_at_start(now=9.0)
