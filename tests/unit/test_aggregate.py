"""Unit tests for star.aggregate: every mode, every bad push, every mode switch, and a
property-based test over random operation sequences."""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import star.aggregate as aggregate_module
from star.aggregate import (
    Aggregator,
    Apply,
    Drop,
    Effects,
    PushOutcome,
    PushRejected,
    PushStatus,
    RejectCode,
)
from star.plan import (
    MODES,
    LatePolicy,
    Scale,
    SyncPlan,
    asgd,
    exclude,
    grouped,
    kofn,
    plan_for_mode,
    ssgd,
    with_epoch,
)

FP = RejectCode.FAILED_PRECONDITION
INV = RejectCode.INVALID_ARGUMENT


# ---- helpers ----------------------------------------------------------------------


def snapshot(agg: Aggregator) -> tuple:
    """Everything observable, plus the private state, so 'no state change' is exact."""
    return (
        agg.accounting(),
        agg.version,
        agg.epoch,
        dict(agg.counters),
        agg.waiting,
        dict(agg.clock),
        dict(agg.staleness_histogram),
        copy.deepcopy(agg.__dict__),
    )


def assert_rejected_without_change(agg: Aggregator, call, reason: str, code: RejectCode | None = None) -> PushRejected:
    before = snapshot(agg)
    with pytest.raises(PushRejected) as info:
        call()
    assert info.value.reason == reason, info.value.message
    if code is not None:
        assert info.value.code is code
    assert info.value.message and str(info.value) == info.value.message
    assert snapshot(agg) == before
    return info.value


class Driver:
    """Plays the workers faithfully: a push carries the epoch and version its pull returned."""

    def __init__(self, plan: SyncPlan | None = None):
        self.agg = Aggregator(plan)
        self.seen: dict[int, tuple[int, int]] = {}
        self.effects = Effects()
        self.pushes: Counter[int] = Counter()

    def pull(self, worker: int) -> bool:
        out = self.agg.pull(worker)
        assert out.epoch == self.agg.epoch and out.version == self.agg.version
        if out.ready:
            self.seen[worker] = (out.epoch, out.version)
        return out.ready

    def push(self, worker: int, usable: bool = True) -> PushOutcome:
        epoch, version = self.seen.pop(worker)
        out = self.agg.push(worker, epoch, version, usable)
        self.pushes[worker] += 1
        self._absorb(out.effects)
        return out

    def step(self, worker: int, usable: bool = True) -> PushOutcome:
        assert self.pull(worker), f"worker {worker} was blocked"
        return self.push(worker, usable)

    def configure(self, plan: SyncPlan) -> Effects:
        effects = self.agg.configure(plan)
        self._absorb(effects)
        return effects

    def _absorb(self, effects: Effects) -> None:
        for worker in effects.released:
            self.seen[worker] = (self.agg.epoch, self.agg.version)
        self.effects.extend(effects)


def check_accounting(agg: Aggregator) -> dict[str, int]:
    acc = agg.accounting()
    assert acc["accepted"] == acc["applied"] + acc["dropped"] + acc["pending"]
    assert acc["updates"] == agg.version
    return acc


# ---- no plan / pulls ------------------------------------------------------------------


def test_without_a_plan_pulls_are_ready_at_epoch_minus_one_and_pushes_are_rejected():
    agg = Aggregator()
    assert agg.plan is None and agg.epoch == -1
    out = agg.pull(0)
    assert (out.ready, out.version, out.epoch) == (True, 0, -1)
    assert agg.waiting == frozenset()
    for epoch in (-1, 0, 3):
        assert_rejected_without_change(agg, lambda: agg.push(0, epoch), "no_plan", FP)
    assert agg.accounting() == {"accepted": 0, "applied": 0, "dropped": 0, "pending": 0, "updates": 0}


def test_constructor_with_a_plan_configures_it():
    plan = ssgd((0, 1), epoch=3)
    agg = Aggregator(plan)
    assert agg.plan == plan and agg.epoch == 3
    assert agg.counters["plan_switches"] == 1
    assert agg.clock == {0: 0, 1: 0}


def test_pull_by_a_worker_outside_the_plan_is_ready_but_its_push_is_rejected():
    agg = Aggregator(ssgd((0, 1)))
    assert agg.pull(5).ready
    assert_rejected_without_change(agg, lambda: agg.push(5, 0), "not_in_plan", FP)


def test_repeated_pull_before_pushing_is_ready_and_refreshes_the_version():
    d = Driver(kofn((0, 1, 2), 2))
    assert d.pull(2)
    d.step(0)
    d.step(1)  # closes round 0 without worker 2
    assert d.pull(2)  # re-pull: now computing for round 1 at version 1
    assert d.seen[2] == (0, 1)
    out = d.push(2)
    assert out.status is PushStatus.PENDING  # joined the open round, not late


# ---- SSGD -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_ssgd_round_closes_only_when_all_n_pushed_scales_by_1_over_n_and_releases_all(n):
    d = Driver(ssgd(range(n)))
    for w in range(n):
        assert d.pull(w)
    ids = []
    for w in range(n - 1):
        out = d.push(w)
        ids.append(out.gradient_id)
        assert out.status is PushStatus.PENDING
        assert out.effects == Effects()
        assert d.agg.version == 0
        assert not d.pull(w), "a worker with a gradient in the open round must block"
        assert d.agg.pending == w + 1
    assert d.agg.waiting == frozenset(range(n - 1))
    last = d.push(n - 1)
    ids.append(last.gradient_id)
    assert last.status is PushStatus.APPLIED
    assert last.effects.applies == [Apply(tuple(ids), 1.0 / n, (0,) * n, 1, False)]
    assert last.effects.drops == []
    assert last.effects.released == list(range(n - 1))
    assert d.agg.waiting == frozenset()
    assert d.agg.version == 1
    assert d.agg.counters["rounds"] == 1
    assert check_accounting(d.agg) == {"accepted": n, "applied": n, "dropped": 0, "pending": 0, "updates": 1}


def test_ssgd_many_rounds_each_bump_the_version_once_with_zero_staleness():
    d = Driver(ssgd((0, 1, 2)))
    for round_ in range(5):
        for w in (2, 0, 1):
            if w not in d.seen:
                assert d.pull(w)
            d.push(w)
            if w != 1:
                assert not d.pull(w)
        assert d.agg.version == round_ + 1
        assert d.agg.waiting == frozenset()
    assert [a.version_after for a in d.effects.applies] == [1, 2, 3, 4, 5]
    assert all(a.staleness == (0, 0, 0) for a in d.effects.applies)
    assert d.agg.staleness_histogram == Counter({0: 15})


