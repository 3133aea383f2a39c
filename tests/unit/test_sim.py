"""The simulator: closed-form round times, agreement with the Aggregator, the real policies, traces."""

from __future__ import annotations

import heapq
import itertools

import numpy as np
import pytest

from star.aggregate import Aggregator
from star.plan import plan_for_mode
from star.sim import Simulation, sim_config, simulate
from star.sim import generators
from star.sim.replay import FactorTable
from star.traces import Trace

BASE_S = 0.1
STATIC = (1.0, 1.5, 2.0, 1.2)


def static_trace(factors=STATIC) -> Trace:
    return Trace.from_rows([(0, w, f) for w, f in enumerate(factors)] + [(1000, w, f) for w, f in enumerate(factors)])


def config(mode: str = "ssgd", workers: int = 4, **extra):
    data = {
        "workers": workers, "iterations": 200, "stop_at_target": False, "plan": {"mode": mode},
        "cost": {"base_compute_s": BASE_S, "model_bytes": 1.0, "bandwidth_bytes_per_s": 1e15},
        "convergence": {"updates_to_target": 1e6, "eval_period_s": 0.0},
    }
    for key, value in extra.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return sim_config(data)


def update_times(sim: Simulation) -> np.ndarray:
    return sim.history._data[: sim.history.size]


def run(cfg, trace) -> Simulation:
    sim = Simulation(cfg, trace)
    sim.run()
    return sim


def test_same_seed_gives_the_same_result_and_another_seed_does_not():
    cfg = config("auto", cost={"compute_noise_cv": 0.1}, convergence={"updates_to_target": 80.0, "eval_period_s": 0.5},
                 stop_at_target=True)
    trace = generators.transient(4, 200, seed=0, worker=3)
    a, b = simulate(cfg, trace), simulate(cfg, trace)
    assert {k: v for k, v in a.result.items() if k not in ("wall_s", "controller_s")} == \
        {k: v for k, v in b.result.items() if k not in ("wall_s", "controller_s")}
    assert a.curve == b.curve
    other = simulate(sim_config({**_as_dict(cfg), "seed": 1}), trace)
    assert other.curve != a.curve


def _as_dict(cfg):
    import dataclasses
    return {k: v for k, v in dataclasses.asdict(cfg).items() if v is not None}


def test_ssgd_round_time_is_the_slowest_workers_iteration_time():
    times = update_times(run(config("ssgd"), static_trace()))
    assert np.allclose(np.diff(times[:50]), BASE_S * max(STATIC))


def test_asgd_update_rate_is_the_sum_of_worker_rates():
    sim = run(config("asgd", iterations=400), static_trace())
    times = update_times(sim)
    horizon = 30.0
    rate = np.count_nonzero(times <= horizon) / horizon
    assert rate == pytest.approx(sum(1 / (BASE_S * f) for f in STATIC), rel=0.02)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_k_of_n_round_time_is_the_k_th_fastest_iteration_time(k):
    cfg = config("kofn", plan={"mode": "kofn", "k": k, "late_policy": "drop"})
    times = update_times(run(cfg, static_trace()))
    assert np.allclose(np.diff(times[5:40]), BASE_S * sorted(STATIC)[k - 1])


def aggregator_update_times(plan, iteration_s: list[float], count: int) -> list[float]:
    """Reference: the real Aggregator driven event by event with fixed per-worker iteration times."""
    agg = Aggregator(plan)
    heap, seq, applied = [], 0, []
    for w in range(len(iteration_s)):
        assert agg.pull(w).ready
        heapq.heappush(heap, (iteration_s[w], seq, w))
        seq += 1
    while len(applied) < count:
        now, _, w = heapq.heappop(heap)
        effects = agg.push(w, plan.epoch).effects
        applied.extend(now for _ in effects.applies)
        ready = list(effects.released) + ([w] if agg.pull(w).ready else [])
        for r in ready:
            heapq.heappush(heap, (now + iteration_s[r], seq, r))
            seq += 1
    return applied[:count]


@pytest.mark.parametrize("mode,extra", [("ssgd", {}), ("asgd", {}), ("kofn", {"k": 3}), ("kofn", {"k": 2}),
                                         ("grouped", {}), ("ssp", {"staleness": 1})])
