"""Hostile input against live daemons: thousands of random and mutated messages never crash a PS or the
coordinator, never hang a call, and every refused call leaves the served state exactly as it was.

The daemons run authenticated, as a launched job does. Hypothesis is derandomized so CI sees the same
messages every run; example counts keep the whole module within about a minute on two cores.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from star.coordinator import ABSURD_S
from star.launch import ProcessGroup, _wait_ready
from star.plan import asgd
from star.rpc import star_pb2 as pb
from star.rpc.common import MAX_MESSAGE_BYTES, address, max_stream_chunks
from star.rpc.ps_client import PSClient
from star.rpc.security import TOKEN_ENV, TOKEN_METADATA_KEY, Credentials

pytestmark = pytest.mark.integration

TOKEN = "fuzz-" + "0123456789abcdef" * 3
NUMEL = 256
NUM_WORKERS = 4
CALL_DEADLINE_S = 10.0  # "no hang": every call, refused or not, returns well within this
IDLE_TIMEOUT_S = 1.0
FUZZ = settings(
    max_examples=1000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Statuses a refusal may carry. UNKNOWN (an exception escaped a servicer) and DEADLINE_EXCEEDED (a hang) are bugs.
REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.INTERNAL,  # gRPC's own answer to bytes that do not parse as the request message
    grpc.StatusCode.UNIMPLEMENTED,
}


def _refused_cleanly(error: grpc.RpcError) -> bool:
    """A deliberate refusal, or gRPC's own answer to bytes that are not the request message at all."""
    if error.code() in REFUSALS:
        return True
    details = error.details() or ""
    return error.code() == grpc.StatusCode.UNKNOWN and ("Error parsing message" in details or "deserializ" in details)


PUSH_STATUSES = {"pending", "applied", "late_applied", "late_dropped", "skipped_nonfinite"}


class Daemons:
    """One PS under fuzz, and a coordinator (with its own PS, so the fuzzed PS's state is the test's alone)."""

    def __init__(self, tmp: Path):
        (tmp / "logs").mkdir()
        self.group = ProcessGroup(tmp / "logs", env={TOKEN_ENV: TOKEN})
        self.ps = self._start("ps-fuzz", ["ps", "--ps-index", "0", "--num-ps", "1", "--optimizer.name", "sgd",
                                          "--optimizer.lr", "0.01", "--stream-idle-timeout-s", str(IDLE_TIMEOUT_S)], tmp)
        self.ps_for_coordinator = self._start("ps-coord", ["ps", "--optimizer.name", "sgd", "--optimizer.lr", "0.1"], tmp)
        self.coordinator = self._start(
            "coordinator",
            ["coordinator", "--ps-addresses", self.ps_for_coordinator, "--num-workers", str(NUM_WORKERS), "--task", "digits",
             "--startup-timeout-s", "3600", "--eval-period-s", "2", "--out", str(tmp / "run")],
            tmp,
        )
        self.channel = grpc.insecure_channel(self.ps, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
        self.coordinator_channel = grpc.insecure_channel(self.coordinator, options=[("grpc.max_send_message_length", 8 * 1024 * 1024)])
        credentials = Credentials(token=TOKEN)
        self.client = PSClient([self.ps], worker_id=0, credentials=credentials)
        self.client.wait_ready(30)
        self.client.init_if_needed(torch.zeros(NUMEL), self.client.register(NUMEL))
        PSClient([self.ps], worker_id=1, credentials=credentials).register(NUMEL)
        self.client.configure(asgd([0, 1], epoch=1))

    def _start(self, name: str, args: list[str], tmp: Path) -> str:
        ready = tmp / "logs" / f"{name}.ready"
        child = self.group.spawn(name, [*args, "--ready-file", str(ready)])
        return address("127.0.0.1", _wait_ready(self.group, child, ready, 60.0))

    def assert_alive(self) -> None:
        for child in self.group.children:
            assert child.process.poll() is None, f"{child.name} died with code {child.process.returncode}"

    def close(self) -> None:
        self.client.close()
        self.channel.close()
        self.coordinator_channel.close()
        self.group.shutdown(grace_s=3.0)


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    started = None
    try:
        started = Daemons(tmp_path_factory.mktemp("fuzz"))
        yield started
    finally:
        if started is not None:
            started.close()


# ---------------------------------------------------------------- raw calls


def _call(channel: grpc.Channel, service: str, method: str, kind: str, payload, metadata) -> bytes | list[bytes]:
    """Send already-serialised bytes, exactly as given, to `method`; raises grpc.RpcError on refusal."""
    path = f"/star.{service}/{method}"
    if kind == "unary":
        return channel.unary_unary(path)(payload, timeout=CALL_DEADLINE_S, metadata=metadata)
    if kind == "client_stream":
        return channel.stream_unary(path)(iter(payload), timeout=CALL_DEADLINE_S, metadata=metadata)
    return list(channel.unary_stream(path)(payload, timeout=CALL_DEADLINE_S, metadata=metadata))


PS_METHODS = {"Register": "unary", "Init": "client_stream", "Push": "client_stream", "Pull": "server_stream",
              "ConfigurePlan": "unary", "Stats": "unary", "Health": "unary"}
COORDINATOR_METHODS = {"Join": "unary", "Report": "unary", "SetDirectives": "unary", "JobStatus": "unary", "Health": "unary"}

u32 = st.one_of(st.integers(0, 4), st.integers(0, 2**32 - 1))
u64 = st.one_of(st.integers(0, 4), st.integers(0, 2**64 - 1))
any_float = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0.0, 2.0))
_KEY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-_."


