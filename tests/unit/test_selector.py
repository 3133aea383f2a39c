"""A plan shaped by the slow set is switched to only when the previous decision's times back it too."""

from __future__ import annotations

import pytest

from star.detect import DetectorConfig
from star.plan import exclude, grouped, kofn, ssgd
from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy
from star.policy.learned import LearnedSelector
from star.policy.plan_scores import estimate
from star.policy.selector import HeuristicSelector, PricedTimes, SelectorConfig, full_sync, unconfirmed

BATCH = {w: 32 for w in range(4)}
EVEN = {w: 1.0 for w in range(4)}
SLOW3 = {**EVEN, 3: 3.0}
SLOW2 = {**EVEN, 2: 3.0}


@pytest.mark.parametrize("plan, expected", [(ssgd(range(4)), True), (kofn(range(4), 3), False),
                                            (grouped([(0, 1), (2, 3)]), False)])
def test_only_one_group_waiting_for_all_is_full_synchronisation(plan, expected):
    assert full_sync(plan) is expected


@pytest.mark.parametrize("previous, switches", [
    (SLOW3, True),  # worker 3 was slow at the previous decision too: the switch goes ahead
    (EVEN, False),  # nobody was slow then: the slow set is new, the switch waits
    (SLOW2, True),  # someone else was slow then: k-of-N, which waits for no one in particular, pays at both
    ({0: 1.0, 1: 1.0, 2: 1.0}, False),  # no earlier time of worker 3: nothing to confirm it with
    (None, True),  # no history kept by the caller: nothing asked
])
def test_a_plan_built_on_a_slow_set_needs_the_previous_times_to_back_it(previous, switches):
    decision = HeuristicSelector().decide(10, ssgd(range(4), epoch=1), SLOW3, BATCH, frozenset({3}), 50.0,
                                          previous_iter_time_s=previous)
    assert (decision.plan is not None) is switches
    if not switches:
        assert "earlier iteration times" in decision.reason


def test_going_back_to_full_synchronisation_needs_no_backing():
    current = kofn(range(4), 3, epoch=2)
    decision = HeuristicSelector().decide(10, current, EVEN, BATCH, frozenset(), 50.0, previous_iter_time_s=SLOW3)
    assert decision.plan is not None and full_sync(decision.plan)


def test_a_switch_held_back_does_not_start_the_dwell():
    selector = HeuristicSelector(SelectorConfig(min_dwell=5))
    held = selector.decide(10, ssgd(range(4), epoch=1), SLOW3, BATCH, frozenset({3}), 50.0, previous_iter_time_s=EVEN)
    assert held.plan is None
    confirmed = selector.decide(11, ssgd(range(4), epoch=1), SLOW3, BATCH, frozenset({3}), 50.0, previous_iter_time_s=SLOW3)
    assert confirmed.plan is not None  # not "dwell: last switch 1 decisions ago"


def test_the_learned_selector_asks_the_same_backing():
    decision = LearnedSelector().decide(10, ssgd(range(4), epoch=1), SLOW3, BATCH, frozenset({3}), 50.0,
                                        previous_iter_time_s=EVEN)
    assert decision.plan is None and "earlier iteration times" in decision.reason


def test_unconfirmed_names_the_plan_and_the_gain_it_would_have_had():
    why = unconfirmed(kofn(range(4), 3), ssgd(range(4)), EVEN, BATCH, 0.0, 0.15, 0.1)
    assert why is not None and why.startswith("kofn would have gained only")


