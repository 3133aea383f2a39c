"""Coordinator policies on synthetic report streams: detection, AMP, batch sizes, mode selection, noise scale."""

from __future__ import annotations

import itertools

import pytest
import torch

from star.detect import DetectorConfig, StragglerDetector, finishes_early, slow_now
from star.errors import ConfigError
from star.plan import ssgd
from star.policy.amp import AmpConfig, AmpPolicy, AmpState, reachable_within_noise
from star.policy.batch import BatchPlanError, makespan_s, solve_batch_sizes
from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy, strategy_switches, without_workers
from star.policy.noise import NoiseAccumulator, noise_scale
from star.policy.plan_scores import estimate
from star.policy.selector import HeuristicSelector, SelectorConfig

EVEN = {0: 1.0, 1: 1.02, 2: 0.98, 3: 1.01}


# ---------------------------------------------------------------- detector


@pytest.mark.parametrize("rule", ["mad", "relative"])
def test_no_outlier_among_near_equal_workers(rule):
    assert slow_now(EVEN, DetectorConfig(rule=rule)) == frozenset()


@pytest.mark.parametrize("rule", ["mad", "relative"])
def test_one_three_times_slower_worker_is_an_outlier(rule):
    assert slow_now({**EVEN, 3: 3.0}, DetectorConfig(rule=rule)) == {3}


def test_two_stragglers_of_six_are_both_found():
    times = {0: 1.0, 1: 1.0, 2: 1.01, 3: 0.99, 4: 2.5, 5: 3.0}
    assert slow_now(times, DetectorConfig()) == {4, 5}


@pytest.mark.parametrize("times", [{0: 3.0, 1: 3.1, 2: 2.9, 3: 3.0}, {0: 5.0}])
def test_all_slow_or_single_worker_means_no_straggler(times):
    assert slow_now(times, DetectorConfig()) == frozenset()


@pytest.mark.parametrize("slower_by, flagged", [(0.08, False), (0.15, False), (0.19, False), (0.25, True), (2.0, True)])
def test_a_worker_is_a_straggler_only_when_over_a_fifth_slower_than_the_median(slower_by, flagged):
    """The no-trace runs' false detections were healthy workers 9-15% off the median (a co-located
    process, or a smaller batch paying its fixed cost over fewer samples): the default margin is 20%."""
    per_sample = {0: 4.0e-3, 1: 4.02e-3, 2: 3.98e-3, 3: 4.0e-3 * (1 + slower_by)}
    assert (3 in slow_now(per_sample, DetectorConfig())) is flagged


def test_mad_margin_ignores_tiny_spread_with_zero_mad():
    assert slow_now({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.05}, DetectorConfig()) == frozenset()


HALF_SLOW = {0: 1.0, 1: 1.02, 2: 2.0, 3: 2.05}  # a host of two of four workers slowed down together


def test_half_the_workers_twice_as_slow_are_stragglers_although_the_median_sits_among_them():
    assert slow_now(HALF_SLOW, DetectorConfig()) == {2, 3}


def test_without_the_fast_half_rule_the_mad_rule_misses_half_the_workers_slowing():
    """The control for the test above: the median (1.51) sits between the two pairs, and neither pair is
    over its MAD threshold."""
    assert slow_now(HALF_SLOW, DetectorConfig(fast_half_margin=None)) == frozenset()


def test_one_far_outlier_does_not_hide_the_rest_of_a_slow_half():
    """Half of eight workers slow (2x), one of them far slower: the MAD rule finds only that one (its threshold,
    3.7, sits above the rest of the slow half); the fast-half rule finds all four, and both rules count."""
    times = {0: 1.0, 1: 1.01, 2: 0.99, 3: 1.0, 4: 2.0, 5: 2.02, 6: 1.98, 7: 6.0}
    assert slow_now(times, DetectorConfig(fast_half_margin=None)) == {7}
    assert slow_now(times, DetectorConfig()) == {4, 5, 6, 7}


@pytest.mark.parametrize("times", [{0: 1.0, 1: 1.1, 2: 1.2, 3: 1.4}, {0: 1.0, 1: 1.0, 2: 1.45, 3: 1.45}])
def test_workers_under_half_again_the_faster_half_are_not_stragglers_by_that_rule(times):
    assert slow_now(times, DetectorConfig()) == frozenset()


def test_a_fast_half_margin_that_is_not_positive_names_its_field():
    with pytest.raises(ValueError, match="fast_half_margin"):
        DetectorConfig(fast_half_margin=0.0)


def test_hysteresis_enters_after_enter_n_and_leaves_after_exit_n():
    detector = StragglerDetector(DetectorConfig(enter_n=2, exit_n=3))
    slow = {**EVEN, 3: 3.0}
    assert detector.decide(slow).stragglers == frozenset()  # onset seen once
    onset = detector.decide(slow)
    assert onset.entered == {3} and onset.stragglers == {3}
    assert detector.decide(EVEN).stragglers == {3}
    assert detector.decide(EVEN).stragglers == {3}
    recovered = detector.decide(EVEN)
    assert recovered.exited == {3} and recovered.stragglers == frozenset()


@pytest.mark.parametrize("exit_margin, still_straggler", [(0.2, True), (None, False)])
def test_a_straggler_near_the_entry_line_stays_one_until_it_is_back_among_the_fast(exit_margin, still_straggler):
    """A 1.6x worker sits at the fast-half rule's 1.5x line: noise put it under the line two decisions running, it
    'recovered', AMP went off and it was found again a decision later (simulated, one 3x and one 1.6x worker of
    four). A straggler's decision counts as normal only within exit_margin of the faster half's median."""
    detector = StragglerDetector(DetectorConfig(exit_margin=exit_margin))
    for _ in range(2):
        detector.decide({0: 1.0, 1: 1.0, 2: 1.6, 3: 3.0})
    assert detector.stragglers == {2, 3}
    for _ in range(3):  # under both entry lines (1.5x the faster half, 1.2x the median), over 1.2x the faster half
        detector.decide({0: 1.0, 1: 1.0, 2: 1.45, 3: 3.0})
    assert (2 in detector.stragglers) is still_straggler
    for _ in range(2):
        back = detector.decide({0: 1.0, 1: 1.0, 2: 1.1, 3: 3.0})
    assert back.stragglers == {3}  # back within 20% of the fast: recovered