@st.composite
def metadata(draw) -> list[tuple[str, str]]:
    """The right token, plus (sometimes) garbage headers, a wrong or duplicated token, or no token."""
    pairs = [(TOKEN_METADATA_KEY, TOKEN)]
    for _ in range(draw(st.integers(0, 3))):
        key = "x-" + draw(st.text(_KEY_CHARS, min_size=1, max_size=20))
        if key.endswith("-bin"):
            key += "x"
        pairs.append((key, draw(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=64))))
    token = draw(st.sampled_from(["right"] * 8 + ["missing", "wrong", "twice", "garbage"]))
    if token == "missing":
        pairs.pop(0)
    elif token == "wrong":
        pairs[0] = (TOKEN_METADATA_KEY, TOKEN[:-1] + "x")
    elif token == "twice":
        pairs.append((TOKEN_METADATA_KEY, TOKEN))
    elif token == "garbage":
        pairs[0] = (TOKEN_METADATA_KEY, draw(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=200)))
    return pairs


def _mutate(data: st.DataObject, blob: bytes) -> bytes:
    """Flip, drop or insert a few bytes of a serialised message."""
    raw = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "truncate", "insert"]))
        if op == "flip" and raw:
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= data.draw(st.integers(1, 255))
        elif op == "truncate" and raw:
            del raw[data.draw(st.integers(0, len(raw) - 1)):]
        else:
            raw[data.draw(st.integers(0, len(raw))):0] = data.draw(st.binary(min_size=1, max_size=8))
    return bytes(raw)


