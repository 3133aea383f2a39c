"""The socket channel on real PS daemons: a worker that maps no shared memory (another host's, as far as
it knows) moves its payloads as raw TCP bytes, with the same bits and the same refusals as a same-host
worker's mailbox, a hang-up cancels a waiting pull, and a broken connection falls back to gRPC."""

from __future__ import annotations

import socket
import time

import grpc
import pytest
import torch

from star.plan import ssgd
from star.rpc import star_pb2 as pb
from star.rpc.doorbell import DoorbellRpcError, encode, raise_for, receive_reply, say_hello
from star.rpc.ps_client import PSClient
from star.rpc.security import TOKEN_ENV, Credentials
from star.rpc.socket_channel import SocketChannel
from tests.integration.refusal_checks import observed_state, push_header

pytestmark = pytest.mark.integration

NUMEL = 1000
TOKEN = "s" * 24 + "-socket-channel-token"


def _clients(addresses, transports, wire="float32", credentials=None):
    """One worker per entry of `transports`, registered under an SSGD plan over all of them."""
    initial = torch.arange(NUMEL, dtype=torch.float32) / NUMEL
    clients = [PSClient(addresses, worker_id=w, transport=t, wire=wire, credentials=credentials)
               for w, t in enumerate(transports)]
    for client in clients:
        client.wait_ready(30)
        client.init_if_needed(initial, client.register(NUMEL))
    clients[0].configure(ssgd(list(range(len(clients))), epoch=1))
    return initial, clients


def _train(clients, steps: int) -> list[torch.Tensor]:
    """`steps` SSGD rounds with seeded gradients; every worker's pulled parameters after each."""
    pulled = []
    for step in range(steps):
        outs = [torch.empty(NUMEL) for _ in clients]
        for client, out in zip(clients, outs):
            client.pull(out, timeout_s=10)
        pulled.append(outs)
        for w, client in enumerate(clients):
            client.push(torch.randn(NUMEL, generator=torch.Generator().manual_seed(10 * step + w)), iteration=step, timeout_s=10)
    outs = [torch.empty(NUMEL) for _ in clients]
    for client, out in zip(clients, outs):
        client.pull(out, timeout_s=10)
    return pulled + [outs]