def test_an_exit_margin_that_is_negative_names_its_field():
    with pytest.raises(ValueError, match="exit_margin"):
        DetectorConfig(exit_margin=-0.1)


def test_flapping_worker_never_enters():
    detector = StragglerDetector(DetectorConfig(enter_n=2))
    for i in range(10):
        d = detector.decide({**EVEN, 3: 3.0} if i % 2 else EVEN)
        assert d.stragglers == frozenset()


@pytest.mark.parametrize("iteration_s, early", [
    ({0: 1.0, 1: 1.0, 2: 1.0, 3: 0.81}, set()),  # within the margin of the median: on the critical path
    ({0: 1.0, 1: 1.0, 2: 1.0, 3: 0.79}, {3}),
    ({0: 1.0, 1: 1.6, 2: 1.0, 3: 0.5}, {3}),
    ({0: 1.0}, set()),  # nobody to finish before
])
def test_a_worker_finishes_early_when_its_iteration_ends_over_a_fifth_before_the_median(iteration_s, early):
    assert finishes_early(iteration_s, DetectorConfig().margin) == early


def test_a_slow_per_sample_worker_that_finishes_early_does_not_enter_but_a_straggler_is_not_let_out():
    slow = {**EVEN, 3: 1.25}  # 25% slower per sample than the median: an outlier under the 20% margin
    detector = StragglerDetector(DetectorConfig(enter_n=2, exit_n=2))
    for _ in range(4):  # sized down (or recovered at a small batch): its iteration ends first
        d = detector.decide(slow, early=frozenset({3}))
        assert d.outliers == {3} and d.excused == {3} and d.stragglers == frozenset()
    control = StragglerDetector(DetectorConfig(enter_n=2, exit_n=2))
    assert [control.decide(slow).stragglers for _ in range(2)] == [frozenset(), {3}]  # equal batches: it enters
    for _ in range(3):  # already a straggler: finishing early (its remedy works) does not count as recovery
        d = control.decide(slow, early=frozenset({3}))
        assert d.stragglers == {3} and d.excused == frozenset()


# ---------------------------------------------------------------- AMP


def test_amp_turns_on_for_a_straggler_and_stays_on_when_it_helped():
    policy = AmpPolicy()
    first = policy.decide(0, frozenset({3}), {3: 3e-3, 0: 1e-3}, {})
    assert [(d.worker, d.amp) for d in first] == [(3, True)]
    verified = policy.decide(1, frozenset({3}), {3: 1.5e-3, 0: 1e-3}, {3: 3})
    assert [(d.worker, d.amp) for d in verified] == [(3, True)] and "verified" in verified[0].reason
    assert policy.workers[3].state is AmpState.ON
    assert policy.speedup(3) == pytest.approx(2.0)


def test_amp_that_did_not_help_is_undone_and_never_retried():
    policy = AmpPolicy()
    policy.decide(0, frozenset({3}), {3: 3e-3}, {})
    undo = policy.decide(1, frozenset({3}), {3: 2.95e-3}, {3: 3})
    assert [(d.worker, d.amp) for d in undo] == [(3, False)] and "ineffective" in undo[0].reason
    assert policy.decide(2, frozenset({3}), {3: 3e-3}, {}) == []


@pytest.mark.parametrize("spread, final", [(0.0, True), (0.01, True), (0.25, False)])
def test_a_failed_amp_trial_is_final_only_when_its_reports_resolve_it(spread, final):
    """AMP measured 1.05x against a 10% minimum gain. With steady reports (unknown or 1% spread) that is a
    verdict; with a straggler whose reports scatter by 25% it is noise, so AMP is undone but not written off."""
    policy = AmpPolicy()
    policy.decide(0, frozenset({3}), {3: 3e-3}, {}, {3: 3e-3}, {3: spread})
    undo = policy.decide(1, frozenset({3}), {3: 3e-3 / 1.05}, {3: 3}, None, {3: spread})
    assert [(d.worker, d.amp) for d in undo] == [(3, False)]
    assert undo[0].speedup == pytest.approx(1.05)
    assert policy.workers[3].state is (AmpState.INEFFECTIVE if final else AmpState.RETRY)
    assert ("marked ineffective" in undo[0].reason) is final and ("tried again in 10 decisions" in undo[0].reason) is not final


def test_amp_that_a_clear_slowdown_disproves_is_final_even_among_noisy_reports():
    """0.5x is far outside a 10% spread: AMP slowed this worker, and it is not tried again."""
    policy = AmpPolicy()
    policy.decide(0, frozenset({3}), {3: 3e-3}, {}, None, {3: 0.1})
    policy.decide(1, frozenset({3}), {3: 6e-3}, {3: 3}, None, {3: 0.1})
    assert policy.workers[3].state is AmpState.INEFFECTIVE


def test_an_unresolved_failure_is_retried_after_its_hold_and_each_retry_waits_twice_as_long():
    policy = AmpPolicy(AmpConfig(retry_hold_periods=4))
    noisy = {3: 0.3}

    def trial(start: int) -> int:
        """Try, fail within the noise at start + 1; returns the decision at which AMP goes on again."""
        policy.decide(start + 1, frozenset({3}), {3: 3.1e-3}, {3: 3}, None, noisy)
        assert policy.workers[3].state is AmpState.RETRY
        period = start + 2
        while not policy.decide(period, frozenset({3}), {3: 3e-3}, {}, {3: 3e-3}, noisy):
            period += 1
        assert policy.enabled(3) and policy.workers[3].state is AmpState.VERIFYING
        return period

    assert policy.decide(0, frozenset({3}), {3: 3e-3}, {}, {3: 3e-3}, noisy)[0].amp
    first = trial(0)
    assert first == 1 + 4
    assert trial(first) == first + 1 + 8
    assert policy.untried(frozenset({3})) == []  # on AMP again: nothing the batch rule could skip


