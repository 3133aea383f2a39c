"""Placement and re-placement on synthetic host snapshots: one hot host, one slow NIC, ties,
more shards than hosts, co-located jobs, the round-robin baseline, and moves with hysteresis."""

from __future__ import annotations

import dataclasses

import pytest

from star.config import ConfigError
from star.node import node_labels, place_shards
from star.config import JobConfig, from_dict
from star.placement import HostState, PlacementConfig, ReplacementPolicy, host_state, place, round_robin
from star.resources import HostSample, NicSample

GBIT = 1.25e8  # bytes/s
MB = 1e6


def host(name: str, cpu: float = 0.2, foreign: float = 0.0, nic_used: float = 0.0, link: float = 10 * GBIT, cpus: int = 8,
         can_host_ps: bool = True) -> HostState:
    return HostState(name, cpu, foreign, cpus, nic_used, link, can_host_ps)


def test_a_hot_host_gets_no_shard_and_the_event_says_why():
    hosts = [host("a"), host("hot", cpu=0.97), host("c")]
    placement = place([2 * MB, 2 * MB], hosts, workers=4, config=PlacementConfig())
    assert "hot" not in placement.hosts
    assert sorted(placement.hosts) == ["a", "c"]
    assert "CPU saturated" in placement.skipped["hot"]


def test_a_slow_nic_is_avoided_because_the_shard_would_saturate_it():
    hosts = [host("a", link=2.5 * MB), host("b"), host("c")]  # a: a 20 Mbit/s link
    placement = place([0.25 * MB, 0.25 * MB], hosts, workers=4, config=PlacementConfig())
    assert "a" not in placement.hosts
    assert placement.predicted_util["a"] == pytest.approx(0.2)  # its own load, no shard traffic added


def test_round_robin_is_blind_to_headroom():
    hosts = [host("a", link=2.5 * MB), host("b"), host("c")]
    assert round_robin(2, hosts).hosts == ("a", "b")
    assert place([1.0, 1.0], hosts, 4, PlacementConfig(strategy="round_robin")).hosts == ("a", "b")


def test_equal_hosts_share_the_shards_evenly_by_bytes():
    hosts = [host("a"), host("b")]
    placement = place([4 * MB, 1 * MB, 1 * MB, 1 * MB, 1 * MB], hosts, workers=4, config=PlacementConfig())
    per_host = {h: sum(b for b, p in zip([4, 1, 1, 1, 1], placement.hosts) if p == h) for h in ("a", "b")}
    assert per_host == {"a": 4, "b": 4}


@pytest.mark.parametrize("shards", [3, 5, 8])
def test_more_shards_than_hosts_places_every_shard_and_balances_their_count(shards):
    hosts = [host("a"), host("b"), host("c")]
    placement = place([1 * MB] * shards, hosts, workers=4, config=PlacementConfig())
    counts = [placement.hosts.count(h) for h in ("a", "b", "c")]
    assert sum(counts) == shards and max(counts) - min(counts) <= 1


def test_ties_are_broken_by_host_order_so_placement_is_deterministic():
    hosts = [host("x"), host("y")]
    assert place([1 * MB], hosts, 4, PlacementConfig()).hosts == ("x",)
    assert place([1 * MB], list(reversed(hosts)), 4, PlacementConfig()).hosts == ("y",)


def test_small_differences_in_load_do_not_pile_every_shard_on_one_host():
    hosts = [host("a", cpu=0.53), host("b", cpu=0.61)]
    assert sorted(place([1 * MB, 1 * MB], hosts, 4, PlacementConfig()).hosts) == ["a", "b"]


def test_a_clearly_emptier_host_takes_the_shards_even_if_bytes_are_unbalanced():
    hosts = [host("busy", cpu=0.6), host("idle", cpu=0.05)]
    assert place([1 * MB, 1 * MB], hosts, 4, PlacementConfig()).hosts == ("idle", "idle")


def test_a_host_with_heavy_co_located_jobs_is_avoided():
    hosts = [host("shared", cpu=0.7, foreign=0.65), host("b", cpu=0.75)]
    placement = place([1 * MB], hosts, 4, PlacementConfig())
    assert placement.hosts == ("b",)
    assert "co-located" in placement.skipped["shared"]


def test_when_every_host_is_unfit_the_least_loaded_still_takes_the_shards():
    hosts = [host("a", cpu=0.99), host("b", cpu=0.95)]
    placement = place([1 * MB], hosts, 4, PlacementConfig())
    assert placement.hosts == ("b",)
    assert "every host is unfit" in placement.reasons[0]


