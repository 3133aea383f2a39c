"""Proactive prevention: plan changes that would saturate a PS host are deferred; pushes are paced
when a PS NIC nears saturation and unpaced once the plan fits; the controller carries both out."""

from __future__ import annotations

import pytest

from star.placement import HostState
from star.plan import asgd, ssgd
from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy
from star.policy.traffic import PsLayout, TrafficConfig, TrafficGuard, predicted_util
from star.worker.pacing import PushPacer

MB = 1e6


def layout(nic_used: float, link: float = 10 * MB, shard_bytes: tuple[float, ...] = (0.25 * MB, 0.25 * MB)) -> PsLayout:
    return PsLayout(("ps-host",) * len(shard_bytes), shard_bytes, {"ps-host": HostState("ps-host", 0.2, 0.0, 8, nic_used, link)})


def test_predicted_utilisation_scales_the_jobs_share_and_keeps_other_traffic():
    h = HostState("h", 0.2, 0.0, 8, nic_used_bytes_per_s=6 * MB, link_bytes_per_s=10 * MB)
    # job: 10 gradients/s x 0.5 MB = 5 MB/s of the 6 measured; doubling the rate -> 1 + 10 = 11 MB/s
    assert predicted_util(h, 0.5 * MB, 10.0, 20.0) == pytest.approx(1.1)
    assert predicted_util(h, 0.5 * MB, 10.0, 5.0) == pytest.approx(0.35)


def test_a_change_that_would_saturate_a_ps_host_is_refused_with_the_numbers():
    verdict = TrafficGuard().check(10.0, 20.0, layout(nic_used=6 * MB))
    assert not verdict.allow
    assert "ps-host" in verdict.reason and "110%" in verdict.reason
    assert verdict.predicted_util["ps-host"] == pytest.approx(1.1)


def test_a_change_that_fits_or_lowers_traffic_is_allowed():
    guard = TrafficGuard()
    assert guard.check(10.0, 12.0, layout(nic_used=5 * MB)).allow  # 6 MB/s of 10
    assert guard.check(10.0, 5.0, layout(nic_used=9.9 * MB)).allow
    assert TrafficGuard(TrafficConfig(guard=False)).check(10.0, 100.0, layout(nic_used=9 * MB)).allow


def test_pushes_are_paced_once_a_ps_nic_stayed_hot_and_the_budget_fits_the_link():
    guard = TrafficGuard()
    assert guard.pace(None, layout(nic_used=9.5 * MB), num_workers=4)[0] is None  # one hot sample is not enough
    pace, reason = guard.pace(None, layout(nic_used=9.5 * MB), num_workers=4)
    # 75% of a 10 MB/s link for 0.5 MB of the 0.5 MB model, shared by 4 workers
    assert pace == pytest.approx(0.75 * 10 * MB / 4)
    assert "95%" in reason and guard.pressured == {"ps-host"}


def test_pacing_ends_only_after_demand_stayed_well_under_the_budget():
    guard = TrafficGuard(TrafficConfig(pace_exit_n=3))
    paced = 1.875 * MB
    for used in (7.5, 3.0, 3.0, 7.0, 3.0, 3.0):  # a busy sample restarts the count
        assert guard.pace(paced, layout(nic_used=used * MB), 4)[0] == paced
    assert guard.pace(paced, layout(nic_used=3.0 * MB), 4)[0] is None
    assert guard.pressured == frozenset()


def test_no_pacing_while_no_ps_host_is_hot_or_when_switched_off():
    guard = TrafficGuard()
    assert all(guard.pace(None, layout(nic_used=5 * MB), 4)[0] is None for _ in range(5))
    off = TrafficGuard(TrafficConfig(pace=False))
    assert all(off.pace(None, layout(nic_used=9.9 * MB), 4)[0] is None for _ in range(5))


# ---- the controller carries the verdicts out -----------------------------------------------


def _summaries(per_sample: dict[int, float], comm_s: float = 0.01) -> dict[int, WorkerSummary]:
    return {w: WorkerSummary(t, comm_s, 64, 0, 4) for w, t in per_sample.items()}


def _exclude_controller() -> Controller:
    return Controller(for_strategy(ControlConfig(), "exclude"), 4, 64)


def test_the_controller_defers_a_switch_that_would_saturate_the_ps_host_and_logs_it():
    times = {0: 0.001, 1: 0.001, 2: 0.001, 3: 0.003}  # worker 3 is 3x slower: exclude wants it out of the sync group
    free = _exclude_controller()
    switched = [free.decide(p, ssgd(range(4), 1), _summaries(times), 0.0, layout(nic_used=0.1 * MB, link=1e12)).plan for p in range(4)]
    assert any(p is not None and p.label == "exclude" for p in switched)
    guarded = _exclude_controller()
    decisions = [guarded.decide(p, ssgd(range(4), 1), _summaries(times), 0.0, layout(nic_used=8 * MB)) for p in range(4)]
    assert all(d.plan is None for d in decisions)
    deferred = [e for d in decisions for e in d.events if e["kind"] == "plan_deferred"]
    assert deferred and "max 85%" in deferred[0]["reason"]


def test_the_controller_paces_a_hot_ps_host_and_keeps_the_plan_shape():
    controller = Controller(for_strategy(ControlConfig(), "ssgd"), 4, 64)
    plan = asgd(range(4), 1)
    controller.decide(0, plan, _summaries({w: 0.001 for w in range(4)}), 0.0, layout(nic_used=9.6 * MB))
    decision = controller.decide(1, plan, _summaries({w: 0.001 for w in range(4)}), 0.0, layout(nic_used=9.6 * MB))
    assert decision.plan is not None and decision.plan.groups == plan.groups
    assert decision.plan.push_pace_bytes_per_s == pytest.approx(0.75 * 10 * MB / 4)
    assert decision.plan.epoch == 2 and [e["kind"] for e in decision.events] == ["pace"]


def test_without_resource_samples_the_controller_decides_as_before():
    controller = Controller(for_strategy(ControlConfig(), "ssgd"), 4, 64)
    assert controller.decide(0, ssgd(range(4), 1), _summaries({w: 0.001 for w in range(4)}), 0.0, None).plan is None


# ---- the worker honours the pace --------------------------------------------------------------


def test_a_paced_worker_starts_each_push_once_the_previous_ones_drained():
    pacer = PushPacer()
    assert pacer.wait_s(0.0, 1000, 1000.0) == 0.0  # first push: at once
    assert pacer.wait_s(0.2, 1000, 1000.0) == pytest.approx(0.8)  # the previous 1000 B take 1 s at 1000 B/s
    assert pacer.wait_s(5.0, 1000, 1000.0) == 0.0  # idle long enough
    assert pacer.wait_s(5.1, 1000, None) == 0.0  # unpaced
    assert pacer.wait_s(5.2, 1000, 1000.0) == 0.0  # pacing restarts fresh


def test_pushes_under_a_pace_average_at_most_the_budget():
    pacer, now, pushed = PushPacer(), 0.0, 0
    for _ in range(50):
        now += pacer.wait_s(now, 500, 2000.0) + 0.01  # 10 ms of compute between pushes
        pushed += 500
    assert (pushed - 500) / now <= 2000.0  # the first push goes at once; the budget holds from then on
