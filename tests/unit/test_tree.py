"""Tree aggregation: who is whose parent, how the aggregator counts a parent's summed push, the
parent's inbox for children's gradients, and the traffic guard turning trees on and off."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
import torch

from star.aggregate import Aggregator, PushRejected, PushStatus
from star.placement import HostState
from star.plan import (
    PlanError,
    Scale,
    asgd,
    exclude,
    grouped,
    kofn,
    plan_from_dict,
    plan_to_dict,
    ssgd,
    tree_layout,
    with_epoch,
    with_tree,
)
from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy
from star.policy.noise import NoiseAccumulator
from star.policy.traffic import PsLayout, TrafficConfig, TrafficGuard
from star.rpc.common import plan_from_proto, plan_to_proto
from star.worker.relay import Contribution, RelayInbox, sum_into

MB = 1e6


# ---- layout ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "plan, expected",
    [
        (with_tree(ssgd(range(4)), 2), {0: (1,), 2: (3,)}),
        (with_tree(ssgd(range(5)), 2), {0: (1,), 2: (3,)}),  # 4 is alone: it pushes for itself
        (with_tree(ssgd(range(4)), 3), {0: (1, 2)}),
        (with_tree(ssgd([3, 1, 2, 0]), 4), {0: (1, 2, 3)}),  # sorted: the layout does not depend on group order
        (with_tree(grouped([(0, 1), (2, 3)]), 2), {0: (1,), 2: (3,)}),  # trees never cross groups
        (with_tree(exclude(range(4), [1]), 2), {0: (2,)}),  # the excluded straggler pushes alone
        (with_tree(kofn(range(4), 3), 2), {}),  # a k-of-N round must not wait for a parent
        (with_tree(asgd(range(4)), 2), {}),
        (with_tree(asgd(range(4), staleness_bound=2), 2), {}),
        (ssgd(range(4)), {}),  # no fanout: no trees
    ],
)
def test_tree_layout_groups_full_sync_workers_in_sorted_chunks(plan, expected):
    assert tree_layout(plan) == expected


@pytest.mark.parametrize("fanout", [1, 0, -2, True])
def test_a_fanout_below_two_is_refused_naming_the_field(fanout):
    with pytest.raises(PlanError, match="tree_fanout"):
        dataclasses.replace(ssgd(range(4)), tree_fanout=fanout)


def test_tree_fanout_survives_dict_and_proto_round_trips_and_is_described():
    plan = with_tree(ssgd(range(4), epoch=3), 2)
    assert plan_from_dict(plan_to_dict(plan)) == plan
    assert plan_from_proto(plan_to_proto(plan)) == plan
    assert plan_from_proto(plan_to_proto(ssgd(range(4)))).tree_fanout is None
    assert "tree=2" in plan.describe()


# ---- aggregator ----------------------------------------------------------------------------------


def _pulled(plan, workers=None) -> Aggregator:
    agg = Aggregator(plan)
    for w in workers if workers is not None else plan.workers:
        assert agg.pull(w).ready
    return agg


def test_a_tree_push_counts_one_gradient_per_contributor_and_closes_the_round_with_them():
    agg = _pulled(with_tree(ssgd(range(4), 1), 2))
    first = agg.push(0, 1, 0, contributors=(1,))
    assert first.status is PushStatus.PENDING and agg.pending == 2
    assert not agg.pull(1).ready  # a child's gradient is in the open round: its pull waits like anyone's
    second = agg.push(2, 1, 0, contributors=(3,))
    assert second.status is PushStatus.APPLIED
    (apply,) = second.effects.applies
    assert apply.gradient_ids == (first.gradient_id, second.gradient_id)
    assert apply.scale == pytest.approx(1 / 4)  # the sum of two sums of two: the mean of 4 gradients
    assert sorted(second.effects.released) == [1]
    assert agg.accounting() == {"accepted": 4, "applied": 4, "dropped": 0, "pending": 0, "updates": 1}
    assert (agg.counters["pushes"], agg.counters["tree_pushes"]) == (2, 2)


def test_tree_and_direct_pushes_mix_in_one_round():
    agg = _pulled(with_tree(ssgd(range(4), 1), 2))
    agg.push(0, 1, 0, contributors=(1,))
    assert agg.push(2, 1, 0).status is PushStatus.PENDING  # 3 missed its parent: 2 pushed alone
    outcome = agg.push(3, 1, 0)
    assert outcome.status is PushStatus.APPLIED and agg.accounting()["applied"] == 4


def test_per_arrival_scaling_divides_by_gradients_not_pushes():
    plan = dataclasses.replace(ssgd(range(3), 1), scale=Scale.PER_ARRIVALS)
    agg = _pulled(plan)
    agg.push(0, 1, 0, contributors=(1,))
    (apply,) = agg.push(2, 1, 0).effects.applies
    assert apply.scale == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "pusher, contributors, reason",
    [
        (0, (0,), "bad_contributors"),  # itself
        (0, (1, 1), "bad_contributors"),  # twice
        (0, (9,), "bad_contributors"),  # not in the plan
        (0, (2,), "bad_contributors"),  # another group
    ],
)
def test_a_tree_push_with_impossible_contributors_is_refused_and_changes_nothing(pusher, contributors, reason):
    agg = _pulled(grouped([(0, 1), (2, 3)], 1))
    before = (agg.accounting(), dict(agg.clock), agg.outstanding)
    with pytest.raises(PushRejected) as error:
        agg.push(pusher, 1, 0, contributors=contributors)
    assert error.value.reason == reason
    assert (agg.accounting(), dict(agg.clock), agg.outstanding) == before


def test_a_contributor_that_has_not_pulled_or_already_pushed_is_refused():
    agg = _pulled(ssgd(range(2), 1), workers=[0])
    with pytest.raises(PushRejected) as error:
        agg.push(0, 1, 0, contributors=(1,))
    assert error.value.reason == "push_without_pull"
    agg = _pulled(ssgd(range(3), 1))
    agg.push(0, 1, 0)
    with pytest.raises(PushRejected) as error:
        agg.push(2, 1, 0, contributors=(0,))  # 0's gradient is already in: it must not count twice
    assert error.value.reason == "push_without_pull"
    assert agg.accounting()["accepted"] == 1


def test_a_child_that_pulled_another_round_cannot_be_summed_with_its_parent():
    agg = _pulled(kofn(range(3), 2, 1))
    agg.push(0, 1, 0)
    agg.push(1, 1, 0)  # round 0 closes without 2: version 1
    assert agg.pull(0).ready  # 0 now computes on version 1, round 1; 2 still holds round 0, version 0
    with pytest.raises(PushRejected) as error:
        agg.push(0, 1, 1, contributors=(2,))
    assert error.value.reason == "base_version_mismatch"


def test_turning_trees_on_or_off_keeps_open_rounds_like_a_pacing_change():
    plan = ssgd(range(4), 1)
    agg = _pulled(plan)
    agg.push(0, 1, 0)
    agg.configure(with_epoch(with_tree(plan, 2), 2))
    assert agg.pending == 1
    agg.push(2, 1, 0, contributors=(3,))  # pulled under epoch 1, still accepted: the shape did not change
    assert agg.push(1, 1, 0).status is PushStatus.APPLIED


def test_the_invariant_holds_over_random_tree_and_direct_pushes():
    import random

    rng = random.Random(7)
    plan = with_tree(ssgd(range(6), 1), 3)
    agg = _pulled(plan)
    for _ in range(200):
        waiting = sorted(agg.outstanding)
        if not waiting:
            for w in plan.workers:
                agg.pull(w)
            continue
        pusher = rng.choice(waiting)
        others = [w for w in waiting if w != pusher]
        contributors = tuple(rng.sample(others, rng.randint(0, len(others))))
        agg.push(pusher, 1, None, contributors=contributors)
        a = agg.accounting()
        assert a["accepted"] == a["applied"] + a["dropped"] + a["pending"]
    assert agg.version > 0 and agg.counters["applied"] == 6 * agg.counters["rounds"]


# ---- the gradient noise scale sees a tree's sum as a bigger batch ----------------------------------


def test_noise_inputs_from_tree_sums_match_the_same_gradients_pushed_in_pairs():
    torch.manual_seed(0)
    grads = [torch.randn(50) for _ in range(4)]
    pairs = NoiseAccumulator()
    pairs.observe([grads[0] + grads[1], grads[2] + grads[3]], [32, 32], [2, 2])
    means = NoiseAccumulator()
    means.observe([(grads[0] + grads[1]) / 2, (grads[2] + grads[3]) / 2], [32, 32])
    assert (pairs.small_sq, pairs.big_sq, pairs.small_batch, pairs.big_batch) == pytest.approx(
        (means.small_sq, means.big_sq, means.small_batch, means.big_batch))


# ---- the parent's inbox --------------------------------------------------------------------------


def _offer_in_thread(inbox: RelayInbox, contribution: Contribution, timeout_s: float = 10.0) -> threading.Thread:
    thread = threading.Thread(target=inbox.offer, args=(contribution, timeout_s))
    thread.start()
    return thread


def _gift(worker: int, key=(1, (0,)), value: float = 1.0, batch: int = 8) -> Contribution:
    return Contribution(worker, key, torch.full((3,), value), batch)


def test_the_parent_takes_its_childrens_gradients_and_answers_them_after_its_push():
    inbox = RelayInbox()
    gifts = [_gift(1, value=1.0), _gift(2, value=2.0)]
    threads = [_offer_in_thread(inbox, g) for g in gifts]
    taken = inbox.collect((1, (0,)), [1, 2], wait_s=5.0)
    assert [c.worker for c in taken] == [1, 2] and not any(g.decided.is_set() for g in gifts)
    total = torch.zeros(3)
    assert sum_into(total, taken) == 16 and total.tolist() == [3.0, 3.0, 3.0]
    inbox.settle(taken, pushed=True)
    for thread in threads:
        thread.join(5)
    assert all(g.taken for g in gifts)


def test_a_missing_child_costs_the_parent_at_most_its_wait_and_a_late_one_is_refused():
    inbox = RelayInbox()
    start = time.monotonic()
    assert inbox.collect((1, (0,)), [1], wait_s=0.2) == []
    assert 0.15 <= time.monotonic() - start < 2.0
    late = _gift(1, key=(1, (0,)))
    thread = _offer_in_thread(inbox, late)
    time.sleep(0.1)
    assert inbox.collect((1, (1,)), [1], wait_s=0.0) == []  # the parent moved on to version 1
    thread.join(5)
    assert late.decided.is_set() and not late.taken and "older" in late.reason


def test_a_gradient_for_a_round_the_parent_has_not_reached_waits_for_it():
    inbox = RelayInbox()
    ahead = _gift(1, key=(1, (5,)))
    thread = _offer_in_thread(inbox, ahead)
    time.sleep(0.1)
    assert inbox.collect((1, (4,)), [1], wait_s=0.0) == []
    assert not ahead.decided.is_set()
    (taken,) = inbox.collect((1, (5,)), [1], wait_s=1.0)
    inbox.settle([taken], pushed=False, reason="refused")
    thread.join(5)
    assert not ahead.taken and ahead.reason == "refused"


def test_a_parent_blocked_in_its_pull_refuses_only_the_gradients_held_longer_than_its_poll():
    inbox = RelayInbox()
    old, fresh = _gift(1, key=(3, (7,))), _gift(2, key=(3, (7,)))
    old.arrived_s -= 5.0  # held for 5 s: the round the parent waits on needs it
    threads = [_offer_in_thread(inbox, g) for g in (old, fresh)]
    time.sleep(0.1)
    assert inbox.refuse_held(1.0, "blocked") == 1
    threads[0].join(5)
    assert old.decided.is_set() and not old.taken and old.reason == "blocked"
    assert not fresh.decided.is_set()  # just arrived: the parent may be about to take it
    (taken,) = inbox.collect((3, (7,)), [2], wait_s=1.0)
    inbox.settle([taken], pushed=True)
    threads[1].join(5)
    assert fresh.taken


def test_an_offer_nobody_takes_times_out_and_closing_refuses_the_rest():
    inbox = RelayInbox()
    gift = inbox.offer(_gift(1), timeout_s=0.1)
    assert not gift.taken and "within" in gift.reason
    pending = _gift(2)
    thread = _offer_in_thread(inbox, pending)
    time.sleep(0.1)
    inbox.close()
    thread.join(5)
    assert not pending.taken and "stopping" in pending.reason
    assert not inbox.offer(_gift(3), timeout_s=5).taken


def test_a_withdrawn_gradient_is_never_taken():
    inbox = RelayInbox()
    gift = _gift(1)
    thread = _offer_in_thread(inbox, gift)
    time.sleep(0.1)
    inbox.withdraw(gift)
    thread.join(5)
    assert not gift.taken and inbox.collect((1, (0,)), [1], wait_s=0.0) == []


def test_a_newer_gradient_from_the_same_child_supersedes_the_older_one():
    inbox = RelayInbox()
    old = _gift(1, key=(1, (0,)))
    thread = _offer_in_thread(inbox, old)
    time.sleep(0.1)
    new_thread = _offer_in_thread(inbox, _gift(1, key=(1, (1,))))
    thread.join(5)
    assert not old.taken and "superseded" in old.reason
    (taken,) = inbox.collect((1, (1,)), [1], wait_s=1.0)
    inbox.settle([taken], pushed=True)
    new_thread.join(5)


# ---- the traffic guard's tree relief -------------------------------------------------------------


def _layout(nic_used: float, link: float = 10 * MB) -> PsLayout:
    return PsLayout(("ps-host",), (0.5 * MB,), {"ps-host": HostState("ps-host", 0.2, 0.0, 8, nic_used, link)})


def test_tree_relief_turns_trees_on_after_a_hot_streak_and_off_after_a_calm_one():
    guard = TrafficGuard(TrafficConfig(relief="tree", tree_fanout=3, pace_exit_n=2))
    assert guard.relieve(None, None, _layout(9.5 * MB), 4).tree_fanout is None
    on = guard.relieve(None, None, _layout(9.5 * MB), 4)
    assert on.tree_fanout == 3 and on.push_pace_bytes_per_s is None and "trees of 3" in on.reason
    assert guard.relieve(None, 3, _layout(2 * MB), 4).tree_fanout == 3
    off = guard.relieve(None, 3, _layout(2 * MB), 4)
    assert off.tree_fanout is None and "trees off" in off.reason


def test_tree_relief_turns_trees_on_for_a_link_busy_in_turns_and_pacing_does_not_pace_it():
    """Push phase, then pull phase: each direction averages half the link, the link is busy 95% of the time."""
    def turns() -> PsLayout:
        layout = _layout(5 * MB)
        return dataclasses.replace(layout, hosts={"ps-host": dataclasses.replace(layout.hosts["ps-host"], nic_busy_share=0.95)})

    trees = TrafficGuard(TrafficConfig(relief="tree", tree_fanout=2))
    assert [trees.relieve(None, None, turns(), 4).tree_fanout for _ in range(2)] == [None, 2]
    pacing = TrafficGuard(TrafficConfig(relief="pace"))
    assert [pacing.relieve(None, None, turns(), 4).push_pace_bytes_per_s for _ in range(4)] == [None] * 4


def test_tree_relief_leaves_a_configured_tree_alone():
    guard = TrafficGuard(TrafficConfig(relief="tree", pace_exit_n=1))
    assert guard.relieve(None, 2, _layout(1 * MB), 4).tree_fanout == 2  # calm, but the guard did not turn it on
    assert TrafficGuard(TrafficConfig(relief="tree", pace=False)).relieve(None, 2, _layout(9.9 * MB), 4).tree_fanout == 2


@pytest.mark.parametrize("field, value", [("relief", "shout"), ("tree_fanout", 1)])
def test_bad_tree_relief_settings_are_refused_naming_the_field(field, value):
    from star.config import ConfigError

    with pytest.raises(ConfigError, match=f"control.traffic.{field}"):
        TrafficConfig(**{field: value})


def _summaries(n: int) -> dict[int, WorkerSummary]:
    return {w: WorkerSummary(0.001, 0.01, 64, 0, 4) for w in range(n)}


def test_the_controller_switches_trees_on_for_a_hot_ps_host():
    config = dataclasses.replace(ControlConfig(), traffic=TrafficConfig(relief="tree"))
    controller = Controller(for_strategy(config, "ssgd"), 4, 64)
    plan = ssgd(range(4), 1)
    controller.decide(0, plan, _summaries(4), 0.0, _layout(9.6 * MB))
    decision = controller.decide(1, plan, _summaries(4), 0.0, _layout(9.6 * MB))
    assert decision.plan is not None and decision.plan.tree_fanout == 2 and decision.plan.groups == plan.groups
    assert [e["kind"] for e in decision.events] == ["tree"]


def test_a_mode_change_keeps_the_trees_and_pace_of_the_plan_in_force():
    controller = Controller(for_strategy(ControlConfig(), "exclude"), 4, 64)
    current = dataclasses.replace(ssgd(range(4), 1), tree_fanout=2, push_pace_bytes_per_s=1e6)
    times = {0: 0.001, 1: 0.001, 2: 0.001, 3: 0.003}  # worker 3 is 3x slower: exclude drops it from the sync group
    plans = [controller.decide(p, current, {w: WorkerSummary(t, 0.01, 64, 0, 4) for w, t in times.items()}, 0.0, None).plan
             for p in range(4)]
    switched = [p for p in plans if p is not None]
    assert switched and switched[0].label == "exclude"
    assert (switched[0].tree_fanout, switched[0].push_pace_bytes_per_s) == (2, 1e6)