def test_a_worker_waiting_to_retry_amp_is_not_counted_as_never_tried():
    policy = AmpPolicy()
    policy.decide(0, frozenset({3}), {3: 3e-3}, {}, None, {3: 0.3})
    policy.decide(1, frozenset({3}), {3: 3e-3}, {3: 3}, None, {3: 0.3})
    assert policy.workers[3].state is AmpState.RETRY and not policy.enabled(3)
    assert policy.untried(frozenset({3})) == [] and policy.skip([3]) == []


@pytest.mark.parametrize("speedup, rel_error, reachable", [(1.05, 0.0, False), (1.05, 0.02, False), (1.05, 0.03, True),
                                                            (0.5, 0.1, False), (1.0, 0.06, True)])
def test_whether_min_gain_is_within_reach_of_the_noise(speedup, rel_error, reachable):
    assert reachable_within_noise(speedup, rel_error, 0.1, 2.0) is reachable


@pytest.mark.parametrize("field, value", [("resolve_z", -1.0), ("resolve_z", float("nan")), ("retry_hold_periods", -1),
                                          ("probe_hold_periods", -2)])
def test_an_amp_setting_out_of_range_is_refused_naming_its_field(field, value):
    with pytest.raises(ConfigError, match=f"control.amp_policy.{field}={value}"):
        AmpConfig(**{field: value})


@pytest.mark.parametrize("fresh_before_s, kept", [(5.8e-3, True), (None, False)])
def test_amp_is_judged_against_the_newest_speed_before_it_went_on(fresh_before_s, kept):
    """The steady median (3.7 ms) still lags a slowdown the newest reports show (5.8 ms): AMP measured
    at 3.6 ms sped the worker up 1.6x, which only the newest speed reveals (None: judged on the lag)."""
    policy = AmpPolicy()
    fresh = {3: fresh_before_s} if fresh_before_s else None
    policy.decide(0, frozenset({3}), {3: 3.7e-3}, {}, fresh)
    verdict = policy.decide(1, frozenset({3}), {3: 3.6e-3}, {3: 3}, {3: 3.6e-3})
    assert [(d.worker, d.amp) for d in verdict] == [(3, kept)]
    assert policy.workers[3].state is (AmpState.ON if kept else AmpState.INEFFECTIVE)
    if kept:
        assert policy.speedup(3) == pytest.approx(5.8 / 3.6)


def test_amp_turns_off_when_the_straggler_recovers():
    policy = AmpPolicy()
    policy.decide(0, frozenset({3}), {3: 3e-3}, {})
    policy.decide(1, frozenset({3}), {3: 1.5e-3}, {3: 3})
    off = policy.decide(2, frozenset(), {3: 0.5e-3}, {3: 3})
    assert [(d.worker, d.amp) for d in off] == [(3, False)]


def test_amp_waits_for_enough_fresh_reports_before_judging():
    policy = AmpPolicy()
    policy.decide(0, frozenset({3}), {3: 3e-3}, {})
    assert policy.decide(1, frozenset({3}), {3: 3e-3}, {3: 1}) == []
    assert policy.workers[3].state is AmpState.VERIFYING


def test_amp_toggles_a_worker_at_most_once_per_period():
    policy = AmpPolicy()
    policy.decide(5, frozenset({3}), {3: 3e-3}, {})
    assert policy.decide(5, frozenset({3}), {3: 3e-3}, {3: 9}) == []


# ---------------------------------------------------------------- batch sizes


def _brute_force(per_sample, total, fixed, lo, hi):
    workers = sorted(per_sample)
    best = None
    for sizes in itertools.product(range(lo, hi + 1), repeat=len(workers)):
        if sum(sizes) == total:
            cost = max(fixed[w] + b * per_sample[w] for w, b in zip(workers, sizes))
            best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize(
    "per_sample, total",
    [({0: 1.0, 1: 1.0, 2: 1.0}, 12), ({0: 1.0, 1: 1.0, 2: 3.0}, 12), ({0: 0.5, 1: 1.3, 2: 2.0}, 10), ({0: 1.0, 1: 7.0}, 9)],
)
def test_batch_solver_is_exact_against_brute_force(per_sample, total):
    fixed = {w: 0.3 * w for w in per_sample}
    sizes = solve_batch_sizes(per_sample, total, fixed_s=fixed, min_batch=1, max_batch=total)
    assert sum(sizes.values()) == total
    assert makespan_s(sizes, per_sample, fixed) == pytest.approx(_brute_force(per_sample, total, fixed, 1, total))


def test_batch_sizes_are_proportional_to_speed():
    sizes = solve_batch_sizes({0: 1.0, 1: 1.0, 2: 1.0, 3: 3.0}, 120)
    assert sizes == {0: 36, 1: 36, 2: 36, 3: 12}


def test_batch_change_needs_a_clear_predicted_gain():
    from star.policy.batch import worth_changing

    per_sample = {0: 1.0, 1: 1.05}
    assert not worth_changing({0: 16, 1: 16}, {0: 17, 1: 15}, per_sample, None, 0.1)
    assert worth_changing({0: 16, 1: 16}, {0: 24, 1: 8}, {0: 1.0, 1: 3.0}, None, 0.1)


def test_batch_solver_refuses_impossible_bounds():
    with pytest.raises(BatchPlanError):
        solve_batch_sizes({0: 1.0, 1: 1.0}, 10, max_batch=4)


# ---------------------------------------------------------------- mode selection

BATCH = {w: 32 for w in range(4)}


def test_ssgd_with_equal_workers_scores_the_iteration_time():
    assert estimate(ssgd(range(4)), {w: 0.5 for w in range(4)}, BATCH, 0.0, 0.15).seconds_per_progress == pytest.approx(0.5)


def test_selector_keeps_ssgd_when_nobody_is_slow():
    decision = HeuristicSelector().decide(10, ssgd(range(4), epoch=1), {w: 1.0 for w in range(4)}, BATCH, frozenset())
    assert decision.plan is None and "already the best" in decision.reason