def test_simulator_applies_updates_when_the_aggregator_does(mode, extra):
    plan = plan_for_mode(mode, 4, epoch=1, **{k: v for k, v in extra.items() if k in ("k", "staleness")})
    expected = aggregator_update_times(plan, [BASE_S * f for f in STATIC], 40)
    sim = run(config(mode, plan={"mode": mode, **extra}), static_trace())
    assert np.allclose(update_times(sim)[:40], expected)


def test_exclude_switches_a_mid_run_straggler_out_and_back_in():
    trace = generators.transient(4, 300, worker=2, factor=4.0, start_frac=0.1, end_frac=0.3)
    result = simulate(config("exclude", iterations=300), trace)
    kinds = [e["kind"] for e in result.events]
    assert result.result["plan_switches"] == 2
    assert kinds.index("straggler_detected") < kinds.index("straggler_recovered")
    plans = [e for e in result.events if e["kind"] == "plan"]
    assert plans[0]["mode"] == "exclude" and plans[1]["mode"] == "ssgd"


def test_amp_strategy_switches_amp_on_for_the_straggler_and_it_speeds_up():
    trace = generators.transient(4, 300, worker=1, factor=3.0, start_frac=0.1, end_frac=0.9)
    sim = Simulation(config("amp", iterations=150, cost={"amp_time_factor": 0.5}), trace)
    result = sim.run()
    amp = [e for e in result.events if e["kind"] == "amp"]
    assert amp and amp[0]["worker"] == 1 and amp[0]["amp"] is True
    assert sim.amp[1] and not sim.amp[[0, 2, 3]].any()
    baseline = simulate(config("ssgd", iterations=150), trace)
    assert result.result["sim_s"] < baseline.result["sim_s"]


@pytest.mark.parametrize("scenario", generators.SCENARIOS + generators.HELD_OUT)
def test_generators_are_deterministic_per_seed_and_have_the_requested_shape(scenario):
    a = generators.generate(scenario, 12, 500, seed=3)
    assert a.rows() == generators.generate(scenario, 12, 500, seed=3).rows()
    assert a.workers == tuple(range(12)) and a.max_iteration == 500
    assert all(r.factor >= 1.0 for r in a.rows())
    if scenario not in ("transient", "flapping", "ramp", "recovering"):  # these draw only a worker, and another seed may draw the same
        assert a.rows() != generators.generate(scenario, 12, 500, seed=4).rows()


def test_held_out_shapes_stay_out_of_the_default_synthetic_set():
    assert not set(generators.HELD_OUT) & set(generators.SCENARIOS)
    with pytest.raises(ValueError, match="scenario='flap'.*flapping"):
        generators.generate("flap", 4, 10)


def test_a_flapping_worker_alternates_slow_and_fast_spans():
    trace = generators.flapping(4, 20, factor=3.0, slow=2, fast=2, start=4, worker=3)
    replay = trace.slowdown_for(3, 4)
    assert [replay.factor_at(i) for i in range(12)] == [1.0] * 4 + [3.0, 3.0, 1.0, 1.0] * 2
    assert all(trace.slowdown_for(w, 4).factor_at(i) == 1.0 for w in range(3) for i in range(20))


def test_a_ramp_rises_in_steps_to_its_factor_and_stays_there():
    replay = generators.ramp(4, 100, factor=3.0, over=40, step=2, worker=1).slowdown_for(1, 4)
    values = [replay.factor_at(i) for i in range(100)]
    assert values[0] == 1.0 and values[20] == pytest.approx(2.0) and values[40:] == [3.0] * 60
    assert all(b >= a for a, b in zip(values, values[1:]))


def test_jitter_slows_every_worker_within_its_amplitude_and_never_the_same_way_twice():
    trace = generators.jitter(4, 50, seed=1, amplitude=0.4)
    for w in range(4):
        values = [trace.slowdown_for(w, 4).factor_at(i) for i in range(50)]
        assert all(1.0 <= v <= 1.4 for v in values) and len(set(values)) > 40


