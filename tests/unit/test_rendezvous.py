"""Who a `star node` is: torchrun's, Slurm's or explicit variables, with errors naming the variable."""

from __future__ import annotations

import pytest

from star.rendezvous import RendezvousError, identify, route_address

TORCHRUN = {"TORCHELASTIC_RUN_ID": "job7", "TORCHELASTIC_RESTART_COUNT": "1", "GROUP_RANK": "2", "GROUP_WORLD_SIZE": "3",
            "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400", "TORCHELASTIC_USE_AGENT_STORE": "True"}
SLURM = {"SLURM_NODEID": "1", "SLURM_NNODES": "4", "SLURM_JOB_ID": "99", "MASTER_ADDR": "node01", "MASTER_PORT": "29500"}


def test_torchrun_names_the_node_by_group_rank_and_its_agents_host_the_store():
    node = identify(TORCHRUN)
    assert (node.rank, node.nodes, node.launcher) == (2, 3, "torchrun")
    assert (node.store_host, node.store_port, node.store_is_external, node.hosts_store) == ("10.0.0.1", 29400, True, False)
    assert node.run_id == "job7-1"  # a torchrun restart never reads the previous attempt's keys


def test_torchrun_with_several_processes_per_node_is_refused():
    with pytest.raises(RendezvousError, match="nproc-per-node 1"):
        identify({**TORCHRUN, "LOCAL_WORLD_SIZE": "2"})


def test_slurm_names_the_node_by_nodeid_and_node_zero_hosts_the_store():
    node = identify(SLURM)
    assert (node.rank, node.nodes, node.launcher, node.store_is_external) == (1, 4, "slurm", False)
    assert identify({**SLURM, "SLURM_NODEID": "0"}).hosts_store


def test_explicit_values_win_and_need_rank_and_nodes():
    node = identify({}, rank=0, nodes=2, store="127.0.0.1:29555")
    assert (node.rank, node.nodes, node.store_host, node.store_port, node.hosts_store) == (0, 2, "127.0.0.1", 29555, True)
    with pytest.raises(RendezvousError, match="--node.rank"):
        identify({}, store="127.0.0.1:1")


@pytest.mark.parametrize("env, kwargs, message", [
    ({k: v for k, v in SLURM.items() if k != "MASTER_ADDR"}, {}, "MASTER_ADDR"),
    ({**SLURM, "SLURM_NNODES": "four"}, {}, "SLURM_NNODES='four'"),
    ({}, {"rank": 3, "nodes": 2, "store": "h:1"}, "outside 0..1"),
    ({}, {"rank": 0, "nodes": 2, "store": "no-port"}, "host:port"),
])
def test_bad_rendezvous_input_names_the_variable(env, kwargs, message):
    with pytest.raises(RendezvousError, match=message):
        identify(env, **kwargs)


def test_the_advertised_address_is_the_one_that_routes_to_the_store():
    assert route_address("127.0.0.1") == "127.0.0.1"


def test_a_rank_is_claimed_once_per_run_and_a_second_claim_is_refused():
    """Two `star node`s given one --node.rank both started its PSs; the second now learns the rank is taken."""
    import socket

    from star.rendezvous import NodeIdentity, Store

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    host = Store(NodeIdentity(0, 2, "127.0.0.1", port, False, "manual", "manual"), timeout_s=10.0)
    joining = Store(NodeIdentity(1, 2, "127.0.0.1", port, False, "manual", "manual"), timeout_s=10.0)
    assert host.claim("rank/0") and joining.claim("rank/1")
    assert not joining.claim("rank/1") and not host.claim("rank/0")
    later = Store(NodeIdentity(1, 2, "127.0.0.1", port, False, "manual-1", "manual"), timeout_s=10.0)  # another run
    assert later.claim("rank/1")
