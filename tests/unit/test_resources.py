"""Resource sampling: link speeds (NIC speed vs a shaping qdisc), the job's NIC, a live sample of this host."""

from __future__ import annotations

import socket
import time
from collections import namedtuple

import pytest

from star.resources import (HostSample, LinkBusyMeter, NicSample, ResourceSampler, busy_share, link_bytes_per_s, nic_for_address,
                            shaped_rate_bytes_per_s)

Addr = namedtuple("Addr", "family address")


def test_a_tbf_or_htb_rate_is_the_shaped_link_speed_and_other_qdiscs_are_not():
    qdiscs = [{"kind": "tbf", "root": True, "options": {"rate": 2500000, "burst": 32767}},
              {"kind": "netem", "options": {"delay": {"delay": 0.005}}}]
    assert shaped_rate_bytes_per_s(qdiscs) == 2_500_000
    assert shaped_rate_bytes_per_s([{"kind": "htb", "options": {"rate": 1_000_000}}, *qdiscs]) == 1_000_000
    assert shaped_rate_bytes_per_s([{"kind": "noqueue"}, {"kind": "fq_codel", "options": {}}]) is None


@pytest.mark.parametrize("speed_mbit, shaped, expected", [(10_000, None, 1.25e9), (10_000, 2.5e6, 2.5e6), (0, None, None),
                                                          (0, 1e6, 1e6), (100, 1e9, 12.5e6)])
def test_link_speed_is_the_lower_of_nic_speed_and_shaper(speed_mbit, shaped, expected):
    assert link_bytes_per_s(speed_mbit, shaped) == expected


def test_the_job_nic_is_the_interface_holding_the_advertised_address():
    addresses = {"lo": [Addr(socket.AF_INET, "127.0.0.1")], "eth0": [Addr(socket.AF_INET, "10.1.2.3")],
                 "eth1": [Addr(socket.AF_INET6, "fe80::1%eth1")]}
    assert nic_for_address("10.1.2.3", addresses) == "eth0"
    assert nic_for_address("fe80::1", addresses) == "eth1"
    assert nic_for_address("127.0.0.5", addresses) == "lo"
    assert nic_for_address("node-a.example", addresses) is None
    assert nic_for_address("10.9.9.9", addresses) is None


def test_a_host_sample_survives_its_dict_form_at_the_precision_it_is_published():
    sample = HostSample("10.0.0.1", 1700000000.5, 2.0, 8, 55.5, 20.5, 40.0, 123456,
                        (NicSample("eth0", 1e6, 2e6, 1.25e9, busy_share=0.9375), NicSample("lo", 1.0, 1.0, None)), "eth0")
    again = HostSample.from_dict(sample.to_dict())
    assert again == sample and again.foreign_cpu_percent == pytest.approx(35.0)
    assert again.nic().busiest_bytes_per_s == 2e6 and again.nic("lo").busy_share is None


def test_sampling_this_host_gives_rates_over_the_interval_and_the_loopback_nic():
    sampler = ResourceSampler("127.0.0.1", job_address="127.0.0.1")
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        client.sendall(b"x" * 2_000_000)
        received = 0
        while received < 2_000_000:
            received += len(peer.recv(1 << 20))
        client.close()
        peer.close()
    sample = sampler.sample()
    assert sample.job_nic == "lo" and sample.interval_s > 0
    assert sample.nic().rx_bytes_per_s * sample.interval_s >= 2_000_000
    assert 0 <= sample.cpu_percent <= 100 and sample.cpu_count >= 1 and sample.memory_available_bytes > 0


@pytest.mark.parametrize("ticks, link, expected", [
    ([1.0, 0.0, 1.0, 0.0], 1.0, 0.5),  # busy every other tick
    ([1.4, 1.0, 0.9, 0.7], 1.0, 0.9),  # a shaper's burst reads above the rate: a tick counts at most once
    ([0.25] * 8, 1.0, 0.25),  # a steady quarter of the link
    ([], 1.0, 0.0), ([5.0], 0.0, 0.0),
])
def test_busy_share_averages_each_ticks_busier_direction_capped_at_the_link(ticks, link, expected):
    assert busy_share(ticks, link) == pytest.approx(expected)


def test_alternating_push_and_pull_phases_read_as_a_busy_link_though_each_direction_averages_half():
    """A push phase (rx at the link's rate) then a pull phase (tx at the rate), 10 ticks each."""
    link = 1000.0
    readings = iter([(0, 0)] + [(i * 100, 0) for i in range(1, 11)] + [(1000, i * 100) for i in range(1, 11)])
    clock = [0.0]
    meter = LinkBusyMeter("eth0", counters=lambda: next(readings), clock=lambda: clock[0])
    reading = meter.tick(None)
    for _ in range(20):
        clock[0] += 0.1
        reading = meter.tick(reading)
    ticks = meter.take()
    assert len(ticks) == 20 and meter.take() == []
    rx_average = tx_average = 1000 * 1.0 / 2.0 / link  # 1000 bytes each way over 2 s
    assert max(rx_average, tx_average) == pytest.approx(0.5)
    assert busy_share(ticks, link) == pytest.approx(1.0)


def test_a_sampler_with_busy_ticks_measures_the_job_nic_and_its_thread_ends_on_close():
    sampler = ResourceSampler("127.0.0.1", job_address="127.0.0.1", busy_tick_s=0.01)
    try:
        time.sleep(0.1)
        nic = sampler.sample().nic()
        assert nic is not None and nic.name == "lo"
        # loopback has no known speed, so no share is claimed for it
        assert nic.busy_share is None
        assert sampler._busy is not None and sampler._busy._thread.is_alive()
    finally:
        sampler.close()
    assert not sampler._busy._thread.is_alive()


def test_a_host_sample_survives_the_wire_with_its_busy_share_and_without_one():
    from star.rpc.common import sample_from_proto, sample_to_proto

    sample = HostSample("10.0.0.1", 1700000000.5, 2.0, 8, 55.5, 20.5, 40.0, 123456,
                        (NicSample("eth0", 1e6, 2e6, 1.25e9, busy_share=0.0), NicSample("lo", 1.0, 1.0, None)), "eth0")
    again = sample_from_proto(sample_to_proto(sample))
    assert again.nic().busy_share == 0.0 and again.nic("lo").busy_share is None


def test_ticks_nobody_takes_are_kept_only_up_to_the_limit():
    readings = iter((i * 10, 0) for i in range(10))
    clock = iter(float(i) for i in range(10))
    meter = LinkBusyMeter("eth0", counters=lambda: next(readings), clock=lambda: next(clock), keep_ticks=3)
    reading = meter.tick(None)
    for _ in range(9):
        reading = meter.tick(reading)
    assert meter.take() == [10.0, 10.0, 10.0] and meter.take() == []