def test_bursts_slow_one_worker_at_a_time_for_their_length():
    trace = generators.bursts(4, 60, seed=2, factor=3.0, length=3, every=10, start=5)
    slow = [[w for w in range(4) if trace.slowdown_for(w, 4).factor_at(i) > 1.0] for i in range(60)]
    for i in range(60):
        in_burst = i >= 5 and (i - 5) % 10 < 3
        assert len(slow[i]) == (1 if in_burst else 0)


def test_spikes_last_one_iteration_at_their_factor_and_hit_about_their_rate_of_iterations():
    trace = generators.spikes(4, 500, seed=1, factor=5.0, rate=0.05)
    values = np.array([[trace.slowdown_for(w, 4).factor_at(i) for w in range(4)] for i in range(500)])
    assert set(np.unique(values)) == {1.0, 5.0}
    assert 0.03 < (values == 5.0).mean() < 0.07
    spans = [len(list(run)) for w in range(4) for slow, run in itertools.groupby(values[:, w] == 5.0) if slow]
    assert max(spans) <= 3 and np.mean(spans) < 1.2  # back-to-back spikes only by chance (rate 0.05 twice in a row)


def test_a_transient_straggler_can_be_slow_from_the_first_iteration():
    replay = generators.transient(4, 100, factor=4.0, start_frac=0.0, end_frac=0.12, worker=1).slowdown_for(1, 4)
    assert [replay.factor_at(i) for i in (0, 11, 12, 99)] == [4.0, 4.0, 1.0, 1.0]


def test_a_recovering_worker_speeds_up_in_steps_to_full_speed_and_stays_there():
    replay = generators.recovering(4, 100, factor=3.0, over=30, step=3, worker=2).slowdown_for(2, 4)
    values = [replay.factor_at(i) for i in range(100)]
    assert values[0] == 3.0 and values[15] == pytest.approx(2.0) and values[30:] == [1.0] * 70
    assert all(b <= a for a, b in zip(values, values[1:]))


def test_pauses_slow_every_worker_together_for_one_iteration_in_every_period():
    trace = generators.pauses(4, 64, seed=5, factor=3.0, every=8)
    values = np.array([[trace.slowdown_for(w, 4).factor_at(i) for w in range(4)] for i in range(64)])
    assert (values == values[:, :1]).all()  # all workers alike: nobody straggles
    slow = np.flatnonzero(values[:, 0] == 3.0)
    assert len(slow) == 8 and set(np.diff(slow)) == {8} and set(np.unique(values)) == {1.0, 3.0}


def test_a_host_under_overlapping_contention_bursts_stays_slow_until_the_last_burst_ends():
    # seed 7 on 2 hosts draws bursts [11, 61), [31, 81), [38, 88) and [44, 94) on host 1 and [15, 65) on host 0
    trace = generators.contention(4, 100, seed=7, hosts=2)
    for worker in (1, 3):
        assert trace.steps[worker][:3] == ((0, 1.0), (11, 2.0), (94, 1.0))
    for worker in (0, 2):
        assert trace.steps[worker][:3] == ((0, 1.0), (15, 2.0), (65, 1.0))


@pytest.mark.parametrize("intervals, merged", [
    ([(5, 10), (0, 3)], [(0, 3), (5, 10)]),
    ([(0, 5), (5, 8)], [(0, 8)]),
    ([(0, 50), (10, 20), (40, 90)], [(0, 90)]),
])
def test_burst_intervals_join_where_they_overlap_or_touch(intervals, merged):
    assert generators.merged_intervals(intervals) == merged


@pytest.mark.parametrize("workers", [10, 37, 1000])
def test_stretching_ten_workers_replays_each_source_worker_rotated(workers):
    source = generators.heavy_tail(10, 200, seed=1)
    big = generators.stretch_workers(source, workers, seed=2)
    assert big.workers == tuple(range(workers)) and big.max_iteration == 200
    assert big.rows() == generators.stretch_workers(source, workers, seed=2).rows()
    src = source.for_run_workers(10)
    for w in (0, 9, workers - 1):
        replay = big.slowdown_for(w, workers)
        values = [replay.factor_at(i) for i in range(200)]
        original = [src[w % 10].factor_at(i) for i in range(200)]
        assert any(values == original[s:] + original[:s] for s in range(200))
        if w < 10:
            assert values == original


