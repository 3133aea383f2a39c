"""The PS daemon as a real process: exact SSGD updates, and every bad input refused without a state change."""

from __future__ import annotations

import math
import subprocess
import sys

import grpc
import numpy as np
import pytest
import torch

from star.flat import MAX_CHUNK_BYTES, shard_ranges
from star.plan import asgd, ssgd
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CHANNEL_OPTIONS
from star.rpc.ps_client import PSClient

pytestmark = pytest.mark.integration

NUMEL = 1000


def _setup(addresses, workers=(0, 1), numel=NUMEL, plan=None):
    """Register every worker, initialise the PSs with 0..numel-1, configure the plan."""
    initial = torch.arange(numel, dtype=torch.float32) / numel
    clients = [PSClient(addresses, worker_id=w) for w in workers]
    for client in clients:
        client.wait_ready(30)
        replies = client.register(numel)
        client.init_if_needed(initial, replies)
    clients[0].configure(plan or ssgd(list(workers), epoch=1))
    return initial, clients


def _observe(client: PSClient, numel: int = NUMEL) -> torch.Tensor:
    out = torch.empty(numel)
    client.pull(out, timeout_s=10, observer=True)
    return out


def _state(client: PSClient) -> list[tuple]:
    return [(s.version, s.accepted, s.applied, s.dropped, s.pending) for s in client.stats()]


def test_ssgd_round_equals_local_sgd_step_on_mean_gradient(cluster):
    addresses = cluster.start_ps(2, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", "0.5", "--optimizer.momentum", "0.9"))
    initial, clients = _setup(addresses)
    grads = [torch.randn(NUMEL, generator=torch.Generator().manual_seed(w)) for w in range(2)]
    reference = torch.nn.Parameter(initial.clone())
    optimizer = torch.optim.SGD([reference], lr=0.5, momentum=0.9)
    params = torch.empty(NUMEL)
    for step in range(3):
        for client in clients:
            client.pull(params, timeout_s=10)
        for w, client in enumerate(clients):
            client.push(grads[w] * (step + 1), iteration=step, timeout_s=10)
        reference.grad = (grads[0] + grads[1]) * (step + 1) / 2
        optimizer.step()
    after = _observe(clients[0])
    torch.testing.assert_close(after, reference.detach(), rtol=1e-6, atol=1e-6)
    assert [s.version for s in clients[0].stats()] == [3, 3]


@pytest.mark.parametrize("rule, momentum", [("matched", 0.8), ("fixed", 0.9)])
def test_an_asynchronous_plan_steps_with_the_momentum_its_rule_gives(cluster, rule, momentum):
    """Two workers under ASGD add momentum of their own: 'matched' steps at 1 - 2 x (1 - 0.9) = 0.8."""
    addresses = cluster.start_ps(2, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", "0.5", "--optimizer.momentum", "0.9",
                                               "--optimizer.async_momentum", rule))
    initial, clients = _setup(addresses, plan=asgd([0, 1], epoch=1))
    reference = torch.nn.Parameter(initial.clone())
    optimizer = torch.optim.SGD([reference], lr=0.5, momentum=momentum)
    params = torch.empty(NUMEL)
    for step in range(3):
        for w, client in enumerate(clients):
            gradient = torch.randn(NUMEL, generator=torch.Generator().manual_seed(10 * step + w))
            client.pull(params, timeout_s=10)
            client.push(gradient, iteration=step, timeout_s=10)
            reference.grad = gradient / 2  # each update is one gradient over the plan's 2 workers
            optimizer.step()
    torch.testing.assert_close(_observe(clients[0]), reference.detach(), rtol=1e-6, atol=1e-6)


def test_pull_blocks_until_the_ssgd_round_closes(cluster):
    addresses = cluster.start_ps(1)
    _, clients = _setup(addresses)
    params = torch.empty(NUMEL)
    for client in clients:
        client.pull(params, timeout_s=10)
    clients[0].push(torch.ones(NUMEL), iteration=0, timeout_s=10)
    with pytest.raises(grpc.RpcError) as blocked:
        clients[0].pull(params, timeout_s=0.5)
    assert blocked.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    clients[1].push(torch.ones(NUMEL), iteration=0, timeout_s=10)
    views = clients[0].pull(params, timeout_s=10)
    assert views[0].version == 1


