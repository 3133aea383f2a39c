"""Tree aggregation through real PS processes and real relays: a tree round updates the model
exactly as a flat SSGD round, with half the pushes and bytes reaching the PSs; a child whose
parent is gone pushes for itself; and a malformed contribution is refused. (A whole job with trees:
the ssgd case of test_launch.py; a frozen parent: test_faults.py.)"""

from __future__ import annotations

import threading

import grpc
import pytest
import torch

from star.plan import ssgd, with_tree
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CHANNEL_OPTIONS
from star.rpc.ps_client import PSClient
from star.rpc.security import Credentials
from star.worker.relay import RelayClient, RelayServer, sum_into

pytestmark = pytest.mark.integration

NUMEL = 1000
LR = 0.5


def _start(addresses: list[str], relays: dict[int, RelayServer], workers=range(4)) -> tuple[torch.Tensor, list[PSClient]]:
    initial = torch.arange(NUMEL, dtype=torch.float32) / NUMEL
    clients = [PSClient(addresses, worker_id=w) for w in workers]
    for w, client in zip(workers, clients):
        client.wait_ready(30)
        replies = client.register(NUMEL, relay_address=relays[w].address if w in relays else "")
        client.init_if_needed(initial, replies)
    clients[0].configure(with_tree(ssgd(list(workers), epoch=1), 2))
    return initial, clients


def _child_sends(client: PSClient, relay: RelayClient, grad: torch.Tensor, results: dict) -> None:
    parent, _ = client.tree_role
    results[client.worker_id] = relay.contribute(parent, grad, client.pulled_key, 8, poll_s=0.5, timeout_s=30)


def _parent_pushes(client: PSClient, relay: RelayServer, grad: torch.Tensor) -> None:
    _, children = client.tree_role
    taken = relay.inbox.collect(client.pulled_key, children, wait_s=10)
    total = grad.clone()
    batch = 8 + sum_into(total, taken)
    client.push(total, iteration=0, timeout_s=10, batch_size=batch, contributors=[c.worker for c in taken])
    relay.inbox.settle(taken, pushed=True)


def test_a_tree_round_equals_a_flat_ssgd_round_with_half_the_pushes(cluster):
    addresses = cluster.start_ps(2, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", str(LR)))
    credentials = Credentials.load()
    relays = {w: RelayServer("127.0.0.1", NUMEL, credentials, max_workers=16) for w in (0, 2)}
    child_links = {w: RelayClient(w, credentials) for w in (1, 3)}
    try:
        initial, clients = _start(addresses, relays)
        grads = [torch.randn(NUMEL, generator=torch.Generator().manual_seed(w)) for w in range(4)]
        params = torch.empty(NUMEL)
        for client in clients:
            client.pull(params, timeout_s=10)
        assert clients[1].tree_role == (relays[0].address, ())
        assert clients[0].tree_role == ("", (1,)) and clients[2].tree_role == ("", (3,))
        results: dict = {}
        threads = [threading.Thread(target=_child_sends, args=(clients[w], child_links[w], grads[w], results)) for w in (1, 3)]
        threads += [threading.Thread(target=_parent_pushes, args=(clients[w], relays[w], grads[w])) for w in (0, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert all(results[w].taken for w in (1, 3)), results
        observer = torch.empty(NUMEL)
        clients[0].pull(observer, timeout_s=10, observer=True)
        torch.testing.assert_close(observer, initial - LR * sum(grads) / 4, rtol=1e-6, atol=1e-6)
        for stats in clients[0].stats():
            assert (stats.version, stats.accepted, stats.applied, stats.pending) == (1, 4, 4, 0)
            assert stats.pushes_received == 2 and stats.counters["tree_pushes"] == 2
            assert stats.push_bytes_received == 2 * (stats.range_end - stats.range_start) * 4
    finally:
        for relay in relays.values():
            relay.stop()
        for link in child_links.values():
            link.close()


def test_a_child_whose_parent_is_gone_is_told_to_push_itself_and_the_round_still_closes(cluster):
    addresses = cluster.start_ps(1)
    credentials = Credentials.load()
    parent = RelayServer("127.0.0.1", NUMEL, credentials, max_workers=16)
    link = RelayClient(1, credentials)
    try:
        _, clients = _start(addresses, {0: parent}, workers=range(2))
        params = torch.empty(NUMEL)
        for client in clients:
            client.pull(params, timeout_s=10)
        parent.stop()  # the parent's process died
        target, _ = clients[1].tree_role
        result = link.contribute(target, torch.ones(NUMEL), clients[1].pulled_key, 8, poll_s=0.5, timeout_s=10)
        assert not result.taken and ("unreachable" in result.reason or "stopping" in result.reason)
        clients[1].push(torch.ones(NUMEL), iteration=0, timeout_s=10)
        clients[0].push(torch.ones(NUMEL), iteration=0, timeout_s=10)
        (stats,) = clients[0].stats()
        assert (stats.version, stats.applied, stats.pushes_received) == (1, 2, 2)
    finally:
        parent.stop()
        link.close()



@pytest.mark.parametrize("header, detail", [
    (dict(worker_id=1, numel=NUMEL + 1), "numel"),
    (dict(worker_id=99, numel=NUMEL), "worker_id 99"),
])
def test_a_malformed_contribution_is_refused_naming_the_field(header, detail):
    credentials = Credentials.load()
    relay = RelayServer("127.0.0.1", NUMEL, credentials, max_workers=16)
    channel = credentials.channel(relay.address, CHANNEL_OPTIONS)
    try:
        with pytest.raises(grpc.RpcError) as error:
            pb_grpc.WorkerRelayStub(channel).Contribute(iter([pb.ContributeRequest(header=pb.ContributeHeader(**header))]),
                                                        timeout=10)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and detail in error.value.details()
    finally:
        channel.close()
        relay.stop()
