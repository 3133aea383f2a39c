"""Slow links: a worker whose pushes and pulls, not its compute, hold the round back (star.policy.links)."""

from __future__ import annotations

import pytest

from star.detect import DetectorConfig
from star.plan import ssgd
from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy
from star.policy.links import SlowLinks, link_outliers

ITERATION = {0: 0.30, 1: 0.31, 2: 0.29, 3: 0.30}


@pytest.mark.parametrize("link_3_s, flagged", [
    (0.004, False),  # as fast as the others
    (0.05, False),  # 46 ms more: under 20% of the 0.3 s iteration, not worth a plan that drops gradients
    (0.07, True),  # 66 ms more: over it
    (0.77, True),  # a 10 Mbit/s link moving digits' gradient and parameters (measured for real)
])
def test_a_link_is_slow_when_its_excess_is_over_the_margin_of_the_median_iteration(link_3_s, flagged):
    link = {0: 0.004, 1: 0.004, 2: 0.005, 3: link_3_s}
    assert (3 in link_outliers(link, ITERATION, margin=0.2)) is flagged


def test_links_that_are_all_equally_slow_single_out_no_worker():
    assert link_outliers({w: 0.8 for w in range(4)}, ITERATION, margin=0.2) == frozenset()


def test_a_slow_link_is_confirmed_and_cleared_with_the_detectors_hysteresis():
    links = SlowLinks(DetectorConfig(enter_n=2, exit_n=2))
    slow = {0: 0.004, 1: 0.004, 2: 0.004, 3: 0.5}
    fast = {w: 0.004 for w in range(4)}
    assert links.decide(slow, ITERATION)[0] == frozenset()
    found, events = links.decide(slow, ITERATION)
    assert found == {3} and [e["kind"] for e in events] == ["slow_link_detected"] and "link holds the round back" in events[0]["reason"]
    assert links.decide(fast, ITERATION)[0] == {3}  # one normal decision is not a recovery
    cleared, events = links.decide(fast, ITERATION)
    assert cleared == frozenset() and [(e["kind"], e["worker"]) for e in events] == [("slow_link_recovered", 3)]


def _reports(link_3_s: float, per_sample_3_s: float = 1e-3, fixed_3_s: float = 0.0) -> dict[int, WorkerSummary]:
    """Four workers at batch 32; worker 3's comm_s carries its link seconds (and a fixed compute part, as on GPUs)."""
    return {w: WorkerSummary(per_sample_3_s if w == 3 else 1e-3, (link_3_s + fixed_3_s) if w == 3 else 0.002, 32, 0, 8,
                             fixed_compute_s=fixed_3_s if w == 3 else 0.0) for w in range(4)}


def test_a_worker_held_back_by_its_link_alone_moves_auto_to_a_plan_that_does_not_wait_for_it():
    """Its compute is as fast as the others', so the straggler detector never flags it, and before slow links the
    selector's gate (the base plan is left only for a detected straggler) kept SSGD: auto 35.3 s against k-of-N's
    19.5 s for real (benchmarks.placement, one host capped at 10 Mbit/s)."""
    controller = Controller(for_strategy(ControlConfig(), "auto"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    decisions = [controller.decide(period, plan, _reports(0.2)) for period in range(3)]
    assert all(d.stragglers == frozenset() for d in decisions)  # not a compute straggler
    assert not any(d.amp.get(3) for d in decisions)  # AMP speeds up compute, not a link: not tried
    events = [e for d in decisions for e in d.events]
    assert [e["worker"] for e in events if e["kind"] == "slow_link_detected"] == [3]
    moved = [d.plan for d in decisions if d.plan is not None]
    assert moved and moved[0].label != "ssgd"


def test_a_compute_straggler_s_fixed_compute_part_is_not_read_as_a_slow_link():
    """On GPUs comm_s also holds the step's fixed compute, which is larger for a slow worker: not its link."""
    controller = Controller(for_strategy(ControlConfig(amp=False, selector=False), "auto"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    for period in range(3):
        decision = controller.decide(period, plan, _reports(0.002, per_sample_3_s=3e-3, fixed_3_s=0.05))
        assert not any(e["kind"] == "slow_link_detected" for e in decision.events)


def test_the_exclude_strategy_takes_a_worker_behind_a_slow_link_out_of_the_sync_group():
    controller = Controller(for_strategy(ControlConfig(), "exclude"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    moved = [d.plan for d in (controller.decide(p, plan, _reports(0.2)) for p in range(3)) if d.plan is not None]
    assert moved and moved[0].label == "exclude" and 3 not in moved[0].groups[0]