def test_a_straggler_that_stays_slow_is_acted_on_one_decision_later():
    detector = DetectorConfig(enter_n=1, exit_n=1)
    config = ControlConfig(amp=False, batch=False, detector=detector, selection=SelectorConfig(modes=("ssgd", "grouped")))
    controller = Controller(for_strategy(config, "auto"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    reports = {w: WorkerSummary(4e-3 if w == 3 else 1e-3, 0.002, 32, 0, 8) for w in range(4)}
    even = {w: WorkerSummary(1e-3, 0.002, 32, 0, 8) for w in range(4)}
    assert controller.decide(0, plan, even).plan is None
    first = controller.decide(1, plan, reports)
    assert first.stragglers == {3} and first.plan is None  # new this decision: held back
    second = controller.decide(2, plan, reports)
    assert second.plan is not None and not full_sync(second.plan)


def test_priced_times_back_a_decision_with_the_newest_times_at_least_a_period_old():
    priced = PricedTimes(age_s=1.0)
    assert priced.record({0: 1.0, 1: 1.0}, now_s=0.0) == {}  # nothing a period old yet: a new plan waits
    assert priced.record({0: 2.0, 1: 1.0}, now_s=0.4) == {}
    assert priced.record({0: 3.0, 1: 1.0}, now_s=1.0) == {0: 1.0, 1: 1.0}  # the times of 0.0 s
    assert priced.record({0: 4.0}, now_s=1.5) == {0: 2.0, 1: 1.0}  # of 0.4 s: the newest at least 1 s old
    assert priced.record({1: 5.0}, now_s=2.6) == {0: 4.0, 1: 1.0}  # of 1.5 s; worker 1's last time carried on


def test_an_early_decision_a_moment_after_a_slowdown_is_not_its_own_backing():
    """Early decisions come on arrivals, a fraction of a second apart: the slow set they see must have
    been there a decision period before, not one early decision before."""
    detector = DetectorConfig(enter_n=1, exit_n=1)
    config = ControlConfig(amp=False, batch=False, detector=detector, decision_period_s=1.0,
                           selection=SelectorConfig(modes=("ssgd", "grouped")))
    controller = Controller(for_strategy(config, "auto"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    even = {w: WorkerSummary(1e-3, 0.002, 32, 0, 8) for w in range(4)}
    slow3 = {w: WorkerSummary(4e-3 if w == 3 else 1e-3, 0.002, 32, 0, 8) for w in range(4)}
    assert controller.decide(0, plan, even, now_s=0.0).plan is None
    assert controller.decide(1, plan, slow3, now_s=1.0).plan is None  # backed by 0.0 s: nobody slow then
    assert controller.decide(2, plan, slow3, now_s=1.2).plan is None  # early: still backed by 0.0 s
    switched = controller.decide(3, plan, slow3, now_s=2.0)  # backed by 1.0 s, when worker 3 was slow too
    assert switched.plan is not None and not full_sync(switched.plan)


# ---------------------------------------------------------------- uneven batches: updates weigh by their samples

LINK_TIMES = {0: 0.25, 1: 0.77, 2: 0.25, 3: 0.25}  # worker 1 behind a 10 Mbit/s link (measured for real)
SIZED = {0: 85, 1: 1, 2: 85, 3: 85}  # batch sizing's answer under SSGD: worker 1 computes almost nothing


def test_a_plan_that_stops_waiting_for_a_batch_1_worker_is_priced_by_the_samples_it_applies():
    """Weighted by gradient count, worker 1's batch-1 updates (each worth ~1/46 of a step at B_noise 54.6) counted as
    much as the 255-sample rounds of the others: excluding it was priced 2.45 s/step against SSGD's 0.77."""
    b_noise = 54.6
    ssgd_s = estimate(ssgd(range(4)), LINK_TIMES, SIZED, b_noise, 0.15).seconds_per_progress
    exclude_s = estimate(exclude(range(4), [1]), LINK_TIMES, SIZED, b_noise, 0.15).seconds_per_progress
    assert ssgd_s == pytest.approx(0.77)
    assert exclude_s < 0.4 < ssgd_s  # ~ the 3 fast workers' 0.25 s rounds of 255 samples: 255/256 of a step each


@pytest.mark.parametrize("b_noise", [0.0, 54.6])
def test_even_batches_are_priced_by_gradients_as_before(b_noise):
    """With every update at its gradients' even share of the full batch, samples and gradients weigh alike."""
    times = {0: 0.25, 1: 0.77, 2: 0.3, 3: 0.25}
    got = estimate(kofn(range(4), 3), times, BATCH, b_noise, 0.15)
    rates = [1 / 0.3, 1 / 0.77]  # the round closed by the third fastest (3 gradients), then worker 1's late one
    gradients_per_s = rates[0] * 3 + rates[1]
    shares = [rates[0] * 3 / gradients_per_s, rates[1] / gradients_per_s]
    eff = [(1 + b_noise / 96) / (1 + b_noise / 128), (1 + b_noise / 32) / (1 + b_noise / 128)]
    stale = [1 + 0.15 * (rates[1] / rates[0]), 1 + 0.15 * (rates[0] / rates[1])]
    want = 4 / gradients_per_s * sum(s * e for s, e in zip(shares, eff)) * sum(s * t for s, t in zip(shares, stale))
    assert got.seconds_per_progress == pytest.approx(want, rel=1e-12)
