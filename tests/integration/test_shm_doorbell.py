"""The same-host doorbell on real PS daemons: it carries shared-memory headers with the same bits and
the same refusals as the PushShm/PullShm RPCs, a hang-up cancels a waiting pull as a cancelled RPC
does, and a broken socket falls back to the RPCs without losing a call."""

from __future__ import annotations

import socket
import time

import grpc
import pytest
import torch

from star.rpc import star_pb2 as pb
from star.rpc.doorbell import Doorbell, DoorbellRpcError, encode
from star.rpc.ps_client import PSClient
from star.rpc.security import TOKEN_ENV, Credentials
from tests.integration.refusal_checks import observed_state, push_header

pytestmark = pytest.mark.integration

NUMEL = 1000
TOKEN = "d" * 24 + "-doorbell-test-token"


def _clients(addresses, doorbells, credentials=None):
    """One shared-memory worker per entry of `doorbells` (whether it may ring), registered under an SSGD plan."""
    initial = torch.arange(NUMEL, dtype=torch.float32) / NUMEL
    clients = [PSClient(addresses, worker_id=w, transport="shm", credentials=credentials, doorbell=d)
               for w, d in enumerate(doorbells)]
    for client in clients:
        client.wait_ready(30)
        client.init_if_needed(initial, client.register(NUMEL))
    clients[0].configure(pb_plan(len(clients)))
    return initial, clients


def pb_plan(workers: int):
    from star.plan import ssgd

    return ssgd(list(range(workers)), epoch=1)


def _doorbell_path(client: PSClient, index: int = 0) -> str:
    bell = client.doorbells[index]
    assert bell is not None, "the PS offered no doorbell"
    return bell.path