def test_ssgd_released_pull_returns_the_new_version_and_allows_the_next_push():
    d = Driver(ssgd((0, 1)))
    d.step(0)
    assert not d.pull(0)
    d.step(1)
    assert d.seen[0] == (0, 1)
    out = d.push(0, usable=True)
    assert out.status is PushStatus.PENDING


# ---- ASGD -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 4])
def test_asgd_applies_each_push_immediately_with_its_staleness(n):
    d = Driver(asgd(range(n)))
    for w in range(n):
        assert d.pull(w)  # everyone computes from version 0
    for w in range(n):
        out = d.push(w)
        assert out.status is PushStatus.APPLIED
        assert out.effects.applies == [Apply((out.gradient_id,), 1.0 / n, (w,), w + 1, False)]
        assert out.effects.released == []
        assert d.pull(w), "ASGD never blocks a pull"
    assert d.agg.staleness_histogram == Counter(range(n))
    assert check_accounting(d.agg)["applied"] == n


def test_asgd_fast_worker_is_never_blocked_by_a_slow_one():
    d = Driver(asgd((0, 1)))
    assert d.pull(1)
    for i in range(10):
        d.step(0)
    assert d.agg.version == 10
    out = d.push(1)
    assert out.effects.applies[0].staleness == (10,)


# ---- k-of-N ---------------------------------------------------------------------------


@pytest.mark.parametrize("n, k", [(2, 1), (3, 2), (4, 2), (4, 3), (5, 4), (4, 4)])
def test_kofn_round_closes_at_k_arrivals(n, k):
    d = Driver(kofn(range(n), k))
    for w in range(n):
        assert d.pull(w)
    for w in range(k - 1):
        assert d.push(w).status is PushStatus.PENDING
        assert not d.pull(w)
    out = d.push(k - 1)
    assert out.status is PushStatus.APPLIED
    (apply,) = out.effects.applies
    assert len(apply.gradient_ids) == k
    assert apply.scale == pytest.approx(1.0 / n)  # per_total_workers: scaled by 1/N even with k arrivals
    assert out.effects.released == list(range(k - 1))
    assert d.agg.version == 1


@pytest.mark.parametrize("n, k", [(3, 2), (4, 2), (5, 3)])
def test_kofn_late_gradient_is_applied_alone_with_its_staleness_under_late_policy_apply(n, k):
    d = Driver(kofn(range(n), k, late_policy=LatePolicy.APPLY))
    for w in range(n):
        assert d.pull(w)
    for w in range(k):
        d.push(w)
    assert d.agg.version == 1
    for i, w in enumerate(range(k, n)):
        out = d.push(w)
        assert out.status is PushStatus.LATE_APPLIED
        assert out.effects.applies == [Apply((out.gradient_id,), 1.0 / n, (1 + i,), 2 + i, late=True)]
        assert out.effects.drops == []
    assert d.agg.counters["late_applied"] == n - k
    assert d.agg.version == 1 + (n - k)
    assert check_accounting(d.agg) == {"accepted": n, "applied": n, "dropped": 0, "pending": 0, "updates": 1 + n - k}


@pytest.mark.parametrize("n, k", [(3, 2), (4, 2), (5, 3)])
def test_kofn_late_gradient_is_dropped_under_late_policy_drop(n, k):
    d = Driver(kofn(range(n), k, late_policy=LatePolicy.DROP))
    for w in range(n):
        assert d.pull(w)
    for w in range(k):
        d.push(w)
    for w in range(k, n):
        out = d.push(w)
        assert out.status is PushStatus.LATE_DROPPED
        assert out.effects.applies == []
        assert out.effects.drops == [Drop(out.gradient_id, "late")]
    assert d.agg.version == 1
    assert d.agg.counters["dropped_late"] == n - k
    assert check_accounting(d.agg) == {"accepted": n, "applied": k, "dropped": n - k, "pending": 0, "updates": 1}


@pytest.mark.parametrize("late_policy", list(LatePolicy))
def test_kofn_late_nonfinite_gradient_is_dropped_as_nonfinite_whatever_the_late_policy(late_policy):
    d = Driver(kofn((0, 1, 2), 2, late_policy=late_policy))
    for w in range(3):
        assert d.pull(w)
    d.push(0)
    d.push(1)
    out = d.push(2, usable=False)
    assert out.status is PushStatus.SKIPPED_NONFINITE
    assert out.effects.drops == [Drop(out.gradient_id, "nonfinite")]
    assert out.effects.applies == []
    assert d.agg.version == 1


def test_kofn_late_worker_then_joins_the_current_round():
    d = Driver(kofn((0, 1, 2), 2))
    for w in range(3):
        assert d.pull(w)
    d.push(0)
    d.push(1)  # round 0 closes; 2 is late
    assert d.pull(0)  # worker 0 computes round 1 from version 1
    assert d.push(2).status is PushStatus.LATE_APPLIED  # version 2
    assert d.pull(2)
    assert d.push(2).status is PushStatus.PENDING
    assert not d.pull(2)
    out = d.push(0)
    assert out.status is PushStatus.APPLIED
    assert out.effects.released == [2]
    (apply,) = out.effects.applies
    # worker 2 computed from version 2 (after the late apply), worker 0 from version 1
    assert apply.staleness == (0, 1)


def test_kofn_plan_for_mode_closes_at_n_minus_one():
    d = Driver(plan_for_mode("kofn", 4))
    for w in range(4):
        assert d.pull(w)
    assert [d.push(w).status for w in range(3)] == [PushStatus.PENDING, PushStatus.PENDING, PushStatus.APPLIED]


# ---- grouped --------------------------------------------------------------------------


def test_grouped_groups_progress_independently():
    d = Driver(grouped([[0, 1], [2, 3]]))
    for w in range(4):
        assert d.pull(w)
    assert d.push(2).status is PushStatus.PENDING  # group 1 now waits for worker 3
    assert not d.pull(2)
    for _ in range(3):  # group 0 runs three rounds meanwhile
        if 1 not in d.seen:
            assert d.pull(1)
        d.push(0)
        assert not d.pull(0)
        out = d.push(1)
        assert out.status is PushStatus.APPLIED
        assert out.effects.released == [0]
        (apply,) = out.effects.applies
        assert apply.scale == pytest.approx(1 / 4)
        assert len(apply.gradient_ids) == 2
    assert d.agg.version == 3
    assert d.agg.waiting == frozenset({2})
    assert d.agg.pending == 1
    out = d.push(3)
    assert out.status is PushStatus.APPLIED
    assert out.effects.released == [2]
    (apply,) = out.effects.applies
    assert apply.staleness == (3, 3)  # group 1 computed from version 0, applied at version 3