def test_socket_channel_and_shared_memory_give_identical_bits(cluster):
    addresses = cluster.start_ps(2, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", "0.5", "--optimizer.momentum", "0.9"))
    initial, (remote, local) = _clients(addresses, ("socket", "shm"))
    assert remote.transport_used == "socket" and local.transport_used == "shm"
    reference = torch.nn.Parameter(initial.clone())
    optimizer = torch.optim.SGD([reference], lr=0.5, momentum=0.9)
    for step, (via_socket, via_shm) in enumerate(_train([remote, local], 3)):
        assert torch.equal(via_socket, via_shm) and torch.equal(via_socket, reference.detach()), step
        if step < 3:
            grads = [torch.randn(NUMEL, generator=torch.Generator().manual_seed(10 * step + w)) for w in range(2)]
            reference.grad = (grads[0] + grads[1]) * 0.5
            optimizer.step()
    stats = remote.stats()
    assert [s.counters["socket_pushes"] for s in stats] == [3, 3]
    assert [s.counters["socket_pulls"] for s in stats] == [4, 4]
    assert [s.counters["shm_pushes"] for s in stats] == [6, 6]  # the socket's bytes land in a mailbox too
    for client in (remote, local):
        client.close()


def test_bf16_on_the_socket_channel_rounds_as_the_grpc_bf16_wire_does(cluster):
    addresses = cluster.start_ps(1)
    _, (over_socket, also_socket, over_grpc) = _clients(addresses, ("socket", "socket", "grpc"), wire="bfloat16")
    assert over_socket.transport_used == "socket" and over_grpc.transport_used == "grpc"
    for step, (a, b, c) in enumerate(_train([over_socket, also_socket, over_grpc], 3)):
        assert torch.equal(a, c) and torch.equal(b, c), step
        assert torch.equal(a, a.to(torch.bfloat16).float())  # what came over a bf16 wire is bf16-representable
    stats = over_socket.stats()[0]
    assert stats.counters["socket_pushes"] == 6 and stats.counters["bf16_pushes"] == 9
    assert stats.counters["socket_pulls"] == 8
    assert stats.counters["bf16_pull_roundings"] == 4  # one per version (3 steps and the start), not one per pull
    for client in (over_socket, also_socket, over_grpc):
        client.close()


def test_every_refusal_is_refused_alike_by_the_socket_channel(cluster, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    addresses = cluster.start_ps(1)
    good = Credentials(token=TOKEN)
    _, (worker, other) = _clients(addresses, ("socket", "socket"), credentials=good)
    params = torch.empty(NUMEL)
    worker.pull(params, timeout_s=10)
    channel = worker.sockets[0]
    assert channel is not None
    host, port = addresses[0].rpartition(":")[0], channel._sock.getpeername()[1]

    before = observed_state(worker, NUMEL)
    cases = {  # name: (gradient sent, header fields, status, text in the message)
        "wrong_length": (torch.ones(NUMEL - 1), dict(numel=NUMEL - 1), grpc.StatusCode.INVALID_ARGUMENT, "shard's length"),
        "stale_epoch": (torch.ones(NUMEL), dict(plan_epoch=0), grpc.StatusCode.FAILED_PRECONDITION, "older than the plan"),
        "nan": (torch.full((NUMEL,), float("nan")), {}, grpc.StatusCode.INVALID_ARGUMENT, "NaN/Inf"),
        "unknown_worker": (torch.ones(NUMEL), dict(worker_id=7), grpc.StatusCode.NOT_FOUND, "unknown worker 7"),
    }
    for name, (gradient, overrides, code, text) in cases.items():
        probe = SocketChannel(host, port, good)
        with pytest.raises(DoorbellRpcError) as error:
            probe.push(push_header(NUMEL, **overrides), gradient, timeout_s=10)
        assert error.value.code() == code and text in error.value.details(), name
        probe.close()
    probe = SocketChannel(host, port, good)
    with pytest.raises(DoorbellRpcError) as error:
        probe.pull(pb.PullRequest(worker_id=5), torch.empty(NUMEL), timeout_s=10)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND and "unknown worker 5" in error.value.details()
    probe.close()
    with socket.create_connection((host, port)) as raw:  # a dtype whose payload length is unknown: refused, then hung up
        say_hello(raw, TOKEN, "test")
        raw.sendall(encode(pb.DoorbellRequest(push=push_header(NUMEL, dtype="float64"))))
        with pytest.raises(DoorbellRpcError) as error:
            raise_for(receive_reply(raw, "test"))
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "float64" in error.value.details()
        assert raw.recv(4096) == b""
    for token, text in (("w" * 32, "wrong job token"), (None, "missing job token")):  # refused at the hello
        with pytest.raises(DoorbellRpcError) as error:
            SocketChannel(host, port, Credentials(token=token))
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED and text in error.value.details()
    with socket.create_connection((host, port)) as raw:  # a push before any hello
        raw.sendall(encode(pb.DoorbellRequest(push=push_header(NUMEL))))
        assert raw.recv(4096) and raw.recv(4096) == b""  # an UNAUTHENTICATED reply, then the PS hangs up
    after = observed_state(worker, NUMEL)
    assert after[0] == before[0] and torch.equal(after[1], before[1])  # no refusal changed anything
    assert worker.push(torch.ones(NUMEL), iteration=0, timeout_s=10)[0].status == "pending"  # still usable
    for client in (worker, other):
        client.close()


def test_a_pull_whose_caller_hangs_up_is_forgotten(cluster):
    addresses = cluster.start_ps(1)
    _, (first, second) = _clients(addresses, ("socket", "socket"))
    params = torch.empty(NUMEL)
    for client in (first, second):
        client.pull(params, timeout_s=10)
    first.push(torch.ones(NUMEL), iteration=0, timeout_s=10)  # the round now waits for the second worker
    channel = first.sockets[0]
    assert channel is not None
    channel._sock.sendall(encode(pb.DoorbellRequest(pull=pb.PullRequest(worker_id=0, shm=True), timeout_s=30)))
    deadline = time.monotonic() + 10
    while first.stats()[0].waiting_pulls != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert first.stats()[0].waiting_pulls == 1
    channel.close()  # the caller hangs up: the PS forgets its pull, as when an RPC is cancelled
    while first.stats()[0].waiting_pulls != 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert first.stats()[0].waiting_pulls == 0
    for client in (first, second):
        client.close()


def test_a_broken_connection_falls_back_to_grpc_without_losing_the_push(cluster):
    addresses = cluster.start_ps(1, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", "1.0", "--optimizer.momentum", "0"))
    initial, (first, second) = _clients(addresses, ("socket", "socket"))
    params = torch.empty(NUMEL)
    for client in (first, second):
        client.pull(params, timeout_s=10)
    first.sockets[0]._sock.shutdown(socket.SHUT_RDWR)  # the connection breaks under the client
    assert first.push(torch.full((NUMEL,), 1.0), iteration=0, timeout_s=10)[0].status == "pending"  # went by gRPC
    assert first.sockets[0] is None and first.transport_used == "grpc"
    second.push(torch.full((NUMEL,), 3.0), iteration=0, timeout_s=10)
    first.pull(params, timeout_s=10)
    assert torch.allclose(params, initial - 2.0)  # both gradients, averaged
    stats = first.stats()[0]
    assert stats.counters["socket_pushes"] == 1  # the second worker's; the first's went by gRPC
    for client in (first, second):
        client.close()


def test_a_ps_without_the_socket_channel_leaves_auto_on_grpc_and_refuses_socket(cluster):
    addresses = cluster.start_ps(1, "--no-socket-channel")
    with PSClient(addresses, worker_id=0, transport="socket") as client:
        client.wait_ready(30)
        with pytest.raises(RuntimeError, match="transport=socket: PS 0 .* offered none"):
            client.register(NUMEL)
