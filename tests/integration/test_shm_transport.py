"""The shared-memory transport on real PS daemons: the same bytes as gRPC, the same refusals,
and no mailbox left behind by a clean exit or a kill -9; the same for a worker's gradient segment
(pushes summed in place, no bytes moved)."""

from __future__ import annotations

import itertools
import os
import secrets
import signal
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import psutil
import pytest
import torch

from star.evaluator import Evaluator
from star.flat import FlatModel
from star.plan import ssgd
from star.ps_server import version_watch
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CHANNEL_OPTIONS
from star.rpc.ps_client import PSClient
from star.rpc.security import TOKEN_ENV, Credentials
from star.shm import MAX_GRAD_SHARDS, SHM_DIR, GradSegment, Mailbox, PullBoard, ShmError, grad_segment_name, job_tag
from star.tasks.registry import get_task
from tests.integration.refusal_checks import observed_state, push_header

pytestmark = pytest.mark.integration

NUMEL = 1000
TOKEN = "s" * 24 + "-shm-test-token"


def _mailboxes(job: str) -> list[str]:
    return sorted(p.name for p in SHM_DIR.glob(f"star-{job_tag(job)}-*"))


def _clients(addresses, transports, credentials=None, numel=NUMEL, segments=()):
    """One client per transport; `segments[w]`: worker w's gradient segment (None: none)."""
    initial = torch.arange(numel, dtype=torch.float32) / numel
    segments = list(segments) + [None] * (len(transports) - len(segments))
    clients = [PSClient(addresses, worker_id=w, transport=t, credentials=credentials, grad_segment=g)
               for w, (t, g) in enumerate(zip(transports, segments))]
    for client in clients:
        client.wait_ready(30)
        client.init_if_needed(initial, client.register(numel))
    clients[0].configure(ssgd(list(range(len(clients))), epoch=1))
    return initial, clients