def test_factor_table_matches_the_trace_replay_rules():
    trace = generators.rotating(6, 300, seed=5, period=7)
    table = FactorTable(trace, 4, trace_workers="5,3,1,0", stretch=0.3)
    schedules = trace.for_run_workers(4, "5,3,1,0", 0.3)
    workers = np.repeat(np.arange(4), 400)
    iterations = np.tile(np.arange(400), 4)
    expected = [schedules[w].factor_at(int(i)) for w, i in zip(workers, iterations)]
    assert table.factors(workers, iterations).tolist() == expected


@pytest.mark.parametrize("run_workers,mapping,stretch", [(6, None, 1.0), (3, [2, 2, 0], 2.5), (4, "1,0,2,1", 0.07)])
def test_factor_table_matches_the_trace_for_any_mapping_and_rows_not_starting_at_zero(run_workers, mapping, stretch):
    # worker 0 starts at iteration 5, worker 1 at 0, worker 2 at 13; run workers beyond the trace replay no slowdown
    trace = Trace.from_rows([(5, 0, 2.0), (40, 0, 1.0), (0, 1, 1.5), (7, 1, 3.0), (13, 2, 4.0), (90, 2, 1.25)])
    table = FactorTable(trace, run_workers, trace_workers=mapping, stretch=stretch)
    schedules = trace.for_run_workers(run_workers, mapping, stretch)
    workers = np.repeat(np.arange(run_workers), 500)
    iterations = np.tile(np.arange(500), run_workers)
    expected = [schedules[w].factor_at(int(i)) for w, i in zip(workers, iterations)]
    assert table.factors(workers, iterations).tolist() == expected


def test_factor_table_refuses_what_the_trace_refuses():
    trace = Trace.from_rows([(0, 0, 2.0), (10, 0, 1.0), (0, 1, 1.0)])
    with pytest.raises(ValueError):
        FactorTable(trace, 2, trace_workers="0,7")  # 7 is not a trace worker
    with pytest.raises(ValueError):
        FactorTable(trace, 3, trace_workers="0,1")  # one entry per run worker


def test_fit_staleness_inverts_the_convergence_models_worth_of_stale_updates():
    from star.sim.calibrate import fit_staleness

    # 4 equal ASGD workers: every gradient is 3 updates stale; p = 0.25 needs 65 x 4 x 1.75 updates
    assert fit_staleness(65, 65 * 4 * 1.75, {"3": 1000}, 4) == pytest.approx(0.25, rel=1e-6)
    histogram = {0: 10, 2: 30, 3: 50, 7: 10}
    worth = sum(c / (1 + 0.4 * s) for s, c in histogram.items()) / 100
    assert fit_staleness(70, 70 * 4 / worth, histogram, 4) == pytest.approx(0.4, rel=1e-6)
    # with B_noise the efficiency of the small ASGD batch is accounted for before staleness
    eff = (1 + 128 / 256) / (1 + 128 / 64)
    assert fit_staleness(70, 70 * 4 / (eff * worth), histogram, 4, b_noise=128, batch_size=64) == pytest.approx(0.4, rel=1e-6)
    assert fit_staleness(70, 250, histogram, 4) == 0.0  # fewer updates than N x SSGD's: no staleness cost


def test_the_simulator_resizes_a_sharp_slowdown_at_the_report_not_at_the_period_end():
    """As the coordinator does (star.decision_clock): a report over the slowdown watch brings the decision
    forward; the decision periods' own schedule stays whole seconds."""
    trace = generators.transient(4, 200, worker=2, factor=3.0, start_frac=0.3, end_frac=0.9)
    result = simulate(config("batch", iterations=200, cost={"compute_noise_cv": 0.0}), trace)
    early = [e for e in result.events if e["kind"] == "early_decision" and "per_sample_ms" in e]  # slowdowns
    assert early and early[0]["workers"] == [2]
    t = early[0]["t"]
    assert abs(t - round(t)) > 1e-6  # between two period ends
    cut = [e for e in result.events if e["kind"] == "batch_sizes" and e["t"] == t]
    assert cut and cut[0]["sizes"]["2"] < min(cut[0]["sizes"][str(w)] for w in (0, 1, 3))
    woken = {e["t"] for e in result.events if e["kind"] == "early_decision"}  # this one, a confirming one, the start's
    timed = [e["t"] for e in result.events if e["kind"] in ("batch_sizes", "straggler_detected") and e["t"] not in woken]
    assert timed and all(abs(x - round(x)) < 1e-6 for x in timed)


