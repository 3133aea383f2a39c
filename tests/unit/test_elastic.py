"""Elastic membership: where a worker joining mid-run goes in the plan."""

from __future__ import annotations

from star.elastic import admission_plan, with_worker
from star.plan import asgd, grouped, kofn, ssgd


def test_a_newcomer_joins_a_fully_synchronous_plan_and_every_round_waits_for_it():
    plan = with_worker(ssgd([0, 1, 2], epoch=3), 3)
    assert plan.groups == ((0, 1, 2, 3),) and plan.quorum == (4,) and plan.epoch == 3


def test_a_newcomer_joins_the_smallest_group_and_a_partial_quorum_stays_as_it_was():
    assert with_worker(grouped([(0, 1, 2), (3, 4)]), 5).groups == ((0, 1, 2), (3, 4, 5))
    assert with_worker(kofn([0, 1, 2], 2), 3).quorum == (2,)
    assert with_worker(asgd([0, 1]), 2).groups == ((0,), (1,), (2,))


def test_admission_bumps_the_epoch_and_skips_workers_lost_meanwhile():
    current = ssgd([0, 1, 2], epoch=5)
    plan = admission_plan(current, {3, 4}, lost={4})
    assert plan.epoch == 6 and plan.workers == (0, 1, 2, 3)
    assert admission_plan(current, {4}, lost={4}) is None
    assert admission_plan(current, {1}, lost=set()) is None  # already a member
