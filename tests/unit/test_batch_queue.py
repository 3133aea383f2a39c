"""The pending-batch rule one worker daemon and the simulator share (star.policy.batch_queue, star.sim.pending_batches)."""

from __future__ import annotations

import numpy as np
import pytest

from star.policy.batch_queue import PendingBatch, batch_for_iteration, queue_batch
from star.sim.pending_batches import PendingBatches


def test_a_directive_due_later_queues_behind_one_due_earlier():
    first = PendingBatch(31, 225, 13, at_once=True)
    queue = queue_batch([first], PendingBatch(22, 234, 14, at_once=True), (64, None))
    assert queue == [first, PendingBatch(22, 234, 14, at_once=True)]


@pytest.mark.parametrize("from_iteration", [12, 13])
def test_a_directive_due_at_or_before_a_pending_one_replaces_it(from_iteration):
    queue = queue_batch([PendingBatch(31, 225, 13)], PendingBatch(40, 0, from_iteration), (64, None))
    assert queue == [PendingBatch(40, 0, from_iteration)]


def test_a_directive_that_changes_nothing_is_dropped():
    assert queue_batch([], PendingBatch(64, None, 9), (64, None)) == []
    kept = [PendingBatch(70, 0, 4)]
    assert queue_batch(kept, PendingBatch(70, 0, 6), (64, None)) == kept


def test_each_iteration_runs_the_latest_due_batch_and_a_newer_cut_at_once_ahead_of_its_iteration():
    queue = [PendingBatch(31, 225, 13, at_once=True), PendingBatch(22, 234, 14, at_once=True)]
    at_12 = batch_for_iteration(queue, 12, (64, None))
    assert (at_12.size, at_12.offset, at_12.cut, at_12.pending) == (22, None, True, queue)
    at_13 = batch_for_iteration(queue, 13, (22, None))
    assert (at_13.size, at_13.offset, at_13.cut, at_13.pending) == (22, 225, True, queue[1:])
    assert at_13.placed_size == 31  # the placement due at 13 was directed with 31 samples; the cut runs its head
    at_14 = batch_for_iteration(at_13.pending, 14, (22, 225))
    assert (at_14.size, at_14.offset, at_14.cut, at_14.pending) == (22, 234, False, [])


def test_a_cut_not_marked_at_once_waits_for_its_iteration():
    taken = batch_for_iteration([PendingBatch(20, 0, 7)], 6, (64, None))
    assert (taken.size, taken.cut) == (64, False)


def test_the_simulator_keeps_a_straggler_s_first_cut_for_the_rounds_before_its_second():
    """Worker 1 of 3 is cut to 31 from iteration 13, then to 22 from 14 before reaching 13: it runs 31 at 13 (the
    simulator used to keep only the newest directive and ran 64 at 13), then 22; worker 0 has nothing pending."""
    pending, batch, placed = PendingBatches(), np.full(3, 64, dtype=np.int64), np.full(3, 64, dtype=np.int64)
    pending.direct(1, 31, 13, at_once=False, in_force=64)
    pending.direct(1, 22, 14, at_once=False, in_force=64)
    workers = np.array([0, 1])
    for iteration, expected in ((12, 64), (13, 31), (14, 22)):
        pending.take_due(workers, np.full(2, iteration), batch, placed)
        assert batch[1] == placed[1] == expected and batch[0] == placed[0] == 64
    assert pending.queues == {}


def test_a_cut_at_once_keeps_the_size_of_the_place_it_replaces_until_its_own_iteration():
    """Read with the place in force (not the cut), every iteration before the cut's own runs the cut's samples as the
    head of the old place, and says so (placed_size): the gradient is weighted as the whole place (Worker._weigh)."""
    queue = [PendingBatch(41, 0, 15, at_once=True)]
    for iteration in (13, 14):
        taken = batch_for_iteration(queue, iteration, (70, 64))
        assert (taken.size, taken.placed_size, taken.offset, taken.cut) == (41, 70, 64, True)
    taken = batch_for_iteration(queue, 15, (70, 64))
    assert (taken.size, taken.placed_size, taken.offset, taken.cut, taken.pending) == (41, 41, 0, False, [])


def test_the_simulator_runs_a_cut_at_once_in_the_place_it_replaces():
    pending, batch, placed = PendingBatches(), np.full(2, 70, dtype=np.int64), np.full(2, 70, dtype=np.int64)
    pending.direct(1, 41, 15, at_once=True, in_force=70)
    assert pending.cut_now(1, 70) == 41
    for iteration, samples, place in ((13, 41, 70), (14, 41, 70), (15, 41, 41)):
        pending.take_due(np.array([0, 1]), np.full(2, iteration), batch, placed)
        assert (batch[1], placed[1]) == (samples, place) and batch[0] == placed[0] == 70


def test_the_simulator_cuts_a_woken_worker_at_once_only_for_a_smaller_batch():
    pending = PendingBatches()
    pending.direct(2, 30, 9, at_once=True, in_force=64)
    pending.direct(3, 80, 9, at_once=True, in_force=64)
    assert pending.cut_now(2, 64) == 30 and pending.cut_now(3, 64) is None and pending.cut_now(0, 64) is None


@pytest.mark.parametrize("size", [41, 30, 55])
def test_a_cut_running_at_once_keeps_running_when_a_later_decision_re_sends_its_size_unmarked(size):
    """Every decision re-sends every worker's size, marked at once only for the workers whose reports woke it: a
    decision woken by another worker (or timed) re-sends the straggler's cut, or a new one, for the same iteration.
    The straggler must not go back to its whole place of 70 until then (it did, with the place read as in force)."""
    queue = queue_batch([], PendingBatch(41, 0, 15, at_once=True), (70, 64))
    queue = queue_batch(queue, PendingBatch(size, 0, 15, at_once=False), (70, 64))
    taken = batch_for_iteration(queue, 14, (70, 64))
    assert (taken.size, taken.placed_size, taken.cut) == (size, 70, True)
    assert queue_batch([], PendingBatch(30, 0, 15, at_once=False), (70, 64)) == [PendingBatch(30, 0, 15)]  # no cut to keep
    grown = queue_batch(queue, PendingBatch(80, 0, 15, at_once=False), (70, 64))
    assert batch_for_iteration(grown, 14, (70, 64)).size == 70  # a bigger batch is no cut: it waits for its iteration