def _push_stream(data: st.DataObject, epoch: int, version: int) -> list[bytes]:
    """A valid push for worker 0, then mutated: header fields, payload, stream shape, bytes."""
    header = pb.PushHeader(
        worker_id=data.draw(st.one_of(st.just(0), u32)),
        plan_epoch=data.draw(st.one_of(st.just(epoch), u64)),
        base_version=data.draw(st.one_of(st.just(version), u64)),
        iteration=data.draw(u64),
        dtype=data.draw(st.one_of(st.just("float32"), st.sampled_from(["float16", "", "FLOAT32"]), st.text(max_size=16))),
        numel=data.draw(st.one_of(st.just(NUMEL), u64)),
        batch_size=data.draw(u32),
    )
    shape = data.draw(st.sampled_from(["random_values", "finite_values", "random_chunks", "truncated", "tiny_chunks"]))
    if shape == "random_values":
        chunks = [(0, data.draw(st.binary(min_size=NUMEL * 4, max_size=NUMEL * 4)))]
    elif shape == "finite_values":
        values = np.array(data.draw(st.lists(st.floats(-1e3, 1e3, width=32), min_size=NUMEL, max_size=NUMEL)), dtype="<f4")
        chunks = [(0, values.tobytes())]
    elif shape == "random_chunks":
        chunks = data.draw(st.lists(st.tuples(u64, st.binary(max_size=2048)), max_size=6))
    elif shape == "truncated":
        chunks = [(0, bytes(4 * data.draw(st.integers(0, NUMEL - 1))))]
    else:
        chunks = [(i, b"\x00\x00\x80\x3f") for i in range(data.draw(st.integers(2, NUMEL)))]
    messages = [pb.PushRequest(header=header)] + [pb.PushRequest(chunk=pb.TensorChunk(offset=o, data=d)) for o, d in chunks]
    order = data.draw(st.sampled_from(["as_is"] * 4 + ["no_header", "two_headers", "chunk_first", "empty"]))
    if order == "no_header":
        messages = messages[1:]
    elif order == "two_headers":
        messages.insert(1, pb.PushRequest(header=header))
    elif order == "chunk_first" and len(messages) > 1:
        messages[0], messages[1] = messages[1], messages[0]
    elif order == "empty":
        messages = []
    blobs = [m.SerializeToString() for m in messages]
    if blobs and data.draw(st.booleans()) and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(blobs) - 1))
        blobs[i] = _mutate(data, blobs[i])
    return blobs


def _ps_request(data: st.DataObject, epoch: int, version: int) -> tuple[str, object]:
    kind = data.draw(st.sampled_from(["push"] * 5 + ["random_bytes", "register", "pull", "plan", "init"]))
    if kind == "push":
        return "Push", _push_stream(data, epoch, version)
    if kind == "random_bytes":
        method = data.draw(st.sampled_from(sorted(PS_METHODS)))
        if PS_METHODS[method] == "client_stream":
            return method, data.draw(st.lists(st.binary(max_size=512), max_size=5))
        return method, data.draw(st.binary(max_size=512))
    if kind == "register":
        return "Register", pb.RegisterRequest(worker_id=data.draw(u32), total_numel=data.draw(u64)).SerializeToString()
    if kind == "pull":
        return "Pull", pb.PullRequest(worker_id=data.draw(u32), observer=data.draw(st.booleans())).SerializeToString()
    if kind == "plan":
        groups = data.draw(st.lists(st.tuples(st.lists(u32, max_size=4), u32), max_size=3))
        plan = pb.Plan(
            epoch=data.draw(st.one_of(st.just(epoch + 1), u64)),
            groups=[pb.PlanGroup(workers=w, quorum=q) for w, q in groups],
            staleness_bound=data.draw(st.integers(-(2**31), 2**31 - 1)),
            scale=data.draw(st.sampled_from(["", "per_arrivals", "bogus"])),
            late_policy=data.draw(st.sampled_from(["", "drop", "bogus"])),
            label=data.draw(st.text(max_size=300)),
        )
        return "ConfigurePlan", _mutate(data, plan.SerializeToString()) if data.draw(st.booleans()) else plan.SerializeToString()
    header = pb.InitHeader(total_numel=data.draw(st.one_of(st.just(NUMEL), u64)), dtype=data.draw(st.sampled_from(["float32", "x"])))
    chunks = data.draw(st.lists(st.tuples(u64, st.binary(max_size=1024)), max_size=4))
    messages = [pb.InitRequest(header=header)] + [pb.InitRequest(chunk=pb.TensorChunk(offset=o, data=d)) for o, d in chunks]
    return "Init", [m.SerializeToString() for m in messages]