def test_observer_below_min_version_gets_the_header_alone(cluster):
    """An evaluator polls for a version with headers only; the parameters move once it is there."""
    addresses = cluster.start_ps(2)
    _, clients = _setup(addresses)
    params = torch.empty(NUMEL)
    for client in clients:
        client.pull(params, timeout_s=10)
    for client in clients:
        client.push(torch.ones(NUMEL), iteration=0, timeout_s=10)
    observer = PSClient(addresses, worker_id=0)
    observer.register(NUMEL)
    untouched = torch.full((NUMEL,), -7.0)
    views = observer.pull(untouched, timeout_s=10, observer=True, min_version=2)
    assert [v.version for v in views] == [1, 1]
    assert torch.equal(untouched, torch.full((NUMEL,), -7.0))  # no shard sent its parameters
    served = torch.full((NUMEL,), -7.0)
    views = observer.pull(served, timeout_s=10, observer=True, min_version=1)
    assert [v.version for v in views] == [1, 1]
    torch.testing.assert_close(served, _observe(clients[0]), rtol=0, atol=0)
    assert not torch.equal(served, torch.full((NUMEL,), -7.0))
    observer.close()


# ---------------------------------------------------------------- bad input


def _raw_push(address: str, header: pb.PushHeader, chunks: list[tuple[int, bytes]]):
    channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
    stub = pb_grpc.ParameterServerStub(channel)

    def messages():
        yield pb.PushRequest(header=header)
        for offset, data in chunks:
            yield pb.PushRequest(chunk=pb.TensorChunk(offset=offset, data=data))

    try:
        return stub.Push(messages(), timeout=10)
    finally:
        channel.close()


def _header(**overrides) -> pb.PushHeader:
    fields = dict(worker_id=0, plan_epoch=1, base_version=0, iteration=0, dtype="float32", numel=NUMEL)
    fields.update(overrides)
    return pb.PushHeader(**fields)


def _payload(values: np.ndarray) -> list[tuple[int, bytes]]:
    return [(0, values.astype("<f4").tobytes())]


BAD_PUSHES = {
    "wrong_shard_length": (dict(numel=NUMEL - 1), np.ones(NUMEL - 1), grpc.StatusCode.INVALID_ARGUMENT, "shard's length"),
    "short_payload": (dict(), np.ones(NUMEL - 5), grpc.StatusCode.INVALID_ARGUMENT, "expected the shard length"),
    "wrong_dtype": (dict(dtype="float16"), np.ones(NUMEL), grpc.StatusCode.INVALID_ARGUMENT, "dtype"),
    "unknown_worker": (dict(worker_id=7), np.ones(NUMEL), grpc.StatusCode.NOT_FOUND, "unknown worker 7"),
    "stale_epoch": (dict(plan_epoch=0), np.ones(NUMEL), grpc.StatusCode.FAILED_PRECONDITION, "older than the plan"),
    "future_epoch": (dict(plan_epoch=9), np.ones(NUMEL), grpc.StatusCode.INVALID_ARGUMENT, "newer than the plan"),
    "nan_values": (dict(), np.full(NUMEL, np.nan), grpc.StatusCode.INVALID_ARGUMENT, "NaN/Inf"),
    "inf_values": (dict(), np.full(NUMEL, np.inf), grpc.StatusCode.INVALID_ARGUMENT, "NaN/Inf"),
}