def test_grouped_close_releases_only_that_groups_workers():
    d = Driver(grouped([[0, 1], [2, 3]]))
    for w in range(4):
        assert d.pull(w)
    d.push(0)
    d.push(2)
    assert not d.pull(0) and not d.pull(2)
    out = d.push(1)
    assert out.effects.released == [0]
    assert d.agg.waiting == frozenset({2})


# ---- exclude ----------------------------------------------------------------------------


def test_exclude_healthy_group_syncs_while_the_excluded_worker_runs_alone():
    d = Driver(exclude(range(4), [3]))
    for w in range(4):
        assert d.pull(w)
    d.push(0)
    d.push(1)
    assert not d.pull(0) and not d.pull(1)
    for i in range(3):
        out = d.step(3)  # the excluded worker never waits for anyone
        assert out.status is PushStatus.APPLIED
        assert out.effects.applies == [Apply((out.gradient_id,), 0.25, (0,), i + 1, False)]
        assert out.effects.released == []
    assert d.agg.waiting == frozenset({0, 1})
    out = d.push(2)
    assert out.status is PushStatus.APPLIED
    (apply,) = out.effects.applies
    assert len(apply.gradient_ids) == 3
    assert apply.scale == pytest.approx(0.25)
    assert apply.staleness == (3, 3, 3)
    assert out.effects.released == [0, 1]


# ---- SSP --------------------------------------------------------------------------------


@pytest.mark.parametrize("bound", [0, 1, 2, 4])
def test_ssp_pull_blocks_when_more_than_bound_pushes_ahead_of_slowest_and_is_released_when_it_catches_up(bound):
    d = Driver(asgd((0, 1, 2), staleness_bound=bound))
    for _ in range(bound):
        d.step(0)
    assert d.pull(0), "exactly `bound` pushes ahead is allowed"
    d.push(0)
    assert not d.pull(0), "bound + 1 pushes ahead must block"
    assert d.agg.waiting == frozenset({0})
    out = d.step(1)  # not the slowest: worker 2 still has 0 pushes
    assert out.effects.released == []
    assert not d.pull(0)
    out = d.step(2)  # the slowest catches up by one
    assert out.effects.released == [0]
    assert d.agg.waiting == frozenset()
    assert d.seen[0] == (0, d.agg.version)


def test_ssp_slowest_worker_is_never_blocked():
    d = Driver(plan_for_mode("ssp", 3, staleness=0))
    for _ in range(5):
        for w in (0, 1, 2):
            d.step(w)
    assert d.agg.waiting == frozenset()
    d.step(0)
    assert not d.pull(0)
    d.step(1)
    assert not d.pull(1)
    out = d.step(2)
    assert out.effects.released == [0, 1]


def test_ssp_default_staleness_from_plan_for_mode_is_two():
    d = Driver(plan_for_mode("ssp", 2))
    for _ in range(3):
        assert d.pull(0)
        d.push(0)
    assert not d.pull(0)


def test_ssp_cancelled_pull_is_not_released():
    d = Driver(asgd((0, 1), staleness_bound=0))
    d.step(0)
    assert not d.pull(0)
    d.agg.cancel_pull(0)
    assert d.agg.waiting == frozenset()
    out = d.step(1)
    assert out.effects.released == []
    assert d.pull(0)  # it can simply pull again


def test_cancel_pull_of_a_worker_that_is_not_waiting_changes_nothing():
    d = Driver(ssgd((0, 1)))
    assert d.pull(0)
    before = snapshot(d.agg)
    d.agg.cancel_pull(0)
    d.agg.cancel_pull(9)
    assert snapshot(d.agg) == before


# ---- scale ------------------------------------------------------------------------------


def test_per_arrivals_scale_is_the_mean_of_the_round_and_one_for_a_late_gradient():
    plan = dataclasses.replace(kofn(range(4), 2), scale=Scale.PER_ARRIVALS)
    d = Driver(plan)
    for w in range(4):
        assert d.pull(w)
    d.push(0)
    out = d.push(1)
    assert out.effects.applies[0].scale == pytest.approx(0.5)
    out = d.push(2)
    assert out.effects.applies == [Apply((out.gradient_id,), 1.0, (1,), 2, late=True)]


def test_per_arrivals_scale_counts_only_usable_gradients():
    d = Driver(dataclasses.replace(ssgd(range(4)), scale=Scale.PER_ARRIVALS))
    for w in range(4):
        assert d.pull(w)
    d.push(0, usable=False)
    d.push(1)
    d.push(2)
    out = d.push(3)
    (apply,) = out.effects.applies
    assert apply.scale == pytest.approx(1 / 3)
    assert len(apply.gradient_ids) == 3


@pytest.mark.parametrize("scale", list(Scale))
def test_per_arrivals_and_per_total_scales_of_grouped_rounds(scale):
    d = Driver(dataclasses.replace(grouped([[0, 1, 2], [3]]), scale=scale))
    for w in range(4):
        assert d.pull(w)
    (a3,) = d.push(3).effects.applies
    d.push(0)
    d.push(1)
    (a012,) = d.push(2).effects.applies
    if scale is Scale.PER_ARRIVALS:
        assert (a3.scale, a012.scale) == (pytest.approx(1.0), pytest.approx(1 / 3))
    else:  # one round of every group == one SSGD step
        assert (a3.scale, a012.scale) == (pytest.approx(1 / 4), pytest.approx(1 / 4))


# ---- non-finite gradients -------------------------------------------------------------


def test_nonfinite_gradient_counts_toward_the_quorum_but_is_dropped_never_applied():
    d = Driver(ssgd((0, 1, 2)))
    for w in range(3):
        assert d.pull(w)
    bad = d.push(0, usable=False)
    assert bad.status is PushStatus.SKIPPED_NONFINITE
    assert bad.effects == Effects()
    assert check_accounting(d.agg)["pending"] == 1
    d.push(1)
    out = d.push(2)
    assert out.status is PushStatus.APPLIED
    assert out.effects.drops == [Drop(bad.gradient_id, "nonfinite")]
    (apply,) = out.effects.applies
    assert bad.gradient_id not in apply.gradient_ids
    assert len(apply.gradient_ids) == 2
    assert apply.scale == pytest.approx(1 / 3)
    assert d.agg.counters["dropped_nonfinite"] == 1
    assert check_accounting(d.agg) == {"accepted": 3, "applied": 2, "dropped": 1, "pending": 0, "updates": 1}