def test_selector_leaves_ssgd_for_a_three_times_slower_worker():
    times = {0: 1.0, 1: 1.0, 2: 1.0, 3: 3.0}
    decision = HeuristicSelector().decide(10, ssgd(range(4), epoch=1), times, BATCH, frozenset({3}), b_noise=50)
    assert decision.plan is not None
    assert estimate(decision.plan, times, BATCH, 50, 0.15).seconds_per_progress < 0.7 * 3.0


def test_selector_respects_margin_and_dwell():
    times = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.08}
    assert HeuristicSelector().decide(10, ssgd(range(4), epoch=1), times, BATCH, frozenset()).plan is None
    selector = HeuristicSelector(SelectorConfig(min_dwell=5))
    slow = {**times, 3: 3.0}
    assert selector.decide(10, ssgd(range(4), epoch=1), slow, BATCH, frozenset({3})).plan is not None
    assert selector.decide(12, ssgd(range(4), epoch=2), slow, BATCH, frozenset({3})).plan is None


def test_large_noise_scale_penalises_small_effective_batches():
    times = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.6}
    from star.plan import asgd

    quiet = estimate(asgd(range(4)), times, BATCH, 0.0, 0.15).seconds_per_progress
    noisy = estimate(asgd(range(4)), times, BATCH, 1000.0, 0.15).seconds_per_progress
    assert noisy > quiet


# ---------------------------------------------------------------- noise scale


def test_noise_scale_recovers_a_known_gradient_noise():
    torch.manual_seed(0)
    true_g = torch.full((2000,), 0.05)  # |G|^2 = 5
    sigma2 = 4.0  # per-sample variance per coordinate -> S = tr(Sigma) = 8000
    accumulator = NoiseAccumulator(decay=0.98)
    b = 16
    for _ in range(400):
        grads = [true_g + torch.randn(2000) * (sigma2 / b) ** 0.5 for _ in range(4)]
        accumulator.observe(grads, [b] * 4)
    estimate_ = noise_scale(accumulator.small_sq, accumulator.big_sq, accumulator.small_batch, accumulator.big_batch)
    assert estimate_ == pytest.approx(8000 / 5, rel=0.25)


def test_a_round_begun_before_the_sum_and_finished_with_it_records_what_observe_records():
    torch.manual_seed(1)
    grads = [torch.randn(500) for _ in range(3)]
    whole, split = NoiseAccumulator(), NoiseAccumulator()
    whole.observe(grads, [8, 8, 16], [1, 1, 2])
    finish = split.begin_round(grads, [8, 8, 16], [1, 1, 2])
    assert split.rounds == 0  # nothing recorded until the sum comes
    finish(grads[0] + grads[1] + grads[2])
    assert (split.small_sq, split.big_sq, split.small_batch, split.big_batch) == pytest.approx(
        (whole.small_sq, whole.big_sq, whole.small_batch, whole.big_batch), rel=1e-5)
    assert split.rounds == 1 and NoiseAccumulator().begin_round(grads[:1], [8]) is None


def test_a_round_given_its_squared_norms_records_what_it_would_compute():
    """The PS reads each |g|² at push time, with its finiteness check: handing them over changes nothing."""
    torch.manual_seed(2)
    grads = [torch.randn(500) for _ in range(3)]
    computed, given = NoiseAccumulator(), NoiseAccumulator()
    computed.begin_round(grads, [8, 8, 16], [1, 1, 2])(grads[0] + grads[1] + grads[2])
    norms = [float(g.dot(g)) for g in grads]
    given.begin_round([torch.zeros(500)] * 3, [8, 8, 16], [1, 1, 2], norms)(grads[0] + grads[1] + grads[2])
    assert given.small_sq == pytest.approx(computed.small_sq, rel=1e-6) and given.big_sq == computed.big_sq


def test_noise_scale_is_none_until_estimable():
    assert noise_scale(0.0, 0.0, 0.0, 0.0) is None
    assert noise_scale(1.0, 2.0, 8, 32) is None  # big-batch norm larger: no positive noise


# ---------------------------------------------------------------- controller


def _summaries(per_sample, silent=None):
    return {w: WorkerSummary(t, 0.002, 32, 0, 8, (silent or {}).get(w, 0.0)) for w, t in per_sample.items()}


def test_strategies_switch_the_documented_policies():
    assert strategy_switches("auto") == {"amp": True, "selector": True, "batch": True, "exclude": False}
    assert strategy_switches("ssgd") == {"amp": False, "selector": False, "batch": False, "exclude": False}
    assert for_strategy(ControlConfig(batch=False), "auto").batch is False


