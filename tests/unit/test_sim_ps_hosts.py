"""PS hosts in the simulator: the real traffic guard, pacing and re-placement act on simulated NICs,
and the controller gets the PS's noisy B_noise estimate instead of the true value."""

from __future__ import annotations

import numpy as np
import pytest

from star.errors import ConfigError
from star.sim import Simulation, sim_config, simulate
from star.sim import generators
from star.sim.ps_hosts import mean_over, next_slowdown, paced

# 8 workers, 5 MB pushes: about 135 pushes/s, 340 MB/s per direction on each of two shards' hosts.
BUSY = {"workers": 8, "iterations": 100_000, "stop_at_target": False, "plan": {"mode": "ssgd"},
        "cost": {"model_bytes": 5e6, "bandwidth_bytes_per_s": 1e9}}


def with_(base: dict, **extra) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


def spy_on_loop(sim: Simulation) -> list:
    """Every (PsInput, HostsInput) the control loop is given."""
    seen = []
    step = sim.loop.step

    def spy(now, reports, ps, hosts, woken_by=()):
        seen.append((ps, hosts))
        return step(now, reports, ps, hosts, woken_by)

    sim.loop.step = spy
    return seen


def rate(curve, t0: float, t1: float) -> float:
    """Updates per second between two evaluation times of a curve."""
    version = {round(t, 6): v for t, v, _ in curve}
    return (version[t1] - version[t0]) / (t1 - t0)


# ---------------------------------------------------------------- re-placement


def saturating_ps0(replace: bool) -> dict:
    """ps0's NIC is filled by other traffic from 10 s on; ps2 holds no shard and is idle."""
    return with_(BUSY, max_time_s=40.0,
                 ps_hosts={"shards": 2, "hosts": 3, "link_bytes_per_s": "1e9", "background_util": "0:0,10:1.0;0;0"},
                 placement={"move_cooldown_s": 5.0, "replace": replace})


def test_a_ps_host_saturated_by_background_traffic_gets_a_shard_moved_off_and_the_move_relieves_the_slowdown():
    sim = Simulation(sim_config(saturating_ps0(replace=True)))
    result = sim.run()
    kinds = [e["kind"] for e in result.events]
    started = next(e for e in result.events if e["kind"] == "ps_move_started")
    moved = next(e for e in result.events if e["kind"] == "ps_moved")
    assert kinds[0] == "placement" and result.events[0]["shards"] == {"0": "ps0", "1": "ps1"}
    assert (started["source"], started["target_host"]) == ("ps0", "ps2") and "saturated" in started["reason"]
    assert 10 < started["t"] < moved["t"] < 25 and moved["shard"] == started["shard"]
    assert "ps0" not in {sim.ps_hosts.names[h] for h in sim.ps_hosts.shard_host}
    assert result.result["ps_moved"] == 1
    stuck = simulate(sim_config(saturating_ps0(replace=False)))
    assert not any(e["kind"].startswith("ps_move") for e in stuck.events)
    before = rate(result.curve, 2.0, 8.0)
    assert rate(stuck.curve, 30.0, 38.0) < 0.5 * before  # the saturated link slows every round ...
    assert rate(result.curve, 30.0, 38.0) == pytest.approx(before, rel=0.05)  # ... until the shard has moved
    assert sim.push_s == pytest.approx(sim.cost.transfer_s)  # no transfer is slowed any more


def test_a_moving_shard_slows_its_transfers_until_the_move_is_due():
    sim = Simulation(sim_config(with_(saturating_ps0(replace=True), max_time_s=15.0,
                                      ps_hosts={"move_s": 100.0, "move_slowdown": 3.0})))
    sim.run()
    assert sim.ps_hosts.moves  # under way (due at 100 s): still served from ps0, transfers 3x slower on top
    factor = (sim.push_s - sim.config.cost.latency_s) / (sim.config.cost.model_bytes / sim.config.cost.bandwidth_bytes_per_s)
    assert factor == pytest.approx(3.0 * max(sim.ps_hosts.slowdown))


# ---------------------------------------------------------------- traffic guard and pacing