def test_doorbell_and_rpc_headers_give_identical_bits(cluster):
    addresses = cluster.start_ps(2, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", "0.5", "--optimizer.momentum", "0.9"))
    initial, (bell, rpc) = _clients(addresses, (True, False))
    assert all(b is not None for b in bell.doorbells) and all(b is None for b in rpc.doorbells)
    reference = torch.nn.Parameter(initial.clone())
    optimizer = torch.optim.SGD([reference], lr=0.5, momentum=0.9)
    pulled = [torch.empty(NUMEL), torch.empty(NUMEL)]
    for step in range(3):
        for client, out in zip((bell, rpc), pulled):
            client.pull(out, timeout_s=10)
        assert torch.equal(pulled[0], pulled[1]) and torch.equal(pulled[0], reference.detach())
        grads = [torch.randn(NUMEL, generator=torch.Generator().manual_seed(10 * step + w)) for w in range(2)]
        for client, grad in zip((bell, rpc), grads):
            client.push(grad, iteration=step, timeout_s=10)
        reference.grad = (grads[0] + grads[1]) * 0.5
        optimizer.step()
    bell.pull(pulled[0], timeout_s=10)
    assert torch.equal(pulled[0], reference.detach())
    stats = bell.stats()
    assert [s.counters["shm_pushes"] for s in stats] == [6, 6]  # both workers' pushes came through mailboxes
    assert [s.counters["doorbell_calls"] for s in stats] == [7, 7]  # the ringing worker's 3 pushes and 4 pulls
    for client in (bell, rpc):
        client.close()


def test_every_refusal_is_refused_alike_by_the_doorbell(cluster, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    addresses = cluster.start_ps(1)
    good = Credentials(token=TOKEN)
    _, (worker, other) = _clients(addresses, (True, True), credentials=good)
    params = torch.empty(NUMEL)
    worker.pull(params, timeout_s=10)
    box = worker.mailboxes[0]
    path = _doorbell_path(worker)

    def ring(request: pb.DoorbellRequest, token: str = TOKEN):
        bell = Doorbell(path, token)
        try:
            return bell.ring(request, fallback=lambda: pytest.fail("the doorbell broke instead of answering")).result()
        finally:
            bell.close()

    before = observed_state(worker, NUMEL)
    cases = {  # name: (gradient put in the mailbox, header fields, status, text in the message)
        "wrong_length": (torch.ones(NUMEL), dict(numel=NUMEL - 1), grpc.StatusCode.INVALID_ARGUMENT, "shard's length"),
        "stale_epoch": (torch.ones(NUMEL), dict(plan_epoch=0), grpc.StatusCode.FAILED_PRECONDITION, "older than the plan"),
        "nan": (torch.full((NUMEL,), float("nan")), {}, grpc.StatusCode.INVALID_ARGUMENT, "NaN/Inf"),
        "unknown_worker": (torch.ones(NUMEL), dict(worker_id=7), grpc.StatusCode.NOT_FOUND, "unknown worker 7"),
        "stamp_out_of_turn": (torch.ones(NUMEL), dict(shm_seq=10**6), grpc.StatusCode.INVALID_ARGUMENT, "does not match"),
        "no_stamp": (torch.ones(NUMEL), dict(shm_seq=0), grpc.StatusCode.INVALID_ARGUMENT, "shm_seq > 0"),
    }
    for name, (gradient, overrides, code, text) in cases.items():
        seq = box.put_push(gradient)
        with pytest.raises(DoorbellRpcError) as error:
            ring(pb.DoorbellRequest(push=push_header(NUMEL, **{"shm_seq": seq, **overrides}), timeout_s=10))
        assert error.value.code() == code and text in error.value.details(), name
    for request, code, text in [
        (pb.PullRequest(worker_id=5, shm=True), grpc.StatusCode.NOT_FOUND, "unknown worker 5"),
        (pb.PullRequest(worker_id=1, shm=False), grpc.StatusCode.FAILED_PRECONDITION, "no shared-memory mailbox"),
    ]:
        with pytest.raises(DoorbellRpcError) as error:
            ring(pb.DoorbellRequest(pull=request, timeout_s=10))
        assert error.value.code() == code and text in error.value.details()
    for token, text in (("w" * 32, "wrong job token"), ("", "missing job token")):  # refused at the hello
        with pytest.raises(DoorbellRpcError) as error:
            Doorbell(path, token)
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED and text in error.value.details()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:  # a push before any hello
        raw.connect(path)
        raw.sendall(encode(pb.DoorbellRequest(push=push_header(NUMEL, shm_seq=box.put_push(torch.ones(NUMEL))))))
        assert raw.recv(4096) and raw.recv(4096) == b""  # an UNAUTHENTICATED reply, then the PS hangs up
    after = observed_state(worker, NUMEL)
    assert after[0] == before[0] and torch.equal(after[1], before[1])  # no refusal changed anything
    assert worker.push(torch.ones(NUMEL), iteration=0, timeout_s=10)[0].status == "pending"  # still usable
    for client in (worker, other):
        client.close()


def _waiting_pulls(client: PSClient) -> int:
    return client.stats()[0].waiting_pulls


def test_a_pull_whose_caller_hangs_up_is_forgotten_and_a_timed_out_one_keeps_the_connection(cluster):
    addresses = cluster.start_ps(2)
    _, (first, second) = _clients(addresses, (True, True))
    params = torch.empty(NUMEL)
    for client in (first, second):
        client.pull(params, timeout_s=10)
    first.push(torch.ones(NUMEL), iteration=0, timeout_s=10)  # round 1 now waits for the second worker
    bell = Doorbell(_doorbell_path(first), None)
    bell.ring(pb.DoorbellRequest(pull=pb.PullRequest(worker_id=0, shm=True), timeout_s=30), fallback=lambda: None)
    deadline = time.monotonic() + 10
    while _waiting_pulls(first) != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _waiting_pulls(first) == 1
    bell.close()  # the caller hangs up: the PS forgets its pull, as when an RPC is cancelled
    while _waiting_pulls(first) != 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _waiting_pulls(first) == 0
    with pytest.raises(grpc.RpcError) as error:  # each PS's own deadline: DEADLINE_EXCEEDED, connections kept
        first.pull(params, timeout_s=0.3)
    assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert all(b is not None and not b.closed for b in first.doorbells)
    rang = [s.counters["doorbell_calls"] for s in first.stats()]
    second.push(torch.ones(NUMEL), iteration=0, timeout_s=10)
    first.pull(params, timeout_s=10)
    assert [v.version for v in first.views] == [1, 1]
    # both PSs' answers to the timed-out pull were read, so both doorbells rang again (none stayed busy)
    assert [s.counters["doorbell_calls"] for s in first.stats()] == [r + 2 for r in rang]  # second's push, first's pull
    for client in (first, second):
        client.close()


def test_a_broken_doorbell_falls_back_to_the_rpcs_without_losing_the_call(cluster):
    addresses = cluster.start_ps(1, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", "1.0", "--optimizer.momentum", "0"))
    initial, (first, second) = _clients(addresses, (True, True))
    params = torch.empty(NUMEL)
    for client in (first, second):
        client.pull(params, timeout_s=10)
    first.doorbells[0]._sock.shutdown(socket.SHUT_RDWR)  # the connection breaks under the client
    grads = [torch.full((NUMEL,), 1.0), torch.full((NUMEL,), 3.0)]
    assert first.push(grads[0], iteration=0, timeout_s=10)[0].status == "pending"  # went by PushShm instead
    assert first.doorbells[0].closed
    second.push(grads[1], iteration=0, timeout_s=10)
    first.pull(params, timeout_s=10)
    assert torch.allclose(params, initial - 2.0)  # both gradients, averaged
    stats = first.stats()[0]
    assert stats.counters["shm_pushes"] == 2 and stats.counters["doorbell_calls"] == 3  # both first pulls, the second push
    for client in (first, second):
        client.close()
