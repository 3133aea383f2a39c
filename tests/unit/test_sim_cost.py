"""Simulator cost and convergence pieces: host contention, resize cost, AMP's worth per update."""

from __future__ import annotations

import numpy as np
import pytest

from star.sim import Simulation, sim_config
from star.sim.config import CostConfig
from star.sim.cost import CostModel, shared_stretch
from star.sim.replay import FactorTable
from star.config import ConfigError
from star.traces import Trace

BASE_S = 0.1


def config(mode: str = "ssgd", cost: dict | None = None, convergence: dict | None = None, iterations: int = 60):
    return sim_config({
        "workers": 4, "iterations": iterations, "stop_at_target": False, "plan": {"mode": mode},
        "cost": {"base_compute_s": BASE_S, "model_bytes": 1.0, "bandwidth_bytes_per_s": 1e15, **(cost or {})},
        "convergence": {"updates_to_target": 1e6, "eval_period_s": 0.0, **(convergence or {})},
    })


def slow_worker(factor: float, worker: int = 3) -> Trace:
    rows = [(0, w, factor if w == worker else 1.0) for w in range(4)]
    return Trace.from_rows(rows + [(10_000, w, f) for _, w, f in rows])


def run(cfg, trace=None) -> Simulation:
    sim = Simulation(cfg, trace)
    sim.run()
    return sim


def model(**cost) -> CostModel:
    return CostModel(CostConfig(base_compute_s=BASE_S, **cost), FactorTable(None, 4), np.random.default_rng(0))


def test_workers_released_together_share_the_hosts_cores():
    shared = model(host_cores=2.0, workers_per_host=4)
    own = model()
    everyone, zeros = np.arange(4), np.zeros(4)
    args = (np.zeros(4, dtype=np.int64), np.zeros(4, dtype=bool), np.full(4, 64))
    assert shared.start(everyone, zeros, *args) == pytest.approx(np.full(4, 2 * BASE_S))
    assert own.start(everyone, zeros, *args) == pytest.approx(np.full(4, BASE_S))
    two_hosts = model(host_cores=2.0, workers_per_host=2)  # two workers per 2-core host: no contention
    assert two_hosts.start(everyone, zeros, *args) == pytest.approx(np.full(4, BASE_S))


def test_workers_released_together_with_uneven_batches_share_the_cores_as_each_finishes():
    """Processor sharing: the smallest batch finishes first and leaves its core to the rest, so uneven batches on a
    shared host cost their uneven share of its work, not the largest batch at the stretch of the busiest moment."""
    m = model(host_cores=2.0, workers_per_host=4)
    batches = np.array([28, 76, 74, 78])
    done = m.start(np.arange(4), np.zeros(4), np.zeros(4, dtype=np.int64), np.zeros(4, dtype=bool), batches)
    unit = BASE_S / 64
    # 4 on 2 cores until 28 samples are done (56 units), 3 on 2 until 74 (+69), then each alone: 127 and 129
    assert done == pytest.approx(unit * np.array([56, 127, 125, 129]))
    assert done.max() == pytest.approx(unit * 129)  # even batches: 128 units; the old uniform stretch gave 156


@pytest.mark.parametrize("cpu, hosts, others, expected", [
    ([1.0, 1.0, 1.0, 1.0], [0, 0, 0, 0], [0.0] * 4, [2.0] * 4),  # equal: the old uniform stretch (n / cores)
    ([1.0, 1.0, 2.0], [0, 0, 0], [0.0] * 3, [1.5, 1.5, 1.25]),
    ([2.0, 1.0, 3.0], [1, 1, 1], [0.5] * 3, [1.5, 1.75, 4 / 3]),  # a busy host mate counts as half a worker
    ([1.0, 1.0, 1.0, 1.0], [0, 0, 1, 1], [0.0] * 4, [1.0] * 4),  # two per 2-core host: nobody waits
])
def test_shared_stretch_is_each_workers_finishing_time_under_processor_sharing_over_its_cpu(cpu, hosts, others, expected):
    got = shared_stretch(np.array(cpu), np.array(hosts), 2.0, np.array(others))
    assert got == pytest.approx(expected)


def test_a_worker_that_mostly_waits_leaves_its_cores_to_the_others():
    m = model(host_cores=2.0, workers_per_host=4)
    one = (np.zeros(1, dtype=np.int64), np.zeros(1, dtype=bool), np.full(1, 64))
    m.start(np.arange(4), np.zeros(4), np.zeros(4, dtype=np.int64), np.zeros(4, dtype=bool), np.full(4, 64))
    for w in (1, 2, 3):  # each computed 0.2 s of its 2 s: duty 0.1
        m.start(np.array([w]), np.array([2.0]), *one)
    # worker 0 starting alone: k = 1 + 3 x 0.1 = 1.3 < 2 cores, no stretch
    assert m.start(np.array([0]), np.array([2.0]), *one) == pytest.approx([BASE_S])


def test_an_iteration_restarted_at_a_cut_batch_keeps_the_contention_of_its_start():
    """The engine's cut at once restarts an iteration at the moment it started: the same peers were computing,
    so its per-sample time is its start's (judged as a lone start it read as if they were idle: half the
    time here), and it pays the resize against the batch it ran before."""
    m = model(host_cores=2.0, workers_per_host=4, resize_s=0.01)
    everyone, zeros, off = np.arange(4), np.zeros(4, dtype=np.int64), np.zeros(4, dtype=bool)
    m.start(everyone, np.zeros(4), zeros, off, np.full(4, 64))
    # released together again 2 s later (each computed 0.2 s of 2 s: duty 0.1): 4 on 2 cores, stretched 2x
    assert m.start(everyone, np.full(4, 2.0), zeros, off, np.full(4, 64)) == pytest.approx(np.full(4, 2 * BASE_S))
    restarted = m.restart(np.array([0]), zeros[:1], off[:1], np.full(1, 32))
    assert restarted == pytest.approx([2 * BASE_S / 2 + 0.01])


