"""Batch sizing's check on itself (star.policy.batch_guard): it backs off to even batches when the sizes in
force lose to even ones on the speeds measured, and only then."""

from __future__ import annotations

import numpy as np
import pytest

from star.errors import ConfigError
from star.plan import ssgd
from star.policy.batch_guard import BatchGuard, BatchGuardConfig, iteration_s
from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy

COMM = {w: 0.0 for w in range(4)}
SIZED = {0: 40, 1: 40, 2: 40, 3: 8}  # worker 3 was slow when these sizes were chosen


def test_a_round_takes_its_slowest_workers_compute_plus_communication():
    assert iteration_s({0: 1.0, 1: 2.0}, {0: 10, 1: 4}, {0: 0.5, 1: 3.0}) == 11.0


def test_sizes_that_still_fit_the_speeds_are_kept():
    guard = BatchGuard(BatchGuardConfig(window=3))
    still_slow = {0: 1.0, 1: 1.0, 2: 1.0, 3: 4.0}  # sized: 40 against 128 at even batches
    assert all(guard.observe(p, still_slow, SIZED, COMM, 32) is None for p in range(20))


def test_sizes_that_lost_to_even_batches_over_a_window_back_off_and_the_holds_double():
    guard = BatchGuard(BatchGuardConfig(window=3, margin=0.05, hold_periods=10))
    moved = {0: 2.0, 1: 1.0, 2: 1.0, 3: 1.0}  # the slowness moved to a worker with a big batch: 80 against 64
    verdicts = [guard.observe(p, moved, SIZED, COMM, 32) for p in range(3)]
    assert verdicts[:2] == [None, None] and verdicts[2].ratio == pytest.approx(1.25)
    assert verdicts[2].hold_periods == 10 and "1.25x" in verdicts[2].explain(3)
    assert guard.holding(3) and guard.holding(11) and not guard.holding(12)
    assert all(guard.observe(p, moved, SIZED, COMM, 32) is None for p in range(3, 12))  # backed off: not judged
    again = [guard.observe(p, moved, SIZED, COMM, 32) for p in range(12, 15)]
    assert again[-1].hold_periods == 20


def test_even_batches_are_never_judged():
    guard = BatchGuard(BatchGuardConfig(window=1))
    assert guard.observe(0, {0: 1.0, 1: 5.0}, {0: 32, 1: 32}, {0: 0.0, 1: 0.0}, 32) is None


def test_a_loss_within_the_margin_is_no_reason_to_back_off():
    guard = BatchGuard(BatchGuardConfig(window=2, margin=0.05))
    speeds = {0: 1.0, 1: 1.0, 2: 1.0, 3: 40 / (32 * 1.04)}  # recovered a little: sized 40 against 38.5 even
    assert iteration_s(speeds, SIZED, COMM) / iteration_s(speeds, {w: 32 for w in SIZED}, COMM) == pytest.approx(1.04)
    assert all(guard.observe(p, speeds, SIZED, COMM, 32) is None for p in range(10))


@pytest.mark.parametrize("field, value", [("window", 0), ("margin", -0.1), ("hold_periods", 0)])
def test_a_bad_guard_setting_names_its_field(field, value):
    with pytest.raises(ConfigError, match=f"control.batching.guard.{field}"):
        BatchGuardConfig(**{field: value})


def sized_stream(controller: Controller, per_sample_at, decisions: int, seed: int = 0, noise_cv: float = 0.05):
    """Reports at the sizes the controller last gave (per_sample_at(period): each worker's seconds per sample)."""
    rng = np.random.default_rng(seed)
    plan, out = ssgd(range(4), epoch=1), []
    for period in range(decisions):
        workers = {w: WorkerSummary(t * float(rng.lognormal(0.0, noise_cv)), 0.002, controller.batch_sizes[w], 0, 8)
                   for w, t in per_sample_at(period).items()}
        out.append(controller.decide(period, plan, workers))
    return out


def test_batch_sizing_that_chases_a_slowness_hopping_between_workers_backs_off_to_even_batches():
    """The slow worker (2x) changes at every decision: its slowdown is followed at once, but its recovery
    only after 2 decisions, and the sizes arrive as the slowness leaves. (Changing every 2 decisions,
    sizing beats even batches on these speeds and is kept.)"""
    controller = Controller(for_strategy(ControlConfig(selector=False), "batch"), 4, 32)
    hopping = lambda p: {w: 2e-3 if w == p % 4 else 1e-3 for w in range(4)}  # noqa: E731
    events = [e for d in sized_stream(controller, hopping, 40) for e in d.events]
    backoffs = [e for e in events if e["kind"] == "batch_backoff"]
    assert backoffs and backoffs[0]["sized_s"] > backoffs[0]["even_s"] * 1.05
    assert backoffs[0]["sizes"] == {str(w): 32 for w in range(4)} and "even batches for 10" in backoffs[0]["reason"]


@pytest.mark.parametrize("seed", range(3))
def test_batch_sizing_for_a_steady_straggler_never_backs_off(seed):
    controller = Controller(for_strategy(ControlConfig(selector=False), "batch"), 4, 32)
    steady = lambda p: {0: 1e-3, 1: 1e-3, 2: 1e-3, 3: 3e-3 if p >= 5 else 1e-3}  # noqa: E731
    decisions = sized_stream(controller, steady, 60, seed=seed, noise_cv=0.1)
    assert not [e for d in decisions for e in d.events if e["kind"] == "batch_backoff"]
    assert controller.batch_sizes[3] < 20  # sized down and kept there
