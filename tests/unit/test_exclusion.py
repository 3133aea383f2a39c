"""The `exclude` strategy (Dynamic Partial All-Reduce) takes stragglers out of the sync group only where it pays."""

from __future__ import annotations

import pytest

from star.plan import exclude, ssgd
from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy
from star.policy.exclusion import ExclusionPolicy
from star.policy.selector import SelectorConfig


def _times(n: int, slow: set[int], factor: float, base_s: float = 0.1) -> dict[int, float]:
    return {w: base_s * (factor if w in slow else 1.0) for w in range(n)}


@pytest.mark.parametrize("penalty", [0.15, 0.88])
def test_one_three_times_slower_worker_of_four_is_excluded(penalty):
    policy = ExclusionPolicy(SelectorConfig(staleness_penalty=penalty))
    plan, reason = policy.decide(0, ssgd(range(4)), _times(4, {3}, 3.0), {w: 32 for w in range(4)}, frozenset({3}), 0.0)
    assert plan is not None and plan.groups == ((0, 1, 2), (3,)), reason
    assert "beats ssgd" in reason


@pytest.mark.parametrize("workers", [100, 1000])
def test_a_quarter_of_a_large_cluster_slowing_together_stays_in_sync(workers):
    """Excluding 25 of 100 makes 25 streams of stale updates: the cost model prices that above the wait."""
    slow = set(range(0, workers, 4))
    policy = ExclusionPolicy(SelectorConfig())
    plan, reason = policy.decide(0, ssgd(range(workers)), _times(workers, slow, 2.0), {w: 32 for w in range(workers)},
                                 frozenset(slow), 0.0)
    assert plan is None
    assert "ssgd is already the best plan" in reason


def test_every_straggler_recovered_readmits_everyone():
    policy = ExclusionPolicy(SelectorConfig())
    current = exclude(range(4), [3], epoch=2)
    plan, reason = policy.decide(5, current, _times(4, set(), 1.0), {w: 32 for w in range(4)}, frozenset(), 0.0)
    assert plan is not None and plan.groups == ((0, 1, 2, 3),)
    assert reason == "every straggler recovered: readmit"


def test_no_straggler_under_ssgd_changes_nothing():
    plan, _ = ExclusionPolicy(SelectorConfig()).decide(0, ssgd(range(4)), _times(4, set(), 1.0), {w: 32 for w in range(4)},
                                                      frozenset(), 0.0)
    assert plan is None


def test_a_changed_straggler_set_waits_out_the_dwell():
    policy = ExclusionPolicy(SelectorConfig(min_dwell=3))
    batch = {w: 32 for w in range(4)}
    first, _ = policy.decide(1, ssgd(range(4)), _times(4, {3}, 3.0), batch, frozenset({3}), 0.0)
    assert first is not None
    held, reason = policy.decide(2, first, _times(4, {2}, 3.0), batch, frozenset({2}), 0.0)
    assert held is None and reason.startswith("dwell")
    moved, _ = policy.decide(4, first, _times(4, {2}, 3.0), batch, frozenset({2}), 0.0)
    assert moved is not None and moved.groups == ((0, 1, 3), (2,))


def test_exclude_strategy_at_scale_keeps_a_contended_host_in_the_group():
    """Through the controller, as the coordinator and simulator run it: the detector flags a quarter of 100 workers."""
    controller = Controller(for_strategy(ControlConfig(), "exclude"), 100, 32)
    slow = set(range(0, 100, 4))
    summaries = {w: WorkerSummary(t / 32, 0.002, 32, 0, 8, 0.0) for w, t in _times(100, slow, 2.0).items()}
    plan = ssgd(range(100), epoch=1)
    decisions = [controller.decide(period, plan, summaries) for period in range(4)]
    assert any(e["kind"] == "straggler_detected" for d in decisions for e in d.events)
    assert all(d.plan is None for d in decisions)