def test_ssgd_rounds_on_a_shared_host_take_the_stretched_compute():
    shared = run(config(cost={"host_cores": 2.0, "workers_per_host": 4}))
    gaps = np.diff(shared.history._data[: shared.history.size])
    assert gaps == pytest.approx(np.full(len(gaps), 2 * BASE_S))


def test_on_a_shared_host_asgd_gains_the_cores_a_sleeping_straggler_frees_and_ssgd_does_not():
    """Against a clean run, a 4x straggler costs ASGD far less throughput on a shared host than on
    dedicated cores (the fast workers compute faster while it sleeps), and SSGD gains nothing."""
    def throughput(mode, cost, trace):
        sim = run(config(mode, cost=cost, iterations=200), trace)
        return sim.history.size / sim.history._data[sim.history.size - 1]

    shared = {"host_cores": 2.0, "workers_per_host": 4}
    loss = {name: 1 - throughput("asgd", cost, slow_worker(4.0)) / throughput("asgd", cost, None)
            for name, cost in (("shared", shared), ("own", {}))}
    assert loss["own"] == pytest.approx(1 - (3 + 1 / 4) / 4, abs=0.02)  # one worker at 1/4 speed
    assert loss["shared"] < loss["own"] - 0.1
    ssgd = throughput("ssgd", shared, slow_worker(4.0))
    assert ssgd == pytest.approx(throughput("ssgd", {}, slow_worker(4.0)) / 2, rel=0.01)  # the round waits for the straggler


def test_the_first_iteration_at_a_new_batch_size_pays_the_resize_cost_once():
    m = model(resize_s=0.05)
    w, amp = np.array([0]), np.zeros(1, dtype=bool)
    it = np.zeros(1, dtype=np.int64)
    assert m.start(w, np.array([0.0]), it, amp, np.array([64])) == pytest.approx([BASE_S])  # first: no resize
    assert m.start(w, np.array([1.0]), it, amp, np.array([32])) == pytest.approx([BASE_S / 2 + 0.05])
    assert m.start(w, np.array([2.0]), it, amp, np.array([32])) == pytest.approx([BASE_S / 2])


def test_only_each_worker_s_first_iteration_pays_the_warmup_factor():
    m = model(warmup_factor=1.8)
    w, amp, batch = np.array([0, 1]), np.zeros(2, dtype=bool), np.array([64, 64])
    first = m.start(w, np.zeros(2), np.array([0, 3]), amp, batch)  # worker 1 is past its first iteration
    assert first == pytest.approx([1.8 * BASE_S, BASE_S])
    assert m.start(w, np.ones(2), np.array([1, 4]), amp, batch) == pytest.approx([BASE_S, BASE_S])


def test_gradients_computed_under_amp_make_less_progress_when_amp_costs_accuracy():
    trace = slow_worker(3.0)
    cost = {"amp_time_factor": 0.5}
    full = run(config("amp", cost=cost, iterations=120), trace)
    half = run(config("amp", cost=cost, convergence={"amp_update_worth": 0.5}, iterations=120), trace)
    assert full.counts.get("amp", 0) >= 1  # AMP was switched on for the straggler
    assert half.history.size == full.history.size  # same timing: the worth changes progress only
    assert half.progress < full.progress - 0.5


def test_cost_and_convergence_fields_are_validated_by_name():
    with pytest.raises(ConfigError, match="cost.host_cores"):
        config(cost={"host_cores": -1.0})
    with pytest.raises(ConfigError, match="cost.workers_per_host"):
        config(cost={"workers_per_host": 0})
    with pytest.raises(ConfigError, match="cost.warmup_factor"):
        config(cost={"warmup_factor": 0.0})
    with pytest.raises(ConfigError, match="convergence.amp_update_worth"):
        config(convergence={"amp_update_worth": 1.5})


def test_selector_training_measures_shared_host_scenarios_with_the_contention_the_controller_sees():
    from star.plan import asgd, ssgd
    from star.sim.selector_training import Scenario, sample_scenarios, scenario_inputs
    from star.sim.selector_training import measure as measure_plans

    own = Scenario(factors=(1.0, 1.0, 1.0, 4.0), noise_cv=0.0, b_noise_ratio=0.0, comm_ratio=0.01, overhead_ratio=0.0, seed=0)
    shared = Scenario(**{**own.__dict__, "workers_per_host": 4, "cores_per_worker": 0.5})
    plans = [ssgd(range(4)), asgd(range(4))]
    (own_ssgd, own_asgd), (shared_ssgd, shared_asgd) = measure_plans(own, plans), measure_plans(shared, plans)
    assert shared_ssgd == pytest.approx(2 * own_ssgd, rel=0.05)  # a released round shares 2 cores among 4
    assert shared_asgd / shared_ssgd < own_asgd / own_ssgd  # the straggler's sleep frees cores for ASGD's fast workers
    assert scenario_inputs(shared)[0][0] == pytest.approx(2 * scenario_inputs(own)[0][0], rel=0.05)
    assert any(s.cores_per_worker > 0 for s in sample_scenarios(30, seed=0))