def _ps_state(client: PSClient) -> tuple[tuple, torch.Tensor]:
    stats = client.stats(timeout_s=CALL_DEADLINE_S)[0]
    params = torch.empty(NUMEL)
    client.pull(params, timeout_s=CALL_DEADLINE_S, observer=True)
    return (stats.version, stats.plan_epoch, stats.plan, stats.accepted, stats.applied, stats.dropped, stats.pending), params


@FUZZ
@given(data=st.data())
def test_random_and_mutated_ps_messages_never_crash_hang_or_change_state_when_refused(daemons, data):
    client = daemons.client
    client.pull(torch.empty(NUMEL), timeout_s=CALL_DEADLINE_S)  # worker 0 may push: mutated valid pushes get deep
    before, params_before = _ps_state(client)
    method, payload = _ps_request(data, epoch=before[1], version=before[0])
    meta = data.draw(metadata())
    try:
        reply = _call(daemons.channel, "ParameterServer", method, PS_METHODS[method], payload, meta)
    except grpc.RpcError as error:
        assert _refused_cleanly(error), f"{method}: {error.code()} {error.details()}"
        daemons.assert_alive()
        after, params_after = _ps_state(client)
        assert after == before, f"{method} was refused ({error.details()}) but the state changed"
        assert torch.equal(params_after, params_before)
        return
    daemons.assert_alive()
    assert (TOKEN_METADATA_KEY, TOKEN) in meta and sum(k == TOKEN_METADATA_KEY for k, _ in meta) == 1, "served without the token"
    if method == "Push":
        assert pb.PushReply.FromString(reply).status in PUSH_STATUSES
        _, params_after = _ps_state(client)
        assert torch.isfinite(params_after).all(), "an accepted push made the parameters non-finite"
    if method == "ConfigurePlan":  # a random plan got through: put the fuzz plan back
        client.configure(asgd([0, 1], epoch=_ps_state(client)[0][1] + 1), timeout_s=CALL_DEADLINE_S)


# ---------------------------------------------------------------- coordinator


def _coordinator_request(data: st.DataObject) -> tuple[str, bytes, set[str]]:
    """(method, bytes, the fields that must get it refused: an outside worker id, or a NaN/negative/absurd time)."""
    kind = data.draw(st.sampled_from(["report"] * 4 + ["join", "directives", "status", "random_bytes"]))
    worker = data.draw(st.one_of(st.integers(0, NUM_WORKERS - 1), u32))
    bad_worker = {"worker_id"} if worker >= NUM_WORKERS else set()
    if kind == "report":
        fields = {name: data.draw(st.one_of(st.floats(0.0, 1.0), any_float)) for name in ("compute_s", "push_s", "pull_s", "slowdown", "cpu_percent")}
        report = pb.IterationReport(worker_id=worker, iteration=data.draw(u64), batch_size=data.draw(st.one_of(st.just(32), u32)),
                                    amp=data.draw(st.booleans()), loss=data.draw(any_float), **fields)
        bad = bad_worker | {n for n in ("compute_s", "push_s", "pull_s") if not (math.isfinite(fields[n]) and 0 <= fields[n] <= ABSURD_S)}
        return "Report", report.SerializeToString(), bad
    if kind == "join":
        host = data.draw(st.text(max_size=400))
        return "Join", pb.JoinRequest(worker_id=worker, host=host, pid=data.draw(u32), batch_size=data.draw(u32)).SerializeToString(), bad_worker
    if kind == "directives":
        directives = pb.Directives(amp=data.draw(st.booleans()), batch_size=data.draw(st.one_of(st.integers(0, 64), u32)))
        return "SetDirectives", pb.SetDirectivesRequest(worker_id=worker, directives=directives).SerializeToString(), bad_worker
    if kind == "status":
        return "JobStatus", b"", set()
    return data.draw(st.sampled_from(sorted(COORDINATOR_METHODS))), data.draw(st.binary(max_size=512)), set()


def _job_state(daemons: Daemons) -> tuple:
    status = pb.JobStatusReply.FromString(
        _call(daemons.coordinator_channel, "Coordinator", "JobStatus", "unary", b"", [(TOKEN_METADATA_KEY, TOKEN)])
    )
    return status.state, status.max_iteration, status.workers_reporting, status.mode