def test_exclude_strategy_drops_the_straggler_and_readmits_it():
    controller = Controller(for_strategy(ControlConfig(), "exclude"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    slow = _summaries({0: 1e-3, 1: 1e-3, 2: 1e-3, 3: 3e-3})
    assert controller.decide(0, plan, slow).plan is None  # enter_n = 2
    excluded = controller.decide(1, plan, slow).plan
    assert excluded is not None and excluded.groups == ((0, 1, 2), (3,)) and excluded.epoch == 2
    even = _summaries({0: 1e-3, 1: 1e-3, 2: 1e-3, 3: 1e-3})
    controller.decide(2, excluded, even)
    readmitted = controller.decide(3, excluded, even).plan
    assert readmitted is not None and readmitted.groups == ((0, 1, 2, 3),)


def test_a_silent_worker_is_lost_and_leaves_the_plan():
    controller = Controller(for_strategy(ControlConfig(lost_after_s=5), "ssgd"), 4, 32)
    decision = controller.decide(0, ssgd(range(4), epoch=1), _summaries({w: 1e-3 for w in range(4)}, silent={2: 9.0}))
    assert decision.lost == {2}
    assert decision.plan is not None and decision.plan.groups == ((0, 1, 3),) and decision.plan.quorum == (3,)
    assert any(e["kind"] == "worker_lost" for e in decision.events)


@pytest.mark.parametrize("strategy", ["ssgd", "amp", "batch", "auto"])
def test_a_period_in_which_every_worker_is_silent_loses_them_without_failing(strategy):
    """Slow steps of a big model can leave every worker silent past lost_after_s at once (seen on
    resnet): the decision loses them all instead of failing on an empty set of judged workers."""
    controller = Controller(for_strategy(ControlConfig(lost_after_s=5), strategy), 4, 32)
    plan = ssgd(range(4), epoch=1)
    for period in range(3):
        controller.decide(period, plan, _summaries({w: 1e-3 for w in range(4)}))
    decision = controller.decide(3, plan, _summaries({w: 1e-3 for w in range(4)}, silent={w: 9.0 for w in range(4)}))
    assert decision.lost == frozenset(range(4))
    assert sorted(e["worker"] for e in decision.events if e["kind"] == "worker_lost") == [0, 1, 2, 3]


def test_a_worker_whose_own_steps_are_long_is_not_lost_for_a_slow_step_but_is_after_several():
    controller = Controller(for_strategy(ControlConfig(lost_after_s=5, lost_after_steps=3), "ssgd"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    slow_steps = _summaries({w: 0.25 for w in range(4)})  # 0.25 s/sample x 32 samples: 8 s steps
    assert controller.decide(0, plan, {**slow_steps, 1: slow_steps[1]._replace(silent_s=12.0)}).lost == frozenset()
    assert controller.decide(1, plan, {**slow_steps, 1: slow_steps[1]._replace(silent_s=30.0)}).lost == {1}


@pytest.mark.parametrize("field, value", [("lost_after_s", 0.0), ("lost_after_s", -5.0), ("lost_after_steps", -1.0)])
def test_a_loss_rule_that_could_never_or_always_fire_is_refused_naming_its_field(field, value):
    with pytest.raises(ConfigError, match=f"control.{field}={value}"):
        ControlConfig(**{field: value})


@pytest.mark.parametrize("slowdown", [3.0, 5.0, 8.0])
def test_a_big_model_worker_that_turns_several_times_slower_is_a_straggler_not_a_lost_worker(slowdown):
    """gpt-50M on CPU steps in ~7 s: a 3x slowdown's first step kept the worker silent past 20 s, and it was
    declared lost and dropped from the plan. By default a silence of several of its own steps is not lost."""
    controller = Controller(for_strategy(ControlConfig(), "auto"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    steps_7s = _summaries({w: 7.0 / 32 for w in range(4)})  # 32 samples a step
    onset = {**steps_7s, 3: steps_7s[3]._replace(silent_s=slowdown * 7.0 + 1.0)}
    assert controller.decide(0, plan, onset).lost == frozenset()
    hung = {**steps_7s, 3: steps_7s[3]._replace(silent_s=80.0)}  # more than 10 of its steps: lost
    assert controller.decide(1, plan, hung).lost == {3}


def test_no_detection_and_no_change_without_stragglers():
    controller = Controller(for_strategy(ControlConfig(), "auto"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    for period in range(10):
        decision = controller.decide(period, plan, _summaries({0: 1e-3, 1: 1.03e-3, 2: 0.98e-3, 3: 1.01e-3}))
        assert decision.plan is None and decision.amp == {} and decision.stragglers == frozenset()
        assert not [e for e in decision.events if e["kind"] == "straggler_detected"]


def test_a_worker_re_measuring_after_an_amp_switch_does_not_stall_decisions_for_the_others():
    controller = Controller(for_strategy(ControlConfig(amp=True, batch=False, selector=False), "ssgd"), 6, 32)
    plan = ssgd(range(6), epoch=1)
    slow5 = _summaries({0: 1e-3, 1: 1e-3, 2: 1e-3, 3: 1e-3, 4: 1e-3, 5: 3e-3})
    controller.decide(0, plan, slow5)
    assert controller.decide(1, plan, slow5).amp == {5: True}
    # worker 5 now has no fresh reports under AMP; worker 4 turns slow meanwhile
    remeasuring = {**slow5, 5: WorkerSummary(1.0, 0.002, 32, 0, 0), 4: WorkerSummary(3e-3, 0.002, 32, 0, 8)}
    controller.decide(2, plan, remeasuring)
    decision = controller.decide(3, plan, remeasuring)
    assert decision.amp == {4: True}  # decided without waiting for worker 5
    assert 5 in decision.stragglers  # its standing is kept, not forgotten


def test_a_straggler_getting_amp_is_resized_at_detection_then_held_until_amp_is_verified():
    """auto must not lag batch sizing alone by AMP's verification: the straggler's batch is cut at its
    speed without AMP when AMP goes on, and left alone while AMP's effect is being measured."""
    controller = Controller(for_strategy(ControlConfig(selector=False), "auto"), 3, 32)
    plan = ssgd(range(3), epoch=1)
    even = _summaries({0: 1e-3, 1: 1e-3, 2: 1e-3})
    assert not any(controller.decide(p, plan, even).batch_sizes for p in range(3))  # even speeds: nothing to size
    # worker 2 turns slow; it carries enough of the capacity (3 workers) that a 2x AMP speed-up would beat
    # batch sizes alone by > 10%, so AMP is tried on it
    slow2 = _summaries({0: 1e-3, 1: 1e-3, 2: 3e-3})
    decisions = [controller.decide(p, plan, slow2) for p in range(3, 5)]
    assert decisions[1].amp == {2: True}
    # sized for 3 ms/sample by the detection decision at the latest (a 3x slowdown is followed at once)
    assert decisions[0].batch_sizes.get(2, 32) < 32 or decisions[1].batch_sizes.get(2, 32) < 32
    verifying = {**slow2, 2: WorkerSummary(2.5e-3, 0.002, controller.batch_sizes[2], 2, 2)}  # 2 of 3 reports under AMP
    later = controller.decide(5, plan, verifying)
    assert 2 not in later.batch_sizes and later.amp == {}  # held while AMP's effect is unknown
    assert sum(controller.batch_sizes.values()) == 3 * 32  # the update stays a global-batch step


def test_the_selector_leaves_the_base_plan_only_for_a_detected_straggler():
    """One period of slow reports (before the detector's hysteresis confirms them) moves no plan."""
    controller = Controller(for_strategy(ControlConfig(amp=False, batch=False), "auto"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    slow3 = _summaries({0: 1e-3, 1: 1e-3, 2: 1e-3, 3: 4e-3})
    first = controller.decide(0, plan, slow3)
    assert first.stragglers == frozenset() and first.plan is None
    second = controller.decide(1, plan, slow3)
    assert second.stragglers == {3} and second.plan is not None and second.plan.label != "ssgd"


def test_the_selector_compares_plans_on_the_speeds_batch_sizing_acts_on():
    """A straggler that moves to another worker must not send auto to k-of-N for the decision or
    two before batch sizing follows it (a rotating synthetic trace: every seed went SSGD -> k-of-N
    -> SSGD and needed 56-74 updates against batch sizing's 36-44)."""
    controller = Controller(for_strategy(ControlConfig(amp=False), "auto"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    sizes = {w: 32 for w in range(4)}
    decisions = []
    for period in range(12):
        slow = 3 if period < 6 else 2  # worker 3 is 3x slower, then worker 2 instead
        reports = {w: WorkerSummary(3e-3 if w == slow else 1e-3, 0.002, sizes[w], 0, 8) for w in range(4)}
        decision = controller.decide(period, plan, reports)
        sizes.update(decision.batch_sizes)
        decisions.append(decision)
    assert sizes[2] < min(sizes[0], sizes[1], sizes[3]) / 2  # batch sizing followed the move
    assert [d.plan.label for d in decisions if d.plan is not None] == []  # and SSGD with those sizes was never left


def test_under_batch_sizing_a_plan_must_beat_ssgd_at_the_sizes_batch_sizing_would_give():
    """Staying on SSGD lets batch sizing rebalance, so that is the price a new plan must beat, not SSGD at the sizes in
    force while batch sizing waits (here for its last sizes to be reported). Priced at the sizes in force, the 3x worker
    at an even batch sent this job to k-of-N; in the simulated contention at 1,000 workers, a grouped plan looked 33%
    faster, and auto took it, kept it, and needed 74 updates against 36 (1.21x the amp strategy's time)."""
    controller = Controller(for_strategy(ControlConfig(amp=False, detector=DetectorConfig(enter_n=1)), "auto"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    # every worker still reports the batch before the sizes in force (32 each): batch sizing waits for them
    unsettled = {w: WorkerSummary(3e-3 if w == 3 else 1e-3, 0.002, 31, 0, 8) for w in range(4)}
    for period in range(3):
        decision = controller.decide(period, plan, unsettled, now_s=float(period))
        assert 3 in decision.stragglers and decision.batch_sizes == {}
        assert decision.plan is None  # balanced, SSGD's round is ~0.04 s: no plan with stale updates beats it


def test_no_plan_switch_while_a_straggler_s_amp_is_being_verified():
    """Plans compared while AMP's effect is unmeasured would be compared on speeds about to change."""
    # detected at its first slow decision, as mid3x's worker 3 was in a real run where k-of-N came with AMP
    controller = Controller(for_strategy(ControlConfig(batch=False, detector=DetectorConfig(enter_n=1)), "auto"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    slow3 = _summaries({0: 1e-3, 1: 1e-3, 2: 1e-3, 3: 4e-3})
    detected = controller.decide(0, plan, slow3)
    assert detected.amp == {3: True} and detected.plan is None
    verifying = {**slow3, 3: WorkerSummary(3.8e-3, 0.002, 32, 2, 2)}
    assert controller.decide(1, plan, verifying).plan is None
    unhelped = {**slow3, 3: WorkerSummary(3.9e-3, 0.002, 32, 3, 3)}  # verified: AMP did not help, undone
    undone = controller.decide(2, plan, unhelped)
    assert undone.amp == {3: False}
    assert undone.plan is not None and undone.plan.label != "ssgd"  # now the selector may act on the straggler


def test_a_straggler_is_not_judged_on_its_times_while_its_amp_is_being_verified():
    """Its speed-up is not known until verified, so its AMP times cannot be normalised; read as plain they looked
    fast, the detector let it out as recovered in the very decision that verified AMP, and AMP went off again."""
    controller = Controller(for_strategy(ControlConfig(detector=DetectorConfig(enter_n=1, exit_n=1)), "amp"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    slow3 = _summaries({0: 1e-3, 1: 1e-3, 2: 1e-3, 3: 2e-3})
    assert controller.decide(0, plan, slow3).amp == {3: True}
    under_amp = {**slow3, 3: WorkerSummary(1.05e-3, 0.002, 32, 3, 3)}  # AMP made it ~1.9x faster: about the others' speed
    verified = controller.decide(1, plan, under_amp)
    assert verified.amp == {3: True} and 3 in verified.stragglers  # verified, stays on; the straggler not let out
    assert any(e["kind"] == "amp" and e["reason"].startswith("verified") for e in verified.events)
    assert not any(e["kind"] == "straggler_recovered" for e in verified.events)
    assert controller.amp.enabled(3)


def _on_amp_and_recovered(baseline_s: float, speedup: float):
    """An auto controller whose worker 3 is on verified AMP (measured `speedup`), and reports in which worker 3,
    at 1 ms/sample with AMP like the others, is no longer slow: the next decision switches AMP off as recovered."""
    from star.policy.amp import _WorkerAmp

    controller = Controller(for_strategy(ControlConfig(selector=False), "auto"), 4, 32)
    controller.amp.workers[3] = _WorkerAmp(AmpState.ON, baseline_s=baseline_s, speedup=speedup)
    controller.judged |= set(range(4))
    recovered = {w: WorkerSummary(1e-3, 0.002, 32, 8 if w == 3 else 0, 8) for w in range(4)}
    return controller, ssgd(range(4), epoch=1), recovered


def test_when_a_recovered_amp_worker_turns_amp_off_its_batch_is_sized_for_its_speed_without_amp_then_corrected():
    """Sized at once for its time with AMP times the speed-up AMP measured (2 ms/sample, not the 1 ms it showed
    with AMP); that speed-up was measured while it was slow and need not hold now (the probe in
    star.policy.amp), so its next measurement corrects the size even for a gain under the minimum."""
    controller, plan, recovered = _on_amp_and_recovered(baseline_s=2e-3, speedup=2.0)  # verified: AMP made it 2x faster
    # It is not in the slow set, so AMP goes off; with AMP it showed 1 ms/sample, without it takes 2 (estimated).
    off = controller.decide(0, plan, recovered)
    assert off.amp == {3: False} and off.batch_sizes[3] < 32  # sized for 2 ms/sample
    # measured without AMP: 1.2 ms/sample, where the sizes for 2 ms are off by less than the 10% minimum gain
    sizes = off.batch_sizes
    measured = {w: WorkerSummary(1e-3 if w < 3 else 1.2e-3, 0.002, sizes[w], 0, 8) for w in range(4)}
    corrected = controller.decide(1, plan, measured)
    assert corrected.batch_sizes and corrected.batch_sizes[3] > sizes[3]
    assert "estimated speed" in next(e["reason"] for e in corrected.events if e["kind"] == "batch_sizes")
    assert not controller.decide(2, plan, measured).batch_sizes  # corrected once; then the minimum gain again


def test_a_recovered_amp_worker_whose_batch_was_not_resized_at_its_estimate_is_not_corrected_later():
    """A real gpt-10m run: sizes were already back to even when AMP went off; the estimate (1.21x) was worth no
    resize, yet the next measurement 'corrected' the even sizes for a 2.6% gain, and sizes went back to even 3 s later."""
    controller, plan, recovered = _on_amp_and_recovered(baseline_s=1.1e-3, speedup=1.1)
    off = controller.decide(0, plan, recovered)
    assert off.amp == {3: False} and not off.batch_sizes  # estimated 1.1 ms/sample: under the minimum gain, no resize
    measured = {w: WorkerSummary(1e-3 if w < 3 else 1.08e-3, 0.002, 32, 0, 8) for w in range(4)}
    assert not controller.decide(1, plan, measured).batch_sizes  # a 6% gain: the minimum applies, nothing to correct


def test_a_size_set_at_an_estimate_is_still_corrected_after_decisions_that_waited_for_the_worker_to_re_measure():
    """A real run on a held-out contention trace: AMP went off on a worker that was still 2x slow, which was sized at
    its estimated plain speed (76 of 256 samples); while it re-measured without AMP (held), the decisions in between
    resized nothing, and each of them cleared the pending correction, so the 76 stayed for the rest of the run."""
    controller, plan, recovered = _on_amp_and_recovered(baseline_s=2e-3, speedup=2.0)
    off = controller.decide(0, plan, recovered)
    assert off.amp == {3: False} and off.batch_sizes[3] < 32  # sized for an estimated 2 ms/sample
    sizes = off.batch_sizes
    re_measuring = {w: WorkerSummary(1e-3, 0.002, sizes[w], 0, 8 if w < 3 else 1) for w in range(4)}
    for period in (1, 2):  # worker 3 has too few reports without AMP: held, nothing resized meanwhile
        assert not controller.decide(period, plan, re_measuring).batch_sizes
    measured = {w: WorkerSummary(1e-3 if w < 3 else 1.2e-3, 0.002, sizes[w], 0, 8) for w in range(4)}
    corrected = controller.decide(3, plan, measured)
    assert corrected.batch_sizes and corrected.batch_sizes[3] > sizes[3]
    assert "estimated speed" in next(e["reason"] for e in corrected.events if e["kind"] == "batch_sizes")


def test_a_correction_due_is_not_made_on_speed_differences_the_measurements_do_not_resolve():
    """Corrections need no minimum gain, but a resolved one: kept due across held decisions, corrections made on
    noise churned sizes at 100 simulated workers (heavy_tail: auto 1.026 -> 1.057x the best fixed strategy)."""
    controller, plan, recovered = _on_amp_and_recovered(baseline_s=2e-3, speedup=2.0)
    sizes = controller.decide(0, plan, recovered).batch_sizes
    assert sizes[3] < 32  # sized for an estimated 2 ms/sample
    # measured slower still (2.3 ms/sample), but every time with a 40% standard error: a size further from even is
    # not resolved as better (going back towards even would be: unresolved speeds are alike)
    noisy = {w: WorkerSummary(1e-3 if w < 3 else 2.3e-3, 0.002, sizes[w], 0, 8, sizing_rel_error=0.4) for w in range(4)}
    assert not controller.decide(1, plan, noisy).batch_sizes
    assert 3 not in controller._sized_on_estimate  # measured: no longer due, whatever the outcome


def test_a_correction_due_when_batch_sizing_backs_off_waits_for_sizing_to_resume():
    """The guard's even batches replace every size at that decision; the worker sized at an estimated speed
    is still corrected (any gain) at the first decision batch sizing makes again."""
    controller, plan, recovered = _on_amp_and_recovered(baseline_s=2e-3, speedup=2.0)
    sizes = controller.decide(0, plan, recovered).batch_sizes
    even = {w: 32 for w in range(4)}
    controller._guard_batches = lambda *args: even  # the guard backs off at the correcting decision
    measured = {w: WorkerSummary(1e-3 if w < 3 else 1.2e-3, 0.002, sizes[w], 0, 8) for w in range(4)}
    assert controller.decide(1, plan, measured).batch_sizes == even
    del controller._guard_batches  # sizing resumes
    resumed = controller.decide(2, plan, {w: s._replace(batch_size=32) for w, s in measured.items()})
    assert "estimated speed" in next(e["reason"] for e in resumed.events if e["kind"] == "batch_sizes")


def test_when_amp_slowed_a_straggler_and_is_undone_its_batch_is_sized_for_its_speed_without_amp():
    """gpt-1m on this CPU: bf16 autocast took the straggler from 73 to 132 ms/sample. The decision that
    undid AMP sized the worker for 132 ms (the speed it showed under AMP), giving it 5 of 64 samples
    where its plain 73 ms called for 8, until its next speed change was confirmed."""
    controller = Controller(for_strategy(ControlConfig(selector=False), "auto"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    slow3 = {w: WorkerSummary(4e-3 if w == 3 else 1e-3, 0.002, 32, 0, 8) for w in range(4)}
    decisions = [controller.decide(p, plan, slow3) for p in range(2)]
    assert decisions[1].amp == {3: True}
    plain_size = controller.batch_sizes[3]  # sized at detection for its 4 ms/sample without AMP
    slowed = {**slow3, 3: WorkerSummary(7e-3, 0.002, plain_size, 3, 3)}  # 3 reports under AMP: 7 ms/sample
    undone = controller.decide(2, plan, slowed)
    assert undone.amp == {3: False} and "did not help" in next(e["reason"] for e in undone.events if e["kind"] == "amp")
    assert controller.batch_sizes[3] == plain_size  # back at its plain speed: not cut further for AMP's 7 ms


def test_without_workers_shrinks_groups_and_quorums():
    from star.plan import kofn

    plan = without_workers(kofn(range(4), 3, epoch=1), frozenset({0, 1}))
    assert plan.groups == ((2, 3),) and plan.quorum == (2,)


def test_a_lost_worker_plan_always_has_a_newer_epoch():
    controller = Controller(for_strategy(ControlConfig(lost_after_s=5), "ssgd"), 4, 32)
    reports = _summaries({w: 1e-3 for w in range(4)}, silent={2: 9.0})
    reports[1] = reports[1]._replace(reports=0)  # not every worker can be judged yet
    decision = controller.decide(0, ssgd(range(4), epoch=3), reports)
    assert decision.lost == {2} and decision.plan is not None and decision.plan.epoch == 4


@pytest.mark.parametrize("strategy", ["ssgd", "kofn", "exclude", "auto"])
def test_a_lost_worker_that_reports_again_rejoins_the_plan(strategy):
    from star.plan import plan_for_mode

    controller = Controller(for_strategy(ControlConfig(lost_after_s=5), strategy), 4, 32)
    start = plan_for_mode("kofn" if strategy == "kofn" else "ssgd", 4, epoch=1)
    gone = controller.decide(0, start, _summaries({w: 1e-3 for w in range(4)}, silent={2: 9.0}))
    assert 2 not in gone.plan.workers
    back = controller.decide(1, gone.plan, _summaries({w: 1e-3 for w in range(4)}))
    assert back.lost == frozenset() and back.plan is not None
    assert back.plan.workers == (0, 1, 2, 3) and back.plan.epoch == gone.plan.epoch + 1
    assert any(e["kind"] == "worker_rejoined" and e["worker"] == 2 for e in back.events)


def _one_sample_at_a_time(per_sample, global_batch, fixed, min_batch, upper):
    """Reference: the plain greedy, one sample at a time to the worker whose time grows least."""
    import heapq

    sizes = {w: min_batch for w in per_sample}
    heap = [(fixed.get(w, 0.0) + (min_batch + 1) * per_sample[w], w) for w in sorted(per_sample)]
    heapq.heapify(heap)
    for _ in range(global_batch - min_batch * len(per_sample)):
        while True:
            _, w = heapq.heappop(heap)
            if sizes[w] < upper:
                break
        sizes[w] += 1
        if sizes[w] < upper:
            heapq.heappush(heap, (fixed.get(w, 0.0) + (sizes[w] + 1) * per_sample[w], w))
    return sizes


@pytest.mark.parametrize("seed", range(40))
def test_bulk_batch_allocation_equals_one_sample_at_a_time(seed):
    import random

    rng = random.Random(seed)
    n = rng.randint(1, 40)
    per_sample = {w: rng.choice([1e-3, 2e-3, 3e-3, rng.uniform(1e-4, 1e-2)]) for w in range(n)}
    fixed = {w: rng.choice([0.0, 0.01, rng.uniform(0, 0.05)]) for w in range(n)}
    min_batch, base = rng.randint(0, 3), rng.randint(4, 64)
    upper = max(min_batch + 1, int(base * rng.choice([1.5, 2.0, 4.0])))
    sizes = solve_batch_sizes(per_sample, base * n, fixed_s=fixed, min_batch=min_batch, max_batch=upper)
    assert sizes == _one_sample_at_a_time(per_sample, base * n, fixed, min_batch, upper)


@pytest.mark.parametrize("n, stragglers, expected", [
    (4, 0, [2, 3]),
    (16, 0, list(range(8, 16))),
    (1000, 0, [500, 562, 625, 688, 750, 812, 875, 938, 999]),
    (1000, 3, [500, 562, 625, 688, 750, 812, 875, 938, 997, 999]),
])
def test_kofn_candidates_are_all_k_for_small_n_and_a_few_for_large_n(n, stragglers, expected):
    from star.policy.candidates import kofn_quorums

    assert kofn_quorums(n, stragglers) == expected



def test_a_detection_event_reports_the_median_the_rule_judged_against():
    """With an even number of workers the MAD rule's median is the mean of the middle two; the
    event must show that one, or a detection looks as if it broke the margin rule."""
    per_sample = {0: 3.9e-3, 1: 4.9e-3, 2: 4.0e-3, 3: 3.9e-3}
    assert slow_now(per_sample, DetectorConfig()) == {1}
    controller = Controller(for_strategy(ControlConfig(), "exclude"), 4, 32)
    plan = ssgd(range(4), epoch=1)
    events = controller.decide(0, plan, _summaries(per_sample)).events + controller.decide(1, plan, _summaries(per_sample)).events
    detected = [e for e in events if e["kind"] == "straggler_detected"]
    assert [e["worker"] for e in detected] == [1]
    assert detected[0]["median_ms"] == 3.95  # not the upper middle value, 4.0


@pytest.mark.parametrize("field, value", [("k", -1.0), ("margin", -0.1), ("relative_threshold", 0.0), ("enter_n", 0),
                                          ("fast_half_margin", -0.5), ("rule", "median")])
def test_a_bad_detector_setting_is_a_config_error_naming_its_field(field, value):
    with pytest.raises(ConfigError, match=f"control.detector.{field}="):
        DetectorConfig(**{field: value})
