"""A worker's pull is answered under one plan: it pulls again while the shards disagree."""

from __future__ import annotations

import threading

import pytest

from star.worker.pulling import pull_under_one_plan


def _shards(epochs_per_pull: list[int]):
    """A fake PS client whose n-th pull leaves `epochs_per_pull[n]` as the pulled epoch (-1: shards disagree)."""
    made = []

    def pull() -> None:
        made.append(epochs_per_pull[min(len(made), len(epochs_per_pull) - 1)])

    return pull, (lambda: made[-1]), made


@pytest.mark.parametrize("epochs, pulls", [([3], 1), ([-1, 3], 2), ([-1, -1, -1, 4], 4)])
def test_a_pull_is_repeated_until_every_shard_answers_under_the_same_plan(epochs, pulls):
    pull, epoch, made = _shards(epochs)
    assert pull_under_one_plan(pull, epoch, patience_s=5.0, stop=threading.Event(), retry_s=0.0) == pulls
    assert made[-1] == epochs[-1]


def test_a_shard_that_lags_past_the_patience_is_not_waited_for():
    pull, epoch, made = _shards([-1])
    assert pull_under_one_plan(pull, epoch, patience_s=0.05, stop=threading.Event(), retry_s=0.01) >= 2
    assert made[-1] == -1  # goes on with the mixed pull: a refused push makes it pull again


def test_a_stop_ends_the_repeats():
    stop = threading.Event()
    stop.set()
    pull, epoch, _ = _shards([-1])
    assert pull_under_one_plan(pull, epoch, patience_s=60.0, stop=stop) == 1