@FUZZ
@given(data=st.data())
def test_random_coordinator_messages_never_crash_hang_or_change_state_when_refused(daemons, data):
    before = _job_state(daemons)
    method, payload, bad_fields = _coordinator_request(data)
    meta = data.draw(metadata())
    try:
        _call(daemons.coordinator_channel, "Coordinator", method, "unary", payload, meta)
    except grpc.RpcError as error:
        assert _refused_cleanly(error), f"{method}: {error.code()} {error.details()}"
        if bad_fields and error.code() == grpc.StatusCode.INVALID_ARGUMENT:
            assert any(field in error.details() for field in bad_fields), (bad_fields, error.details())
        daemons.assert_alive()
        assert _job_state(daemons) == before, f"{method} was refused ({error.details()}) but the job state changed"
        return
    daemons.assert_alive()
    assert not bad_fields, f"{method} with invalid {sorted(bad_fields)} was accepted"
    assert (TOKEN_METADATA_KEY, TOKEN) in meta and sum(k == TOKEN_METADATA_KEY for k, _ in meta) == 1, "served without the token"


# ---------------------------------------------------------------- limits, one case each


def _fresh_pull_and_state(daemons: Daemons) -> tuple:
    daemons.client.pull(torch.empty(NUMEL), timeout_s=CALL_DEADLINE_S)
    return _ps_state(daemons.client)


def _push_bytes(header: pb.PushHeader, chunks) -> list[bytes]:
    return [pb.PushRequest(header=header).SerializeToString()] + [
        pb.PushRequest(chunk=pb.TensorChunk(offset=o, data=d)).SerializeToString() for o, d in chunks
    ]


def _valid_header(state: tuple) -> pb.PushHeader:
    return pb.PushHeader(worker_id=0, plan_epoch=state[1], base_version=state[0], dtype="float32", numel=NUMEL)


def test_a_push_in_more_chunks_than_its_shard_needs_is_refused_and_changes_nothing(daemons):
    before, params = _fresh_pull_and_state(daemons)
    assert max_stream_chunks(NUMEL) == 1
    one_element_chunks = [(i, np.float32(1.0).tobytes()) for i in range(NUMEL)]
    with pytest.raises(grpc.RpcError) as error:
        _call(daemons.channel, "ParameterServer", "Push", "client_stream",
              _push_bytes(_valid_header(before), one_element_chunks), [(TOKEN_METADATA_KEY, TOKEN)])
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "more than 1 chunks" in error.value.details()
    after, params_after = _ps_state(daemons.client)
    assert after == before and torch.equal(params_after, params)


def test_a_message_over_the_size_limit_is_refused_by_the_server(daemons):
    before, _ = _fresh_pull_and_state(daemons)
    huge = [(0, bytes(MAX_MESSAGE_BYTES + 1024))]
    with pytest.raises(grpc.RpcError) as error:
        _call(daemons.channel, "ParameterServer", "Push", "client_stream",
              _push_bytes(_valid_header(before), huge), [(TOKEN_METADATA_KEY, TOKEN)])
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _ps_state(daemons.client)[0] == before


def test_a_push_stream_that_goes_silent_is_refused_after_the_idle_timeout(daemons):
    before, _ = _fresh_pull_and_state(daemons)
    released = threading.Event()

    def silent_stream():
        yield pb.PushRequest(header=_valid_header(before)).SerializeToString()
        released.wait(CALL_DEADLINE_S)  # open, but sending nothing

    try:
        with pytest.raises(grpc.RpcError) as error:
            daemons.channel.stream_unary("/star.ParameterServer/Push")(
                silent_stream(), timeout=CALL_DEADLINE_S, metadata=[(TOKEN_METADATA_KEY, TOKEN)]
            )
    finally:
        released.set()
    assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "stream_idle_timeout_s" in error.value.details()  # the server's refusal, not the client's deadline
    assert _ps_state(daemons.client)[0] == before