@pytest.mark.parametrize("case", sorted(BAD_PUSHES))
def test_bad_push_is_refused_with_a_clear_status_and_changes_nothing(cluster, case):
    overrides, values, code, text = BAD_PUSHES[case]
    addresses = cluster.start_ps(1)
    _, clients = _setup(addresses, workers=(0, 1), plan=ssgd([0, 1], epoch=1))
    params = torch.empty(NUMEL)
    clients[0].pull(params, timeout_s=10)
    before_state, before_params = _state(clients[0]), _observe(clients[0])
    with pytest.raises(grpc.RpcError) as error:
        _raw_push(addresses[0], _header(**overrides), _payload(values))
    assert error.value.code() == code
    assert text in error.value.details()
    assert _state(clients[0]) == before_state
    assert torch.equal(_observe(clients[0]), before_params)
    # The worker can still push a good gradient afterwards.
    reply = clients[0].push(torch.ones(NUMEL), iteration=0, timeout_s=10)
    assert reply[0].status == "pending"


@pytest.mark.parametrize("size, code", [(MAX_CHUNK_BYTES + 4, grpc.StatusCode.RESOURCE_EXHAUSTED), (MAX_CHUNK_BYTES + 1024 * 1024, grpc.StatusCode.RESOURCE_EXHAUSTED)])
def test_oversized_chunk_is_refused_and_changes_nothing(cluster, size, code):
    addresses = cluster.start_ps(1)
    numel = size // 4
    _, clients = _setup(addresses, workers=(0, 1), numel=numel)
    clients[0].pull(torch.empty(numel), timeout_s=10)
    before = _state(clients[0])
    with pytest.raises(grpc.RpcError) as error:
        _raw_push(addresses[0], _header(numel=numel), [(0, b"\x00" * size)])
    assert error.value.code() == code
    assert _state(clients[0]) == before


def test_nonfinite_skip_policy_counts_the_arrival_but_never_applies_it(cluster):
    addresses = cluster.start_ps(1, "--nonfinite", "skip")
    initial, clients = _setup(addresses)
    params = torch.empty(NUMEL)
    for client in clients:
        client.pull(params, timeout_s=10)
    bad = torch.full((NUMEL,), float("nan"))
    assert clients[0].push(bad, iteration=0, timeout_s=10)[0].status == "skipped_nonfinite"
    clients[1].push(torch.ones(NUMEL), iteration=0, timeout_s=10)
    stats = clients[0].stats()[0]
    assert (stats.accepted, stats.applied, stats.dropped, stats.pending) == (2, 1, 1, 0)
    assert stats.counters["dropped_nonfinite"] == 1
    after = _observe(clients[0])
    assert torch.isfinite(after).all()
    torch.testing.assert_close(after, initial - 0.1 * 0.5 * torch.ones(NUMEL))


def test_configure_with_an_old_epoch_or_bad_plan_is_refused(cluster):
    addresses = cluster.start_ps(1)
    _, clients = _setup(addresses)
    with pytest.raises(grpc.RpcError) as error:
        clients[0].configure(asgd([0, 1], epoch=1))
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    bad = pb.Plan(epoch=5, groups=[pb.PlanGroup(workers=[0, 1], quorum=3)])
    stub = pb_grpc.ParameterServerStub(grpc.insecure_channel(addresses[0], options=CHANNEL_OPTIONS))
    with pytest.raises(grpc.RpcError) as error:
        stub.ConfigurePlan(bad, timeout=10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "quorum" in error.value.details()
    assert clients[0].stats()[0].plan_epoch == 1


def test_worker_with_unreachable_ps_retries_then_exits_nonzero():
    with socket_port() as port:
        pass  # the port is now free and nobody listens on it
    completed = subprocess.run(
        [sys.executable, "-m", "star.cli", "worker", "--ps-addresses", f"127.0.0.1:{port}", "--task", "digits",
         "--ps-retry-attempts", "3", "--ps-retry-base-s", "0.05"],
        capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode != 0
    assert "parameter server unreachable, retrying" in completed.stderr
    assert "failed after 3 tries" in completed.stderr


def socket_port():
    import contextlib
    import socket

    @contextlib.contextmanager
    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            yield s.getsockname()[1]

    return free_port()


def test_shard_ranges_cover_the_vector_across_ps():
    ranges = shard_ranges(NUMEL, 3)
    assert ranges[0].start == 0 and ranges[-1].end == NUMEL
    assert math.isclose(sum(r.numel for r in ranges), NUMEL)