def test_a_host_ruled_out_by_configuration_gets_no_shard():
    hosts = [host("a", can_host_ps=False), host("b", cpu=0.8)]
    assert place([1 * MB], hosts, 4, PlacementConfig()).hosts == ("b",)


def test_host_state_reads_the_job_nic_and_counts_only_other_jobs_as_co_located():
    sample = HostSample("h", 0.0, 1.0, 4, cpu_percent=80.0, job_cpu_percent=50.0, memory_percent=10.0,
                        memory_available_bytes=1, nics=(NicSample("eth0", 2 * MB, 1 * MB, 2.5 * MB), NicSample("lo", 9e9, 9e9, None)),
                        job_nic="eth0")
    state = host_state(sample, PlacementConfig())
    assert state.cpu_util == pytest.approx(0.8) and state.foreign_cpu_util == pytest.approx(0.3)
    assert state.nic_util == pytest.approx(0.8)


def test_a_nic_of_unknown_speed_counts_as_the_configured_default():
    sample = HostSample("h", 0.0, 1.0, 4, 10.0, 0.0, 10.0, 1, (NicSample("lo", 1.0, 1.0, None),), "lo")
    assert host_state(sample, PlacementConfig(unknown_link_bytes_per_s=5.0)).link_bytes_per_s == 5.0


@pytest.mark.parametrize("field, value", [("strategy", "random"), ("saturated_util", 0.0), ("persist_n", 0),
                                          ("expected_iterations_per_s", -1.0)])
def test_bad_placement_config_fails_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=f"placement.{field}"):
        PlacementConfig(**{field: value})


# ---- star node's use of it ----------------------------------------------------------------


def test_nodes_that_share_an_address_get_distinct_labels():
    assert node_labels(["10.0.0.1", "10.0.0.2"]) == ["10.0.0.1", "10.0.0.2"]
    assert node_labels(["127.0.0.1", "127.0.0.1"]) == ["127.0.0.1#0", "127.0.0.1#1"]


def _published(address: str, link: float | None, cpu: float = 10.0, can_host_ps: bool = True) -> dict:
    sample = HostSample(address, 0.0, 2.0, 2, cpu, 0.0, 10.0, 1, (NicSample("eth0", 0.0, 0.0, link),), "eth0")
    return {"address": address, "sample": sample.to_dict(), "can_host_ps": can_host_ps}


def test_node_zero_places_shards_off_the_capped_node_and_round_robin_does_not():
    config = from_dict(JobConfig, {"workers": 4, "ps": 2})
    hosts = [_published("10.0.0.1", 1.25e9), _published("10.0.0.2", 2.5e6), _published("10.0.0.3", 1.25e9)]
    ranks, placement = place_shards(config, 121_674, hosts)
    assert ranks == [0, 2] and placement.strategy == "headroom"
    round_robin_config = dataclasses.replace(config, placement=PlacementConfig(strategy="round_robin"))
    assert place_shards(round_robin_config, 121_674, hosts)[0] == [0, 1]


def test_node_zero_only_places_shards_on_nodes_that_may_host_them():
    config = from_dict(JobConfig, {"workers": 2, "ps": 2})
    hosts = [_published("10.0.0.1", 1.25e9, can_host_ps=False), _published("10.0.0.2", 1.25e9)]
    assert place_shards(config, 1000, hosts)[0] == [1, 1]


# ---- re-placement -----------------------------------------------------------------------------


def _policy(**overrides) -> ReplacementPolicy:
    return ReplacementPolicy(PlacementConfig(persist_n=3, move_cooldown_s=30.0, **overrides))


def test_a_shard_moves_only_after_its_host_stayed_saturated_for_persist_n_decisions():
    policy = _policy()
    hot = {"a": host("a", nic_used=2.4 * MB, link=2.5 * MB), "b": host("b")}
    assert policy.decide(0.0, ["a"], hot, [1 * MB]) is None
    assert policy.decide(1.0, ["a"], hot, [1 * MB]) is None
    move = policy.decide(2.0, ["a"], hot, [1 * MB])
    assert move is not None and (move.shard, move.source, move.target) == (0, "a", "b")
    assert "saturated" in move.reason