def straggling_auto(background: str) -> dict:
    """auto with one 3x straggler from about 12 s on: the selector wants k-of-N (~2.7x the gradient rate)."""
    return {"workers": 8, "iterations": 1000, "stop_at_target": False, "plan": {"mode": "auto"},
            "control": {"batch": False, "amp": False},
            "ps_hosts": {"shards": 1, "hosts": 1, "link_bytes_per_s": "2.5e8", "background_util": background}}


def test_a_plan_switch_that_would_overload_a_ps_nic_is_deferred_by_the_traffic_guard():
    trace = generators.transient(8, 1000, seed=0)
    free = simulate(sim_config(straggling_auto("0")), trace)
    assert any(e["kind"] == "plan" and e["mode"] == "kofn" for e in free.events)  # an idle NIC lets the switch through
    busy = simulate(sim_config(straggling_auto("0:0,12:0.6")), trace)
    deferred = [e for e in busy.events if e["kind"] == "plan_deferred"]
    assert deferred and all(e["mode"] == "kofn" for e in deferred)
    assert all(e["predicted_util"]["ps0"] > 0.85 for e in deferred) and "ps0" in deferred[0]["reason"]
    assert not any(e["kind"] == "plan" and e["mode"] == "kofn" for e in busy.events)
    assert busy.result["plan_deferred"] == len(deferred)


def test_pushes_are_paced_when_a_ps_nic_runs_hot_and_the_nic_then_runs_at_the_pace_target():
    link = 7e7  # the job alone would need ~80 MB/s
    sim = Simulation(sim_config(with_(BUSY, max_time_s=20.0, cost={"model_bytes": 5e5},
                                      ps_hosts={"shards": 2, "hosts": 1, "link_bytes_per_s": str(link)})))
    seen = spy_on_loop(sim)
    result = sim.run()
    pace = [e for e in result.events if e["kind"] == "pace"]
    assert len(pace) == 1 and pace[0]["t"] <= 3.0 and "ps0" in pace[0]["reason"]
    budget = 0.75 * link / 8  # pace_target_util x link, shared by the 8 workers
    assert sim.plan.push_pace_bytes_per_s == pytest.approx(budget)
    assert seen[1][1].states["ps0"].nic_util >= 0.9  # hot before ...
    late = [hosts.states["ps0"].nic_util for _, hosts in seen[8:]]
    assert max(late) < 0.85 and np.mean(late) == pytest.approx(0.75, abs=0.05)  # ... at the budget after
    assert sim.push_s == pytest.approx(sim.cost.transfer_s)  # congestion gone: pacing took its place


def test_paced_pushes_start_no_sooner_than_the_budget_allows_after_the_previous_one():
    arrive = np.array([1.0, 1.0, 5.0, 2.0])
    previous = np.array([0.0, 0.95, 4.0, np.inf])  # inf: a pull SSP held, no push to pace against
    assert paced(arrive, previous, 0.1).tolist() == [1.0, 1.05, 5.0, 2.0]


# ---------------------------------------------------------------- the link model


def test_a_saturated_links_slowdown_settles_where_the_jobs_traffic_fills_what_the_link_leaves():
    link, background, share = 1e9, 0.6, 0.05
    compute_s, transfer_s, pushes_per_round_bytes = 0.05, 0.01, 8 * 5e6

    def traffic(s: float) -> float:  # a round-per-iteration job: its traffic falls as transfers slow
        return pushes_per_round_bytes / (compute_s + 2 * transfer_s * s)

    s = 1.0
    for _ in range(200):
        s = next_slowdown(s, traffic(s), link, background, share)
    assert traffic(s) == pytest.approx((1 - background) * link, rel=1e-3)
    assert next_slowdown(4.0, 0.1 * link, link, 0.0, share) == 1.0  # demand that fits: no slowdown
    assert next_slowdown(1.0, 0.1 * link, link, 1.5, share) == pytest.approx(2.0)  # a link full of others' traffic leaves 5%


def test_background_is_averaged_over_the_period_a_sampler_reads():
    steps = ((0.0, 0.0), (10.0, 1.0), (20.0, 0.5))
    assert mean_over(steps, 9.0, 11.0) == pytest.approx(0.5)
    assert mean_over(steps, 19.0, 21.0) == pytest.approx(0.75)
    assert mean_over(steps, 30.0, 31.0) == 0.5 and mean_over(((5.0, 1.0),), 0.0, 10.0) == 0.5