@pytest.mark.parametrize("cut_at_once", [True, False])
def test_the_straggler_computes_the_iteration_after_its_slow_report_at_its_cut_size(monkeypatch, cut_at_once):
    """As a real worker does once the reply to the report that woke the decision carried the cut
    (star.decision_clock, star.policy.batch_queue.PendingBatch.shrinks). With control.batching.cut_at_once off (the
    control) it keeps its old size until the common iteration."""
    starts: list[tuple[int, int, int]] = []  # (worker, iteration, batch) of every start, restarts included
    original = Simulation._start_iteration

    def recording(self, workers, t0, pulled=None, restart=False):
        original(self, workers, t0, pulled, restart)
        starts.extend((int(w), int(self.iters[w]), int(self.cur_batch[w])) for w in workers)

    monkeypatch.setattr(Simulation, "_start_iteration", recording)
    trace = generators.transient(4, 200, worker=2, factor=3.0, start_frac=0.3, end_frac=0.9)
    result = simulate(config("batch", iterations=200, cost={"compute_noise_cv": 0.0},
                             control={"batching": {"cut_at_once": cut_at_once}}), trace)
    early = next(e for e in result.events if e["kind"] == "early_decision" and "per_sample_ms" in e)
    cut = next(e for e in result.events if e["kind"] == "batch_sizes" and e["t"] == early["t"])["sizes"]["2"]
    batches = {i: b for w, i, b in starts if w == 2}  # a restart overwrites the start it replaces
    first_cut = min(i for i, b in batches.items() if i >= SLOW_FROM and b == cut)
    # iteration 60 is the first at 3x; its report wakes the decision; 61 is computed after the reply
    assert first_cut == SLOW_FROM + 1 if cut_at_once else first_cut > SLOW_FROM + 1


SLOW_FROM = 60  # generators.transient(4, 200, start_frac=0.3): the first slow iteration


def test_the_simulator_sizes_a_straggler_from_the_start_when_its_third_report_arrives():
    """As the coordinator does (star.control_loop.ControlLoop.sizing_watch): with a worker 2.5x slow from the first
    iteration, the first batch sizes come with its third report (at 0.75 s: 3 x 0.25 s; the simulator looks at
    0.8 s), not at the period's end (1 s)."""
    trace = static_trace((1.0, 1.0, 1.0, 2.5))
    result = simulate(config("batch", iterations=40, cost={"compute_noise_cv": 0.0}), trace)
    first = next(e for e in result.events if e["kind"] == "batch_sizes")
    assert first["t"] < 1.0 and first["sizes"]["3"] < min(first["sizes"][str(w)] for w in (0, 1, 2))
    early = next(e for e in result.events if e["kind"] == "early_decision")
    assert early["t"] == first["t"] and early["workers"] == [3] and early["min_reports"] == 3


def test_a_round_with_a_cut_at_once_is_worth_a_whole_update():
    """The cut straggler's gradient stands for its whole place in the round (star.worker.worker.Worker._weigh), so
    batch sizing's rounds, cut ones included, each move the model one full update (with B_noise 0 and no AMP). Weighted
    by the samples computed, each cut round was worth its samples' share: fewer than one update per round."""
    trace = generators.transient(4, 200, worker=2, factor=3.0, start_frac=0.3, end_frac=0.9)
    result = simulate(config("batch", iterations=200, cost={"compute_noise_cv": 0.0}), trace)
    assert any(e["kind"] == "early_decision" and "per_sample_ms" in e for e in result.events)  # a cut at once
    assert result.result["batch_changes"] >= 1
    assert result.result["progress"] == pytest.approx(result.result["updates"], abs=1e-3)