def test_shm_and_grpc_workers_pull_identical_bits_and_push_the_same_update(cluster):
    addresses = cluster.start_ps(2, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", "0.5", "--optimizer.momentum", "0.9"))
    initial, (shm, plain) = _clients(addresses, ("shm", "grpc"))
    assert (shm.transport_used, plain.transport_used) == ("shm", "grpc")
    evaluator = PSClient(addresses, worker_id=0)  # registers under worker 0's id, as star.evaluator does
    evaluator.register(NUMEL)  # ... which must leave worker 0's mailbox in place
    reference = torch.nn.Parameter(initial.clone())
    optimizer = torch.optim.SGD([reference], lr=0.5, momentum=0.9)
    pulled = [torch.empty(NUMEL), torch.empty(NUMEL)]
    for step in range(3):
        for client, out in zip((shm, plain), pulled):
            client.pull(out, timeout_s=10)
        assert torch.equal(pulled[0], pulled[1])
        assert torch.equal(pulled[0], reference.detach())  # bit for bit, not just close
        grads = [torch.randn(NUMEL, generator=torch.Generator().manual_seed(10 * step + w)) for w in range(2)]
        for client, grad in zip((shm, plain), grads):
            client.push(grad, iteration=step, timeout_s=10)
        reference.grad = (grads[0] + grads[1]) * 0.5
        optimizer.step()
    stats = shm.stats()
    assert [s.counters["shm_pushes"] for s in stats] == [3, 3]  # the shm worker's pushes used the mailboxes
    assert [s.counters["shm_board_pulls"] for s in stats] == [3, 3]  # its pulls read each version off the board
    for client in (shm, plain, evaluator):
        client.close()


def test_an_evaluator_on_the_host_reads_each_version_off_the_board_bit_for_bit_and_polls_with_headers(cluster):
    """The coordinator's evaluator (an observer under worker 0's id) copies the board slot a version is on,
    as a same-host worker does, instead of having it streamed; a version it asked for too early moves nothing."""
    addresses = cluster.start_ps(2, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", "0.5", "--optimizer.momentum", "0.9"))
    _, (worker,) = _clients(addresses, ("shm",))
    evaluators = [PSClient(addresses, worker_id=0, transport=t) for t in ("auto", "grpc")]
    for evaluator in evaluators:
        evaluator.register(NUMEL)
    params, seen = torch.empty(NUMEL), [torch.empty(NUMEL), torch.empty(NUMEL)]
    for step in range(3):
        worker.pull(params, timeout_s=10)
        for evaluator, out in zip(evaluators, seen):
            assert [v.version for v in evaluator.pull(out, timeout_s=10, observer=True, min_version=step)] == [step, step]
            assert torch.equal(out, params)  # bit for bit, over the board and over chunks
        early = torch.full((NUMEL,), -1.0)
        evaluators[0].pull(early, timeout_s=10, observer=True, min_version=step + 1)
        assert bool((early == -1.0).all())  # not there yet: the header said so, no parameters moved
        worker.push(torch.randn(NUMEL, generator=torch.Generator().manual_seed(step)), iteration=step, timeout_s=10)
    stats = worker.stats()
    assert [s.counters["observer_board_pulls"] for s in stats] == [3, 3]  # the grpc evaluator's were streamed
    assert [s.counters["shm_board_pulls"] for s in stats] == [3, 3]  # the worker's own pulls, unchanged
    for client in (worker, *evaluators):
        client.close()


def _digits_worker_and_evaluator(cluster) -> tuple[FlatModel, PSClient, Evaluator]:
    """Two PSs holding digits' model, one same-host worker under SSGD, and the coordinator's evaluator."""
    task = get_task("digits")
    model = FlatModel(task.build_model(0))
    addresses = cluster.start_ps(2)
    worker = PSClient(addresses, worker_id=0, transport="shm")
    worker.wait_ready(30)
    worker.init_if_needed(model.params.clone(), worker.register(model.numel))
    worker.configure(ssgd([0], epoch=1))
    return model, worker, Evaluator(task, addresses, seed=0)


def test_the_coordinators_evaluator_moves_no_parameters_before_the_first_update_then_reads_the_board(cluster):
    """It polls every 50 ms from the job's start: version 0 is never evaluated, so it is never pulled."""
    evaluator_model, worker, evaluator = _digits_worker_and_evaluator(cluster)
    try:
        for _ in range(3):
            assert evaluator.evaluate()[1] is None
        assert [s.counters.get("observer_board_pulls", 0) for s in worker.stats()] == [0, 0]
        worker.pull(torch.empty(evaluator_model.numel), timeout_s=10)
        worker.push(torch.zeros(evaluator_model.numel), iteration=0, timeout_s=10)
        since, point = evaluator.evaluate()
        assert point is not None and point.version == 1 and since >= 0
        assert [s.counters["observer_board_pulls"] for s in worker.stats()] == [1, 1]
    finally:
        evaluator.close()
        worker.close()


def test_an_evaluator_that_reads_a_version_late_is_timed_when_the_version_was_applied(cluster):
    """A slow evaluation makes the evaluator read the next version after it was made; the lag is the evaluator's
    (DDP's rank 0 times its snapshots at their step), so the point carries the PSs' apply time, not the read's."""
    model, worker, evaluator = _digits_worker_and_evaluator(cluster)
    try:
        for step in range(2):
            worker.pull(torch.empty(model.numel), timeout_s=10)
            worker.push(torch.zeros(model.numel), iteration=step, timeout_s=10)
            if step == 0:
                time.sleep(0.3)  # version 2 comes 0.3 s after the first update
        time.sleep(1.0)  # the evaluator is busy for a second
        since, point = evaluator.evaluate(min_version=2)
        assert point is not None and point.version == 2
        assert since >= 1.3  # the read: as late as it was
        assert 0.3 <= point.time_s < since - 0.9  # the parameters: when version 2 was applied
    finally:
        evaluator.close()
        worker.close()


@pytest.mark.parametrize("transport", ["auto", "grpc"])
def test_an_evaluators_pull_held_for_a_version_is_answered_by_the_update_that_applies_it(cluster, transport):
    """No 50 ms polls: each PS holds the call (wait_s) and answers when the round that makes the version closes."""
    addresses = cluster.start_ps(2)
    _, (worker,) = _clients(addresses, ("shm",))
    evaluator = PSClient(addresses, worker_id=0, transport=transport)
    evaluator.register(NUMEL)
    params, seen = torch.empty(NUMEL), torch.empty(NUMEL)
    worker.pull(params, timeout_s=10)
    answered: list[tuple[list[int], float]] = []

    def held_pull():
        started = time.monotonic()
        views = evaluator.pull(seen, timeout_s=30, observer=True, min_version=1, wait_s=30.0)
        answered.append(([v.version for v in views], time.monotonic() - started))

    thread = threading.Thread(target=held_pull)
    thread.start()
    time.sleep(0.5)
    assert not answered  # held: version 1 is not there yet
    worker.push(torch.ones(NUMEL), iteration=0, timeout_s=10)
    thread.join(timeout=20)
    (versions, waited_s), = answered
    assert versions == [1, 1] and 0.5 <= waited_s < version_watch.MAX_WAIT_S  # woken by the update, not the bound
    worker.pull(params, timeout_s=10)
    assert torch.equal(seen, params)  # the parameters of version 1 came with the answer
    for client in (worker, evaluator):
        client.close()


def test_an_evaluator_whose_board_slot_is_rewritten_while_it_copies_gets_the_version_as_chunks(cluster, monkeypatch):
    addresses = cluster.start_ps(1)
    initial, (worker,) = _clients(addresses, ("shm",))
    evaluator = PSClient(addresses, worker_id=0)
    evaluator.register(NUMEL)
    worker.pull(torch.empty(NUMEL), timeout_s=10)
    torn = []

    def rewritten_while_copied(board, slot, out, seq):
        out.fill_(7.0)  # half of another version, as a torn copy would leave it
        torn.append(slot)
        raise ShmError(f"board slot {slot} was rewritten while read")

    monkeypatch.setattr(PullBoard, "take", rewritten_while_copied)
    out = torch.empty(NUMEL)
    evaluator.pull(out, timeout_s=10, observer=True)
    assert torn and torch.equal(out, initial)  # the torn copy was thrown away and the version streamed
    assert evaluator.stats()[0].counters["observer_board_pulls"] == 1
    for client in (worker, evaluator):
        client.close()


def _segment(worker: int, numel: int = NUMEL) -> GradSegment:
    return GradSegment.create(grad_segment_name("shmtest", worker), numel, MAX_GRAD_SHARDS)[0]


def test_a_push_left_in_the_gradient_segment_is_summed_in_place_bit_for_bit_like_grpc(cluster):
    addresses = cluster.start_ps(2, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", "0.5", "--optimizer.momentum", "0.9"))
    segment = _segment(0)
    try:
        initial, (shm, plain) = _clients(addresses, ("shm", "grpc"), segments=[segment])
        assert shm.grad_mapped == [True, True] and plain.grad_mapped == [False, False]
        evaluator = PSClient(addresses, worker_id=0)  # registers under worker 0's id, offering no segment,
        evaluator.register(NUMEL)  # as star.evaluator does: worker 0's segment must stay mapped
        reference = torch.nn.Parameter(initial.clone())
        optimizer = torch.optim.SGD([reference], lr=0.5, momentum=0.9)
        pulled = [torch.empty(NUMEL), torch.empty(NUMEL)]
        for step in range(3):
            for client, out in zip((shm, plain), pulled):
                client.pull(out, timeout_s=10)
            assert torch.equal(pulled[0], reference.detach()) and torch.equal(pulled[1], reference.detach())
            grads = [torch.randn(NUMEL, generator=torch.Generator().manual_seed(10 * step + w)) for w in range(2)]
            segment.area.copy_(grads[0])  # the worker's backward writes here
            shm.push(segment.area, iteration=step, timeout_s=10)
            plain.push(grads[1], iteration=step, timeout_s=10)
            reference.grad = (grads[0] + grads[1]) * 0.5
            optimizer.step()
        shm.pull(pulled[0], timeout_s=10)
        assert torch.equal(pulled[0], reference.detach())  # bit for bit, not just close
        stats = shm.stats()
        assert [s.counters["shm_grad_pushes"] for s in stats] == [3, 3]  # summed out of the segment, never copied
        assert [s.counters["shm_pushes"] for s in stats] == [3, 3]
        other = torch.randn(NUMEL)  # a buffer that is not the segment still goes by the mailbox
        shm.push(other, iteration=3, timeout_s=10)
        assert [s.counters["shm_grad_pushes"] for s in shm.stats()] == [3, 3]
        for client in (shm, plain, evaluator):
            client.close()
    finally:
        segment.close()


def test_a_gradient_written_out_of_turn_in_the_segment_is_left_out_of_the_round(cluster):
    """The ownership rule broken on purpose: worker 0 writes its segment while the PS holds its push.
    The PS must not sum the new bytes: it sees the stamp change and leaves that gradient out."""
    addresses = cluster.start_ps(1, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", "1.0", "--optimizer.momentum", "0"))
    segment = _segment(0)
    try:
        initial, (first, second) = _clients(addresses, ("shm", "shm"), segments=[segment])
        params = torch.empty(NUMEL)
        for client in (first, second):
            client.pull(params, timeout_s=10)
        segment.area.fill_(1.0)
        assert first.push(segment.area, iteration=0, timeout_s=10)[0].status == "pending"
        segment.begin_write()  # out of turn: the PS holds the gradient until worker 1 pushes
        segment.area.fill_(1000.0)
        grad = torch.full((NUMEL,), 2.0)
        assert second.push(grad, iteration=0, timeout_s=10)[0].status == "applied"
        second.pull(params, timeout_s=10)
        assert float(params.sub(initial).abs().max()) < 10.0  # the 1000s were never summed
        assert first.stats()[0].counters.get("rejected_overwritten_in_mailbox", 0) == 1
        for client in (first, second):
            client.close()
    finally:
        segment.close()


def _raw_push(address: str, header: pb.PushHeader, credentials: Credentials, chunks=(), unary: bool = False):
    """A Push stream of `header` and `chunks`, or (unary) the header alone through PushShm."""
    channel = credentials.channel(address, CHANNEL_OPTIONS)

    def messages():
        yield pb.PushRequest(header=header)
        for offset, data in chunks:
            yield pb.PushRequest(chunk=pb.TensorChunk(offset=offset, data=data))

    try:
        stub = pb_grpc.ParameterServerStub(channel)
        return stub.PushShm(header, timeout=10) if unary else stub.Push(messages(), timeout=10)
    finally:
        channel.close()


@pytest.mark.parametrize("where", ["mailbox", "segment"])
def test_every_refusal_is_still_refused_on_the_shm_path(cluster, monkeypatch, where):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    addresses = cluster.start_ps(1)
    good = Credentials(token=TOKEN)
    segment = _segment(0) if where == "segment" else None
    try:
        _refusals(addresses, good, segment)
    finally:
        if segment is not None:
            segment.close()


def _refusals(addresses: list[str], good: Credentials, segment: GradSegment | None) -> None:
    _, (worker, other) = _clients(addresses, ("shm", "shm"), credentials=good, segments=[segment])
    params = torch.empty(NUMEL)
    worker.pull(params, timeout_s=10)
    box: Mailbox = worker.mailboxes[0]  # type: ignore[assignment]

    def put(gradient: torch.Tensor) -> int:
        """The gradient where this case's pushes leave it; returns its stamp."""
        if segment is None:
            return box.put_push(gradient)
        segment.begin_write()
        segment.area.copy_(gradient)
        return segment.stamp(0)

    in_segment = dict(shm_grad=True) if segment is not None else {}

    before = observed_state(worker, NUMEL)
    cases = {  # name: (gradient put in the mailbox, header fields, credentials, status, text in the message)
        "wrong_length": (torch.ones(NUMEL), dict(numel=NUMEL - 1), good, grpc.StatusCode.INVALID_ARGUMENT, "shard's length"),
        "stale_epoch": (torch.ones(NUMEL), dict(plan_epoch=0), good, grpc.StatusCode.FAILED_PRECONDITION, "older than the plan"),
        "nan": (torch.full((NUMEL,), float("nan")), {}, good, grpc.StatusCode.INVALID_ARGUMENT, "NaN/Inf"),
        "unknown_worker": (torch.ones(NUMEL), dict(worker_id=7), good, grpc.StatusCode.NOT_FOUND, "unknown worker 7"),
        "bad_token": (torch.ones(NUMEL), {}, Credentials(token="w" * 32), grpc.StatusCode.UNAUTHENTICATED, "wrong job token"),
        "no_token": (torch.ones(NUMEL), {}, Credentials(), grpc.StatusCode.UNAUTHENTICATED, "missing job token"),
        "stamp_out_of_turn": (torch.ones(NUMEL), dict(shm_seq=10**6), good, grpc.StatusCode.INVALID_ARGUMENT, "does not match"),
    }
    if segment is not None:  # a worker whose segment the PS never mapped
        cases["no_segment"] = (torch.ones(NUMEL), dict(worker_id=1), good, grpc.StatusCode.FAILED_PRECONDITION,
                               "no shared-memory mailbox here for its gradient segment")
    for (name, (gradient, overrides, credentials, code, text)), unary in itertools.product(cases.items(), (False, True)):
        seq = put(gradient)
        with pytest.raises(grpc.RpcError) as error:
            _raw_push(addresses[0], push_header(NUMEL, **{"shm_seq": seq, **in_segment, **overrides}), credentials, unary=unary)
        assert error.value.code() == code, (name, unary)
        assert text in error.value.details(), (name, unary)
    with pytest.raises(grpc.RpcError) as error:  # a unary push whose gradient is not in the mailbox
        _raw_push(addresses[0], push_header(NUMEL), good, unary=True)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "shm_seq > 0" in error.value.details()
    channel = good.channel(addresses[0], CHANNEL_OPTIONS)
    pulls = [  # a unary pull: from a worker the PS does not know (restarted PS: register again), or not for shm
        (pb.PullRequest(worker_id=5, shm=True), grpc.StatusCode.NOT_FOUND, "unknown worker 5"),
        (pb.PullRequest(worker_id=1, shm=False), grpc.StatusCode.FAILED_PRECONDITION, "no shared-memory mailbox"),
    ]
    for request, code, text in pulls:
        with pytest.raises(grpc.RpcError) as error:
            pb_grpc.ParameterServerStub(channel).PullShm(request, timeout=10)
        assert error.value.code() == code and text in error.value.details()
    channel.close()
    with pytest.raises(grpc.RpcError) as error:  # a mailbox push that also streams chunks
        _raw_push(addresses[0], push_header(NUMEL, shm_seq=put(torch.ones(NUMEL)), **in_segment), good,
                  [(0, np.ones(NUMEL, dtype="<f4").tobytes())])
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "no chunks" in error.value.details()
    after = observed_state(worker, NUMEL)
    assert after[0] == before[0] and torch.equal(after[1], before[1])
    pushed = segment.area if segment is not None else torch.ones(NUMEL)
    assert worker.push(pushed, iteration=0, timeout_s=10)[0].status == "pending"  # still usable
    assert worker.stats()[0].counters.get("shm_grad_pushes", 0) == (segment is not None)  # and by the same path
    for client in (worker, other):
        client.close()


_WORKER = """
import sys, time, torch
from star.rpc.ps_client import PSClient
from star.shm import MAX_GRAD_SHARDS, GradSegment, grad_segment_name
segment = GradSegment.create(grad_segment_name("shmleak", int(sys.argv[2])), 1000, MAX_GRAD_SHARDS)[0] \
    if sys.argv[3:] == ["segment"] else None
client = PSClient([sys.argv[1]], worker_id=int(sys.argv[2]), transport="shm", grad_segment=segment)
client.wait_ready(30)
client.init_if_needed(torch.zeros(1000), client.register(1000))
print("registered", flush=True)
time.sleep(600)
"""


def _ps_pid(address: str) -> int:
    channel = grpc.insecure_channel(address)
    try:
        return pb_grpc.ParameterServerStub(channel).Health(pb.HealthRequest(), timeout=10).pid
    finally:
        channel.close()


def _registered_worker(address: str, worker: int, *extra: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", _WORKER, address, str(worker), *extra], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "registered"
    return process


def _wait_exit(pid: int, timeout_s: float = 30.0) -> None:
    """Until `pid` has exited (a zombie not yet reaped by its ProcessGroup counts as exited)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not exit")


def test_no_mailbox_outlives_a_clean_exit_or_a_kill_9(cluster):
    job = f"shmleak{secrets.token_hex(4)}"
    workers: list[subprocess.Popen] = []
    try:
        (first,) = cluster.start_ps(1, "--job-id", job)
        workers.append(_registered_worker(first, 0))
        # its mailbox, the PS's board and doorbell socket
        assert [name.rsplit("-", 1)[1] for name in _mailboxes(job)] == ["bell", "board", "w0"]
        workers[0].kill()  # kill -9 of a worker: its mailbox is the PS's, which unlinks it on exit
        workers[0].wait()
        pid = _ps_pid(first)
        os.kill(pid, signal.SIGTERM)
        _wait_exit(pid)
        assert _mailboxes(job) == []
        (second,) = cluster.start_ps(1, "--job-id", job)
        workers.append(_registered_worker(second, 1))
        leaked = _mailboxes(job)
        pid = _ps_pid(second)
        os.kill(pid, signal.SIGKILL)  # kill -9 of a PS: its mailbox stays until the next start
        _wait_exit(pid)
        assert _mailboxes(job) == leaked and len(leaked) == 3
        (third,) = cluster.start_ps(1, "--job-id", job)
        assert _mailboxes(job) == [f"star-{job_tag(job)}-{_ps_pid(third)}-ps0-bell"]  # the dead PS's files are gone
    finally:
        for process in workers:
            process.kill()
            process.wait()


def test_a_killed_workers_gradient_segment_is_swept_when_a_ps_starts(cluster):
    job = f"shmleak{secrets.token_hex(4)}"
    (address,) = cluster.start_ps(1, "--job-id", job)
    worker = _registered_worker(address, 0, "segment")
    try:
        segments = lambda: sorted(p.name for p in SHM_DIR.glob(f"star-shmleak-{worker.pid}-w0-grad"))
        assert len(segments()) == 1  # the worker's own segment, which the PS mapped
        worker.kill()  # kill -9: the worker cannot unlink it
        worker.wait()
        assert len(segments()) == 1
        cluster.start_ps(1, "--job-id", job)  # a PS start sweeps what dead processes left
        assert segments() == []
    finally:
        worker.kill()
        worker.wait()


@pytest.mark.parametrize("where", ["mailbox", "segment"])
def test_a_push_sent_again_after_a_lost_reply_keeps_the_gradient_the_ps_already_holds(cluster, where):
    """A worker whose push reply was lost (timeout, reset) sends the same push again. Over shared memory
    the retry must not write the mailbox again: the PS holds the first push's gradient there in place,
    and a new stamp would make it leave that gradient out of the round."""
    addresses = cluster.start_ps(1, optimizer=("--optimizer.name", "sgd", "--optimizer.lr", "1.0", "--optimizer.momentum", "0"))
    segment = _segment(0) if where == "segment" else None
    initial, (first, second) = _clients(addresses, ("shm", "shm"), segments=[segment])
    params = torch.empty(NUMEL)
    for client in (first, second):
        client.pull(params, timeout_s=10)
    grads = [torch.randn(NUMEL, generator=torch.Generator().manual_seed(w)) for w in range(2)]
    if segment is not None:
        segment.area.copy_(grads[0])
        grads[0] = segment.area
    assert first.push(grads[0], iteration=0, timeout_s=10)[0].status == "pending"
    with pytest.raises(grpc.RpcError) as error:  # the retry: the PS has it already
        first.push(grads[0], iteration=0, timeout_s=10)
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert second.push(grads[1], iteration=0, timeout_s=10)[0].status == "applied"
    first.pull(params, timeout_s=10)
    assert torch.allclose(params, initial - (grads[0] + grads[1]) / 2, atol=1e-6)  # both gradients counted
    assert first.stats()[0].counters.get("rejected_overwritten_in_mailbox", 0) == 0
    assert first.stats()[0].counters.get("shm_grad_pushes", 0) == (segment is not None)
    for client in (first, second):
        client.close()
    if segment is not None:
        segment.close()