# ---------------------------------------------------------------- noise scale


@pytest.mark.parametrize("b_noise,workers", [(200.0, 8), (1000.0, 16)])
def test_the_noise_scale_the_controller_gets_is_the_ps_estimate_and_converges_near_the_true_one(b_noise, workers):
    sim = Simulation(sim_config({"workers": workers, "iterations": 3000, "stop_at_target": False,
                                 "convergence": {"b_noise": b_noise}, "cost": {"compute_noise_cv": 0.2}}))
    seen = spy_on_loop(sim)
    sim.run()
    fed = np.array([ps.b_noise for ps, _ in seen])
    later = fed[len(fed) // 2:]
    assert np.median(later) == pytest.approx(b_noise, rel=0.15)  # the PS's EMA estimate, unbiased enough ...
    assert later.min() > 0.3 * b_noise and np.std(later) > 0.03 * b_noise  # ... but noisy, as a real one is
    assert len(set(fed.tolist())) > len(fed) // 2


def test_without_noise_the_controller_is_fed_zero():
    sim = Simulation(sim_config({"workers": 8, "iterations": 500, "stop_at_target": False}))
    seen = spy_on_loop(sim)
    sim.run()
    assert seen and all(ps.b_noise == 0.0 for ps, _ in seen) and not sim.noise.on


# ---------------------------------------------------------------- without the PS-host section


@pytest.mark.parametrize("mode", ["ssgd", "kofn", "auto"])
def test_without_ps_hosts_the_loop_gets_no_layout_and_idle_ps_hosts_change_nothing(mode):
    data = {"workers": 8, "iterations": 600, "stop_at_target": False, "plan": {"mode": mode},
            "cost": {"compute_noise_cv": 0.3}}
    trace = generators.transient(8, 600, seed=1)
    plain = Simulation(sim_config(data), trace)
    seen = spy_on_loop(plain)
    a = plain.run()
    assert all(ps.shard_hosts is None and not hosts.states for ps, hosts in seen) and plain.ps_hosts is None
    assert "ps_moved" not in a.result and not any(e["kind"] == "placement" for e in a.events)
    b = simulate(sim_config(with_(data, ps_hosts={"shards": 4, "hosts": 2, "link_bytes_per_s": "1e15"})), trace)
    skip = ("wall_s", "controller_s")
    assert {k: v for k, v in b.result.items() if k not in skip + ("ps_moved", "plan_deferred", "pace")} == \
        {k: v for k, v in a.result.items() if k not in skip}
    assert b.curve == a.curve and [e for e in b.events if e["kind"] != "placement"] == a.events


# ---------------------------------------------------------------- config


@pytest.mark.parametrize("section,field,value", [
    ("ps_hosts", "background_util", "0;0;0"),
    ("ps_hosts", "background_util", "0:0.5,0:1"),
    ("ps_hosts", "background_util", "0:x"),
    ("ps_hosts", "link_bytes_per_s", "-1"),
    ("ps_hosts", "move_slowdown", 0.5),
    ("ps_hosts", "min_link_share", 0.0),
    ("convergence", "noise_norm_dof", 0.0),
])
def test_a_bad_ps_host_or_noise_setting_names_its_field(section, field, value):
    data = {section: {field: value, **({"shards": 2} if section == "ps_hosts" else {})}}
    with pytest.raises(ConfigError) as error:
        sim_config(data)
    assert error.value.field == f"{section}.{field}"


def test_shard_bytes_need_shards_and_default_to_an_even_split():
    with pytest.raises(ConfigError) as error:
        sim_config({"ps_hosts": {"shard_bytes": "1;2"}})
    assert error.value.field == "ps_hosts.shard_bytes"
    config = sim_config({"ps_hosts": {"shards": 4}, "cost": {"model_bytes": 8.0}})
    assert config.ps_hosts.shard_sizes(config.cost.model_bytes) == (2.0, 2.0, 2.0, 2.0)
    assert config.ps_hosts.backgrounds() == (((0.0, 0.0),),) * 2