def test_a_round_of_only_nonfinite_gradients_closes_without_an_update_and_releases_its_workers():
    d = Driver(ssgd((0, 1)))
    assert d.pull(0) and d.pull(1)
    d.push(0, usable=False)
    assert not d.pull(0)
    out = d.push(1, usable=False)
    assert out.status is PushStatus.SKIPPED_NONFINITE
    assert out.effects.applies == []
    assert sorted(x.reason for x in out.effects.drops) == ["nonfinite", "nonfinite"]
    assert out.effects.released == [0]
    assert d.agg.version == 0
    assert d.agg.counters["rounds"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_nonfinite_push_is_accepted_counted_and_dropped_in_every_mode(mode):
    d = Driver(plan_for_mode(mode, 3))
    out = d.step(2, usable=False)
    assert out.status is PushStatus.SKIPPED_NONFINITE
    assert d.agg.counters["accepted"] == 1
    assert d.agg.clock[2] == 1
    assert all(out.gradient_id not in a.gradient_ids for a in out.effects.applies)
    d.configure(asgd((0, 1, 2), epoch=1))  # flush
    assert d.effects.drops == [Drop(out.gradient_id, "nonfinite")]
    assert d.effects.applies == []
    assert d.agg.version == 0


# ---- bad pushes -------------------------------------------------------------------------


def _mid_round(mode: str) -> Driver:
    """A plan at epoch 1 with work in flight: worker 2 pushed and pulled again, worker 0 pulled."""
    d = Driver(plan_for_mode(mode, 3, epoch=1))
    d.step(2)
    d.pull(2)
    assert d.pull(0)
    return d


BAD_PUSHES = {
    # name: (build the call from a mid-round driver, reason, code)
    "stale_epoch": (lambda d, u: (lambda: d.agg.push(0, 0, d.seen[0][1], u)), "stale_epoch", FP),
    "much_older_epoch": (lambda d, u: (lambda: d.agg.push(0, -5, None, u)), "stale_epoch", FP),
    "future_epoch": (lambda d, u: (lambda: d.agg.push(0, 2, d.seen[0][1], u)), "future_epoch", INV),
    "not_in_plan": (lambda d, u: (d.agg.pull(7), lambda: d.agg.push(7, 1, None, u))[1], "not_in_plan", FP),
    "push_without_pull": (lambda d, u: (lambda: d.agg.push(1, 1, None, u)), "push_without_pull", FP),
    "base_version_ahead": (lambda d, u: (lambda: d.agg.push(0, 1, d.seen[0][1] + 1, u)), "base_version_mismatch", INV),
    "base_version_behind": (lambda d, u: (lambda: d.agg.push(0, 1, d.seen[0][1] - 1, u)), "base_version_mismatch", INV),
}


@pytest.mark.parametrize("usable", [True, False])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bad", sorted(BAD_PUSHES))
def test_bad_push_is_rejected_and_changes_no_state(bad, mode, usable):
    d = _mid_round(mode)
    build, reason, code = BAD_PUSHES[bad]
    assert_rejected_without_change(d.agg, build(d, usable), reason, code)
    # the worker can still push properly afterwards, with the next gradient id
    out = d.push(0)
    assert out.gradient_id == 1


@pytest.mark.parametrize("usable", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_duplicate_push_is_rejected_and_changes_no_state(mode, usable):
    d = _mid_round(mode)
    epoch, version = d.seen[0]
    d.push(0, usable)
    assert_rejected_without_change(d.agg, lambda: d.agg.push(0, epoch, version, usable), "push_without_pull", FP)
    assert_rejected_without_change(d.agg, lambda: d.agg.push(0, epoch, None, usable), "push_without_pull", FP)


def test_push_after_a_blocked_pull_is_a_push_without_pull():
    d = Driver(ssgd((0, 1)))
    d.step(0)
    assert not d.pull(0)
    assert_rejected_without_change(d.agg, lambda: d.agg.push(0, 0, 0), "push_without_pull", FP)


def test_push_without_base_version_skips_the_version_check():
    agg = Aggregator(asgd((0,)))
    agg.pull(0)
    assert agg.push(0, 0, None).status is PushStatus.APPLIED


def test_epoch_is_checked_before_membership_and_pull():
    agg = Aggregator(ssgd((0, 1), epoch=2))
    assert_rejected_without_change(agg, lambda: agg.push(99, 1), "stale_epoch", FP)
    assert_rejected_without_change(agg, lambda: agg.push(99, 3), "future_epoch", INV)
    assert_rejected_without_change(agg, lambda: agg.push(99, 2), "not_in_plan", FP)


@pytest.mark.parametrize("plan", [ssgd((0, 1, 2)), asgd((0, 1, 2), staleness_bound=1), kofn((0, 1), 1)])
@pytest.mark.parametrize("epoch", [3, 2, 0])
def test_configure_with_an_epoch_that_is_not_newer_is_rejected_and_changes_no_state(epoch, plan):
    d = Driver(ssgd((0, 1, 2), epoch=3))
    d.step(2)
    assert not d.pull(2)
    assert d.pull(0)
    err = assert_rejected_without_change(d.agg, lambda: d.agg.configure(with_epoch(plan, epoch)), "stale_plan", FP)
    assert "epoch" in err.message
    d.configure(with_epoch(plan, 4))  # a newer one is taken
    assert d.agg.epoch == 4


# ---- switches between every ordered pair of modes ---------------------------------------

N = 4


def _plan(mode: str, epoch: int) -> SyncPlan:
    # ssp with bound 0 so that a switch into it can leave a pull blocked
    return plan_for_mode(mode, N, epoch=epoch, excluded=[3], staleness=0)


def _ssp_blocked(plan: SyncPlan, clock: dict[int, int], workers) -> set[int]:
    """The workers SSP blocks under `plan`, given `clock`: pushes since `plan` took effect."""
    if plan.staleness_bound is None:
        return set()
    slowest = min(clock.get(w, 0) for w in plan.workers)
    return {w for w in workers if w in plan.group_of() and clock.get(w, 0) - slowest > plan.staleness_bound}


@pytest.mark.parametrize("new_mode", MODES)
@pytest.mark.parametrize("old_mode", MODES)
def test_switch_mid_round_applies_received_gradients_under_the_old_plan_and_releases_blocked_pulls(
    old_mode, new_mode
):
    old = _plan(old_mode, 1)
    d = Driver(old)
    for w in range(N):
        assert d.pull(w)
    ids = {}
    for w in (0, 2):  # one worker of each half pushes; workers 1 and 3 are still computing
        ids[w] = d.push(w).gradient_id
        d.pull(w)
    applied = {g for a in d.effects.applies for g in a.gradient_ids}
    pending = {g for g in ids.values() if g not in applied}
    assert d.agg.pending == len(pending)
    waiting_before = d.agg.waiting
    version_before = d.agg.version

    new = _plan(new_mode, 2)
    effects = d.configure(new)

    # gradients already received: applied under the old plan, one Apply per open group
    old_group = old.group_of()
    open_groups = {old_group[w] for w, g in ids.items() if g in pending}
    assert len(effects.applies) == len(open_groups)
    assert {g for a in effects.applies for g in a.gradient_ids} == pending
    for i, apply in enumerate(effects.applies):
        assert apply.version_after == version_before + i + 1
        assert apply.scale == pytest.approx(1 / N)
        assert not apply.late
        assert len({old_group[w] for w, g in ids.items() if g in apply.gradient_ids}) == 1
        assert apply.staleness == (version_before + i,) * len(apply.gradient_ids)
    assert effects.drops == []
    assert check_accounting(d.agg)["pending"] == 0

    # the SSP clocks restart with the new plan: nobody has pushed under it yet, so SSP
    # blocks no one and every blocked pull is released, whatever the old plan's clocks were
    assert d.agg.clock == dict.fromkeys(new.workers, 0)
    assert _ssp_blocked(new, {}, waiting_before) == set()
    assert effects.released == sorted(waiting_before)
    assert d.agg.waiting == frozenset()
    pushes_before = Counter(d.pushes)

    # pushes of gradients computed under the old epoch are rejected; such workers must pull again
    computing_old = {w: seen for w, seen in d.seen.items() if seen[0] == 1}
    assert set(computing_old) == {0, 1, 2, 3} - set(waiting_before)
    for w, (epoch, version) in computing_old.items():
        assert_rejected_without_change(d.agg, lambda: d.agg.push(w, epoch, version), "stale_epoch", FP)
        assert_rejected_without_change(d.agg, lambda: d.agg.push(w, 2, version), "push_without_pull", FP)
    for w in effects.released:
        assert_rejected_without_change(d.agg, lambda: d.agg.push(w, 1, None), "stale_epoch", FP)
    # a configure that is not newer is rejected
    assert_rejected_without_change(d.agg, lambda: d.agg.configure(with_epoch(old, 2)), "stale_plan", FP)
    assert_rejected_without_change(d.agg, lambda: d.agg.configure(with_epoch(new, 1)), "stale_plan", FP)

    # and the new plan runs: every worker keeps making progress
    for w in computing_old:
        del d.seen[w]
    for _ in range(4):
        for w in range(N):
            if w not in d.seen and w not in d.agg.waiting:
                d.pull(w)
            if w in d.seen:
                out = d.push(w)
                assert out.status in (PushStatus.PENDING, PushStatus.APPLIED, PushStatus.LATE_APPLIED)
                d.pull(w)
    assert all(d.pushes[w] >= pushes_before[w] + 2 for w in range(N)), dict(d.pushes)
    assert d.agg.clock == {w: d.pushes[w] - pushes_before[w] for w in new.workers}
    check_accounting(d.agg)


def test_switch_applies_pending_gradients_with_the_old_plans_scale():
    old = dataclasses.replace(kofn(range(6), 5), scale=Scale.PER_ARRIVALS)
    d = Driver(old)
    for w in (0, 1):
        d.step(w)
    effects = d.configure(ssgd((0, 1), epoch=1))
    (apply,) = effects.applies
    assert apply.scale == pytest.approx(1 / 2)  # old plan: per_arrivals, the mean of its 2 arrivals
    d2 = Driver(ssgd(range(6)))
    for w in (0, 1):
        d2.step(w)
    (apply,) = d2.configure(ssgd((0, 1), epoch=1)).applies
    assert apply.scale == pytest.approx(1 / 6)  # old plan's N, not the new plan's


def test_switch_drops_pending_nonfinite_gradients_and_applies_the_rest():
    d = Driver(ssgd((0, 1, 2)))
    bad = d.step(0, usable=False)
    good = d.step(1)
    effects = d.configure(asgd((0, 1, 2), epoch=1))
    assert effects.drops == [Drop(bad.gradient_id, "nonfinite")]
    assert [a.gradient_ids for a in effects.applies] == [(good.gradient_id,)]


def test_switch_with_only_nonfinite_pending_does_not_bump_the_version():
    d = Driver(ssgd((0, 1)))
    d.step(0, usable=False)
    assert not d.pull(0)
    effects = d.configure(ssgd((0, 1), epoch=1))
    assert effects.applies == [] and len(effects.drops) == 1
    assert effects.released == [0]
    assert d.agg.version == 0


def test_switch_releases_a_waiting_worker_that_leaves_the_plan():
    d = Driver(ssgd((0, 1, 2)))
    d.step(2)
    assert not d.pull(2)
    effects = d.configure(ssgd((0, 1), epoch=1))
    assert effects.released == [2]
    assert len(effects.applies) == 1
    assert_rejected_without_change(d.agg, lambda: d.agg.push(2, 1, None), "not_in_plan", FP)


def test_switch_worker_computing_under_the_old_plan_must_pull_again():
    d = Driver(ssgd((0, 1)))
    assert d.pull(1)
    d.configure(asgd((0, 1), epoch=1))
    assert_rejected_without_change(d.agg, lambda: d.agg.push(1, 0, 0), "stale_epoch", FP)
    assert_rejected_without_change(d.agg, lambda: d.agg.push(1, 1, 0), "push_without_pull", FP)
    del d.seen[1]
    assert d.step(1).status is PushStatus.APPLIED


def test_switch_late_gradient_of_a_closed_round_is_rejected_after_the_switch():
    d = Driver(kofn((0, 1, 2), 2))
    for w in range(3):
        assert d.pull(w)
    d.push(0)
    d.push(1)
    epoch, version = d.seen[2]
    d.configure(kofn((0, 1, 2), 2, epoch=1))
    assert_rejected_without_change(d.agg, lambda: d.agg.push(2, epoch, version), "stale_epoch", FP)


def test_switch_into_ssp_restarts_the_clocks_and_releases_workers_that_were_ahead_under_the_old_plan():
    d = Driver(ssgd((0, 1, 2)))
    for _ in range(2):
        for w in range(3):
            d.step(w)
    d.step(0)
    d.step(1)
    assert not d.pull(0) and not d.pull(1)
    effects = d.configure(asgd((0, 1, 2), epoch=1, staleness_bound=0))
    # 0 and 1 had one push more than 2 under the old plan; under the new one nobody has pushed
    assert d.agg.clock == {0: 0, 1: 0, 2: 0}
    assert effects.released == [0, 1]
    assert d.agg.waiting == frozenset()
    # and the bound now counts pushes under the new plan only
    d.push(0)
    assert not d.pull(0)
    d.push(1)
    assert not d.pull(1)
    out = d.step(2)
    assert out.effects.released == [0, 1]


def test_switch_starts_every_worker_of_the_new_plan_at_clock_zero_and_forgets_the_others():
    d = Driver(asgd((0, 1, 3)))
    for _ in range(3):
        d.step(0)
    for _ in range(5):
        d.step(1)
    d.step(3)
    assert d.agg.clock == {0: 3, 1: 5, 3: 1}
    d.configure(asgd((0, 1, 2), epoch=1, staleness_bound=0))
    assert d.agg.clock == {0: 0, 1: 0, 2: 0}  # 3 left the plan; 2 joined it
    assert d.pull(0) and d.pull(1) and d.pull(2)
    d.push(1)
    assert not d.pull(1)  # one push ahead of 0 and 2 under the new plan
    d.step(0)
    assert not d.pull(1)
    out = d.step(2)
    assert out.effects.released == [1]
    assert d.agg.clock == {0: 1, 1: 1, 2: 1}


def test_switching_to_ssp_after_a_long_exclude_phase_does_not_block_the_fast_workers():
    d = Driver(exclude(range(4), [3]))
    assert d.pull(3)  # the straggler starts one gradient and takes forever over it
    for _ in range(20):
        for w in (0, 1, 2):
            d.step(w)
    assert d.agg.clock == {0: 20, 1: 20, 2: 20, 3: 0}
    d.configure(asgd(range(4), epoch=1, staleness_bound=2))
    assert d.agg.clock == {0: 0, 1: 0, 2: 0, 3: 0}
    # the fast workers run up to the bound ahead of the straggler, not 20 pushes behind it
    for _ in range(3):
        for w in (0, 1, 2):
            assert d.step(w).status is PushStatus.APPLIED
    for w in (0, 1, 2):
        assert not d.pull(w)
    assert d.agg.waiting == frozenset({0, 1, 2})
    # the straggler's gradient from the exclude plan is stale: it pulls again and pushes once
    del d.seen[3]
    out = d.step(3)
    assert out.effects.released == [0, 1, 2]
    assert d.agg.clock == {0: 3, 1: 3, 2: 3, 3: 1}


def test_switch_from_no_plan_to_a_plan():
    agg = Aggregator()
    assert agg.pull(0).ready
    effects = agg.configure(ssgd((0, 1)))
    assert effects == Effects()
    assert agg.epoch == 0


def test_ssp_bound_on_a_synchronous_group_after_a_switch_stays_live():
    d = Driver(asgd((0, 1)))
    for _ in range(3):
        d.step(1)
    d.configure(SyncPlan(1, ((0, 1),), (2,), staleness_bound=0))
    assert d.pull(0)
    d.push(0)  # waits for worker 1 to close the round
    assert not d.pull(0)
    assert d.pull(1), "worker 1 is blocked by SSP waiting for worker 0, which waits for worker 1"
    out = d.push(1)
    assert out.status is PushStatus.APPLIED
    assert out.effects.released == [0]


# ---- property-based: random operation sequences ------------------------------------------


@st.composite
def plans(draw, n: int) -> SyncPlan:
    everyone = tuple(range(n))
    workers = draw(
        st.one_of(
            st.just(everyone),
            st.just(everyone),
            st.lists(st.sampled_from(everyone), unique=True, min_size=1, max_size=n).map(tuple),
        )
    )
    mode = draw(st.sampled_from(MODES + ("kofn", "kofn")))  # k-of-N is where late gradients happen
    if mode == "ssgd":
        plan = ssgd(workers)
    elif mode == "asgd":
        plan = asgd(workers)
    elif mode == "ssp":
        plan = asgd(workers, staleness_bound=draw(st.integers(0, 3)))
    elif mode == "kofn":
        k = draw(st.integers(1, len(workers)))
        plan = kofn(workers, k, late_policy=draw(st.sampled_from(list(LatePolicy))))
    elif mode == "grouped":
        labels = draw(st.lists(st.integers(0, len(workers) - 1), min_size=len(workers), max_size=len(workers)))
        groups: dict[int, list[int]] = {}
        for worker, label in zip(workers, labels):
            groups.setdefault(label, []).append(worker)
        plan = grouped(groups.values())
    else:
        excluded = draw(st.lists(st.sampled_from(workers), unique=True, max_size=len(workers)))
        plan = exclude(workers, excluded)
    if plan.staleness_bound is None and draw(st.integers(0, 3)) == 0:
        # a bound on any plan, synchronous groups included: must stay live across switches
        plan = dataclasses.replace(plan, staleness_bound=draw(st.integers(0, 3)))
    return dataclasses.replace(plan, scale=draw(st.sampled_from(list(Scale))))


@dataclasses.dataclass
class _Gradient:
    worker: int
    base_version: int
    usable: bool
    plan: SyncPlan


class Model:
    """Faithful workers around an Aggregator, checking every effect against the protocol."""

    def __init__(self, n: int, plan: SyncPlan):
        self.n = n
        self.agg = Aggregator()
        self.version = 0
        self.phase = {w: "idle" for w in range(n)}  # idle | waiting | computing
        self.seen: dict[int, tuple[int, int]] = {}
        self.gradients: dict[int, _Gradient] = {}
        self.applied: set[int] = set()
        self.dropped: set[int] = set()
        self.apply_log: list[Apply] = []
        # the SSP clocks, kept independently: pushes accepted under the plan in force,
        # restarted at 0 for every worker of a new plan
        self.clock: dict[int, int] = {}
        self.configure(plan)

    # -- bookkeeping
    @property
    def pending(self) -> set[int]:
        return set(self.gradients) - self.applied - self.dropped

    def pending_worker(self, worker: int) -> bool:
        return any(self.gradients[g].worker == worker for g in self.pending)

    def expect_ready(self, worker: int) -> bool:
        plan = self.agg.plan
        if plan is None or worker not in plan.group_of():
            return True
        if self.pending_worker(worker):
            return False
        if plan.staleness_bound is None:
            return True
        slowest = min(self.clock[w] for w in plan.workers)
        return self.clock[worker] - slowest <= plan.staleness_bound

    def absorb(self, effects: Effects) -> None:
        for apply in effects.applies:
            self.version += 1
            assert apply.version_after == self.version, "versions must increase by exactly one per Apply"
            assert apply.gradient_ids and len(apply.staleness) == len(apply.gradient_ids)
            gradients = [self.gradients[g] for g in apply.gradient_ids]
            plan = gradients[0].plan
            for g, grad, staleness in zip(apply.gradient_ids, gradients, apply.staleness):
                assert g not in self.applied and g not in self.dropped, "applied twice or applied after a drop"
                assert grad.usable, "a non-finite gradient was applied"
                assert grad.plan is plan
                assert staleness == apply.version_after - 1 - grad.base_version >= 0
                self.applied.add(g)
            assert len({plan.group_of()[grad.worker] for grad in gradients}) == 1
            if apply.late:
                assert len(gradients) == 1 and plan.late_policy is LatePolicy.APPLY
                expected = 1.0 if plan.scale is Scale.PER_ARRIVALS else 1.0 / plan.total_workers
            else:
                expected = 1.0 / (len(gradients) if plan.scale is Scale.PER_ARRIVALS else plan.total_workers)
            assert apply.scale == pytest.approx(expected)
            self.apply_log.append(apply)
        for drop in effects.drops:
            grad = self.gradients[drop.gradient_id]
            assert drop.gradient_id not in self.applied and drop.gradient_id not in self.dropped
            if grad.usable:
                assert drop.reason == "late" and grad.plan.late_policy is LatePolicy.DROP
            else:
                assert drop.reason == "nonfinite"
            self.dropped.add(drop.gradient_id)
        assert len(set(effects.released)) == len(effects.released)
        for worker in effects.released:
            assert self.phase[worker] == "waiting", f"released worker {worker} was not waiting"
            self.phase[worker] = "computing"
            self.seen[worker] = (self.agg.epoch, self.agg.version)
        for worker, phase in self.phase.items():
            if phase == "waiting":
                assert not self.expect_ready(worker), f"worker {worker} is ready but was not released"

    def check(self) -> None:
        acc = self.agg.accounting()
        assert acc["accepted"] == acc["applied"] + acc["dropped"] + acc["pending"]
        assert acc == {
            "accepted": len(self.gradients),
            "applied": len(self.applied),
            "dropped": len(self.dropped),
            "pending": len(self.pending),
            "updates": self.version,
        }
        assert self.agg.version == self.version
        assert self.agg.clock == self.clock
        assert self.agg.waiting == frozenset(w for w, p in self.phase.items() if p == "waiting")
        plan = self.agg.plan
        assert plan is not None
        # liveness: with faithful workers some worker of the plan can always make progress
        assert not set(plan.workers) <= self.agg.waiting, "every worker of the plan is blocked"

    # -- operations
    def pull(self, worker: int) -> None:
        expected = self.expect_ready(worker)
        out = self.agg.pull(worker)
        assert out.ready == expected
        assert (out.version, out.epoch) == (self.agg.version, self.agg.epoch)
        if out.ready:
            self.phase[worker] = "computing"
            self.seen[worker] = (out.epoch, out.version)
        else:
            self.phase[worker] = "waiting"

    def cancel(self, worker: int) -> None:
        self.agg.cancel_pull(worker)
        if self.phase[worker] == "waiting":
            self.phase[worker] = "idle"

    def push(self, worker: int, usable: bool, duplicate: bool) -> None:
        epoch, version = self.seen.pop(worker)
        self.phase[worker] = "idle"
        plan = self.agg.plan
        assert plan is not None
        if epoch < self.agg.epoch:
            self.rejected(lambda: self.agg.push(worker, epoch, version, usable), "stale_epoch")
            return
        assert epoch == self.agg.epoch
        if worker not in plan.group_of():
            self.rejected(lambda: self.agg.push(worker, epoch, version, usable), "not_in_plan")
            return
        out = self.agg.push(worker, epoch, version, usable)
        self.clock[worker] += 1
        assert out.gradient_id not in self.gradients
        self.gradients[out.gradient_id] = _Gradient(worker, version, usable, plan)
        self.absorb(out.effects)
        g = out.gradient_id
        applies = [a for a in out.effects.applies if g in a.gradient_ids]
        drops = [x for x in out.effects.drops if x.gradient_id == g]
        if out.status is PushStatus.PENDING:
            assert usable and g in self.pending
        elif out.status is PushStatus.APPLIED:
            assert usable and len(applies) == 1 and not applies[0].late
        elif out.status is PushStatus.LATE_APPLIED:
            assert usable and applies == [out.effects.applies[0]] and applies[0].gradient_ids == (g,)
            assert applies[0].late
        elif out.status is PushStatus.LATE_DROPPED:
            assert usable and drops == [Drop(g, "late")]
        else:
            assert out.status is PushStatus.SKIPPED_NONFINITE
            assert not usable and not applies
        if duplicate:
            self.rejected(lambda: self.agg.push(worker, epoch, version, usable), "push_without_pull")

    def configure(self, plan: SyncPlan) -> Effects:
        effects = self.agg.configure(with_epoch(plan, self.agg.epoch + 1))
        self.clock = dict.fromkeys(plan.workers, 0)
        self.absorb(effects)
        assert not self.pending, "a switch must flush every open round"
        return effects

    def rejected(self, call, reason: str) -> None:
        assert_rejected_without_change(self.agg, call, reason, REJECT_CODES[reason])

    def bad_push(self, kind: str, worker: int, delta: int, usable: bool) -> None:
        agg = self.agg
        plan = agg.plan
        assert plan is not None
        if kind == "stale_epoch" and agg.epoch > 0:
            self.rejected(lambda: agg.push(worker, agg.epoch - 1 - delta % agg.epoch, None, usable), "stale_epoch")
        elif kind == "future_epoch":
            self.rejected(lambda: agg.push(worker, agg.epoch + 1 + delta, None, usable), "future_epoch")
        elif kind == "not_in_plan":
            outsiders = [w for w in range(self.n) if w not in plan.group_of()] + [self.n + delta]
            who = outsiders[delta % len(outsiders)]
            self.rejected(lambda: agg.push(who, agg.epoch, None, usable), "not_in_plan")
        elif kind == "push_without_pull":
            candidates = [
                w
                for w in plan.workers
                if self.phase[w] != "computing" or self.seen[w][0] != agg.epoch
            ]
            if candidates:
                who = candidates[delta % len(candidates)]
                self.rejected(lambda: agg.push(who, agg.epoch, None, usable), "push_without_pull")
        elif kind == "base_version_mismatch":
            candidates = [
                w
                for w in plan.workers
                if self.phase[w] == "computing" and self.seen[w][0] == agg.epoch
            ]
            if candidates:
                who = candidates[delta % len(candidates)]
                base = self.seen[who][1] + (delta + 1) * (1 if delta % 2 else -1)
                self.rejected(lambda: agg.push(who, agg.epoch, base, usable), "base_version_mismatch")
        elif kind == "stale_plan":
            target = with_epoch(plan, max(0, agg.epoch - delta))
            self.rejected(lambda: agg.configure(target), "stale_plan")

    def finish(self) -> None:
        self.configure(asgd(tuple(range(self.n))))
        self.check()
        assert self.applied | self.dropped == set(self.gradients)
        assert not self.applied & self.dropped
        counted = Counter(g for a in self.apply_log for g in a.gradient_ids)
        assert all(c == 1 for c in counted.values())
        assert all(self.gradients[g].usable for g in self.applied)
        assert [a.version_after for a in self.apply_log] == list(range(1, self.version + 1))
        assert self.agg.waiting == frozenset(), "a blocked worker was never released"


REJECT_CODES = {
    "stale_epoch": FP,
    "future_epoch": INV,
    "not_in_plan": FP,
    "push_without_pull": FP,
    "base_version_mismatch": INV,
    "stale_plan": FP,
}
BAD_KINDS = ["stale_epoch", "future_epoch", "not_in_plan", "push_without_pull", "base_version_mismatch", "stale_plan"]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_operation_sequences_keep_accounting_release_and_version_invariants(data):
    n = data.draw(st.integers(2, 6), label="workers")
    model = Model(n, data.draw(plans(n), label="initial plan"))
    model.check()
    worker_ids = st.integers(0, n - 1)
    for _ in range(data.draw(st.integers(0, 80), label="steps")):
        op = data.draw(
            st.sampled_from(["pull", "pull", "push", "push", "push", "cancel", "configure", "bad"]), label="op"
        )
        if op == "pull":
            model.pull(data.draw(worker_ids))
        elif op == "push":
            computing = sorted(w for w, p in model.phase.items() if p == "computing")
            if computing:
                model.push(
                    data.draw(st.sampled_from(computing)),
                    usable=data.draw(st.sampled_from([True, True, True, True, False])),
                    duplicate=data.draw(st.booleans()),
                )
        elif op == "cancel":
            model.cancel(data.draw(worker_ids))
        elif op == "configure":
            if data.draw(st.integers(0, 3)) == 0:  # configures are rarer than pushes
                model.configure(data.draw(plans(n)))
        else:
            model.bad_push(
                data.draw(st.sampled_from(BAD_KINDS)),
                data.draw(worker_ids),
                data.draw(st.integers(0, 5)),
                data.draw(st.booleans()),
            )
        model.check()
    model.finish()


# ---- cost ------------------------------------------------------------------------------------


def _lines_for_two_rounds(mode: str, n: int) -> int:
    """Python lines star.aggregate executes for two rounds of `n` workers with every pull blocked: a
    machine-independent cost (counted, not timed, so a loaded machine cannot fail the test)."""
    agg = Aggregator(plan_for_mode(mode, n, staleness=0))
    seen = {w: agg.pull(w).version for w in range(n)}
    executed = 0
    source = aggregate_module.__file__

    def tracer(frame, event, arg):
        nonlocal executed
        if frame.f_code.co_filename != source:
            return None
        if event == "line":
            executed += 1
        return tracer

    sys.settrace(tracer)
    try:
        for _ in range(2):
            for w in range(n):
                if w in seen:
                    agg.push(w, agg.epoch, seen.pop(w))
                    out = agg.pull(w)
                    if out.ready:
                        seen[w] = out.version
            for w in range(n):
                if w not in seen and w not in agg.waiting:
                    seen[w] = agg.pull(w).version
    finally:
        sys.settrace(None)
    assert agg.version >= 2
    check_accounting(agg)
    return executed


@pytest.mark.parametrize("mode", ["ssgd", "kofn", "grouped", "ssp"])
def test_a_round_with_thousands_of_blocked_pulls_is_cheap(mode):
    """DESIGN: thousands of blocked pulls must cost little; a round must not be quadratic or worse.

    4x the workers must cost at most ~4x the executed lines (linear); quadratic would be 16x."""
    small, large = _lines_for_two_rounds(mode, 512), _lines_for_two_rounds(mode, 2048)
    assert large / small < 6, f"{mode}: 4x the workers executed {large / small:.1f}x the lines ({small} -> {large})"


# ---- handing a shard over (drain, then export) ---------------------------------------


def test_outstanding_lists_workers_that_pulled_and_have_not_pushed():
    d = Driver(ssgd((0, 1, 2)))
    assert d.pull(0) and d.pull(1)
    assert d.agg.outstanding == {0, 1}
    d.push(0)
    assert d.agg.outstanding == {1}


def test_a_released_pull_that_is_forgotten_leaves_nothing_outstanding_and_the_worker_may_pull_again():
    d = Driver(ssgd((0, 1)))
    d.step(0)
    assert not d.pull(0)
    assert d.pull(1)
    effects = d.push(1).effects  # closes the round, releases worker 0's pull
    assert effects.released == [0]
    assert d.agg.outstanding == {0}
    d.agg.forget_pull(0)
    assert d.agg.outstanding == frozenset() and d.agg.waiting == frozenset()
    del d.seen[0]
    assert d.pull(0)  # served afresh, e.g. by the shard's new home
    check_accounting(d.agg)


@pytest.mark.parametrize("plan", [ssgd((0, 1, 2)), kofn((0, 1, 2), 3), grouped([(0, 1), (2,)])], ids=["ssgd", "kofn", "grouped"])
def test_closing_open_rounds_applies_every_pending_gradient_and_keeps_the_plan(plan):
    d = Driver(plan)
    d.step(0)
    version = d.agg.version
    effects = d.agg.close_open_rounds()
    assert [a.gradient_ids for a in effects.applies] == [(0,)]
    assert d.agg.version == version + 1 and d.agg.pending == 0
    assert d.agg.plan == plan
    check_accounting(d.agg)
    assert d.agg.close_open_rounds().applies == []


# ---- pacing-only plan changes ---------------------------------------------------------------


def test_a_pacing_only_plan_change_keeps_open_rounds_and_accepts_pushes_pulled_before_it():
    d = Driver(ssgd((0, 1, 2)))
    d.step(0)
    assert d.pull(1) and d.pull(2)
    paced = dataclasses.replace(ssgd((0, 1, 2), epoch=1), push_pace_bytes_per_s=1e6)
    effects = d.configure(paced)
    assert effects.applies == [] and effects.released == [] and d.agg.pending == 1
    assert d.agg.plan == paced and d.agg.epoch == 1
    d.push(1)  # pulled under epoch 0: still part of the same round
    out = d.push(2)
    assert out.status is PushStatus.APPLIED and [a.gradient_ids for a in out.effects.applies] == [(0, 1, 2)]
    check_accounting(d.agg)


def test_after_a_real_switch_pushes_from_before_a_pacing_change_are_stale():
    d = Driver(ssgd((0, 1)))
    assert d.pull(0)
    d.configure(dataclasses.replace(ssgd((0, 1), epoch=1), push_pace_bytes_per_s=1e6))
    d.configure(asgd((0, 1), epoch=2))
    epoch, version = d.seen[0]
    assert_rejected_without_change(d.agg, lambda: d.agg.push(0, epoch, version), "stale_epoch", FP)