def test_one_normal_sample_resets_the_streak():
    policy = _policy()
    hot = {"a": host("a", cpu=0.97), "b": host("b")}
    calm = {"a": host("a", cpu=0.3), "b": host("b")}
    for t, hosts in enumerate([hot, hot, calm, hot, hot]):
        assert policy.decide(float(t), ["a"], hosts, [1 * MB]) is None


def test_no_move_when_no_other_host_is_clearly_better():
    policy = _policy()
    both_hot = {"a": host("a", cpu=0.95), "b": host("b", cpu=0.85)}
    for t in range(5):
        assert policy.decide(float(t), ["a"], both_hot, [1 * MB]) is None


def test_after_a_move_the_cooldown_holds_the_next_one():
    policy = _policy()
    hot = {"a": host("a", cpu=0.97), "b": host("b", cpu=0.97), "c": host("c"), "d": host("d")}
    moves = [policy.decide(float(t), ["a", "b"], hot, [1 * MB, 1 * MB]) for t in range(6)]
    assert sum(m is not None for m in moves) == 1
    assert policy.decide(40.0, ["a", "b"], hot, [1 * MB, 1 * MB]) is not None


def test_a_host_whose_saturation_pacing_hides_still_counts_as_saturated():
    policy = _policy()
    paced = {"a": host("a", nic_used=1.8 * MB, link=2.5 * MB), "b": host("b")}  # 72%: under the limit, but paced
    moves = [policy.decide(float(t), ["a"], paced, [1 * MB], pressured=frozenset({"a"})) for t in range(3)]
    assert moves[:2] == [None, None] and moves[2] is not None and moves[2].target == "b"
    assert "paced" in moves[2].reason


def test_a_link_busy_all_the_time_in_alternating_directions_counts_as_saturated():
    """Measured on a 10 Mbit/s PS link (30 Nov): pushes then pulls, busier direction 61-96% over 2 s, busy
    92-99% of 50 ms ticks. The byte average alone never reached 90%, so the shard never moved."""
    policy = _policy()
    alternating = {"a": host("a", nic_used=0.75 * 1.25 * MB, link=1.25 * MB), "b": host("b")}
    busy = {"a": dataclasses.replace(alternating["a"], nic_busy_share=0.96), "b": host("b")}
    assert [policy.decide(float(t), ["a"], alternating, [0.5 * MB]) for t in range(5)] == [None] * 5
    moves = [policy.decide(float(t), ["a"], busy, [0.5 * MB]) for t in range(5, 8)]
    assert moves[:2] == [None, None] and moves[2] is not None and moves[2].target == "b"
    assert "busy 96% of the time" in moves[2].reason


def test_a_busy_share_under_the_limit_leaves_a_shard_where_it_is():
    policy = _policy()
    half_busy = {"a": host("a", nic_used=0.4 * 1.25 * MB, link=1.25 * MB), "b": host("b")}
    half_busy["a"] = dataclasses.replace(half_busy["a"], nic_busy_share=0.6)
    assert [policy.decide(float(t), ["a"], half_busy, [0.5 * MB]) for t in range(6)] == [None] * 6


def test_host_state_carries_the_job_nics_busy_share_and_zero_where_it_was_not_measured():
    nics = (NicSample("eth0", 0.5 * MB, 0.9 * MB, 1.25 * MB, busy_share=0.93), NicSample("eth1", 1.0, 1.0, 1e9))
    sample = HostSample("h", 0.0, 2.0, 2, 10.0, 0.0, 10.0, 1, nics, "eth0")
    state = host_state(sample, PlacementConfig())
    assert state.nic_busy_share == 0.93 and state.nic_saturation == 0.93 and state.nic_util == pytest.approx(0.72)
    assert host_state(dataclasses.replace(sample, job_nic="eth1"), PlacementConfig()).nic_busy_share == 0.0


def test_placement_without_cpu_awareness_ignores_cpu_that_hosts_share():
    sample = HostSample("h", 0.0, 1.0, 2, cpu_percent=99.0, job_cpu_percent=10.0, memory_percent=10.0, memory_available_bytes=1)
    state = host_state(sample, PlacementConfig(cpu_aware=False))
    assert state.cpu_util == 0.0 and state.foreign_cpu_util == 0.0


def test_replacement_can_be_switched_off():
    policy = _policy(replace=False)
    hot = {"a": host("a", cpu=0.99), "b": host("b")}
    assert all(policy.decide(float(t), ["a"], hot, [1 * MB]) is None for t in range(5))
