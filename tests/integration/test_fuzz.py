"""Hostile input against live daemons: random and mutated messages never crash a PS or the coordinator,
never hang a call, and every refused call leaves the served state exactly as it was.

Most examples start from a message that is VALID for the live server's state (the registered worker,
the epoch and base version of a real pull, the shard's numel, dtype and chunking) and break exactly one
thing about it (a header field, a chunk offset or length, the chunk count, the stream's shape, the
payload's values, the token), so every rejection reason of the PS is actually reached; each such case
names the status and the reason the server must answer with. The rest are byte-flipped valid messages
and fully random ones, which may get any clean answer.

"State unchanged" is checked finely: for the PS, Stats (version, epoch, plan, accounting, waiting pulls,
every counter but `rejected_*`, staleness histogram, noise sums) and the parameters; a refusal may only
add 1 to one `rejected_<reason>` counter. For the coordinator, every JobStatus field but the clock-driven
ones, and the number of lines of its events.jsonl (its control loop is parked, so nothing else writes).

Refusal statuses are restricted to deliberate ones (INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND,
RESOURCE_EXHAUSTED, OUT_OF_RANGE, UNAUTHENTICATED, and DEADLINE_EXCEEDED only as the server's idle-stream
refusal); gRPC's own INTERNAL/UNKNOWN answer to bytes that do not parse is accepted only when they really
do not parse. A PS refusal that reached the servicer must count exactly one `rejected_<reason>`.

The daemons run authenticated, as a launched job does. Each case is fuzzed in turn for a fixed number of
examples (so every case is reached whatever hypothesis prefers), derandomized so CI sees the same messages
every run; the counts keep the module under a minute on two cores. Each fuzz test ends by asserting which
rejection reasons it reached, so it cannot silently become shallow again.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import grpc
import numpy as np
import pytest
import torch
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from star.ps_server.config import PSConfig
from star.coordinator_checks import ABSURD_S, MAX_CPU_PERCENT, MAX_SLOWDOWN
from star.flat import MAX_CHUNK_BYTES, WIRE_ELEMENT_BYTES
from star.plan import LatePolicy, SyncPlan, asgd
from star.processes import ProcessGroup, _wait_ready
from star.rpc import star_pb2 as pb
from star.limits import MAX_BATCH_SIZE
from star.rpc.common import (
    MAX_EPOCH,
    MAX_LABEL_CHARS,
    MAX_MESSAGE_BYTES,
    address,
    max_stream_chunks,
    plan_to_proto,
)
from star.rpc.ps_client import PSClient
from star.rpc.security import TOKEN_ENV, TOKEN_METADATA_KEY, Credentials

pytestmark = pytest.mark.integration

TOKEN = "fuzz-" + "0123456789abcdef" * 3
NUMEL = 256
NUM_WORKERS = 4
MAX_WORKERS = PSConfig().max_workers  # the fuzzed PS runs with the defaults: worker ids 0..MAX_WORKERS-1
MAX_TOTAL_NUMEL = PSConfig().max_model_bytes // 4  # the largest model a Register/Init may declare, in float32 elements
PLAN_WORKERS = [0, 1]  # ASGD over these; worker 2 is registered but not in the plan
CALL_DEADLINE_S = 10.0  # "no hang": every call, refused or not, returns well within this
IDLE_TIMEOUT_S = 1.0
PS_EXAMPLES_PER_CASE = 6  # times each case's weight in PS_CASES: about 630 calls
COORDINATOR_EXAMPLES_PER_CASE = 8  # times each case's weight in COORDINATOR_CASES: about 440 calls
FUZZ = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Statuses a refusal may carry: each a deliberate answer of the server. UNKNOWN/INTERNAL (an exception escaped
# a servicer), UNIMPLEMENTED, UNAVAILABLE and a client-side DEADLINE_EXCEEDED (a hang) are bugs.
REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.DEADLINE_EXCEEDED,  # only the server's idle-stream refusal: see _refusal_kind
}
# gRPC's own answers to bytes that do not parse as the request message (before any servicer code runs);
# accepted only when the bytes sent really do not parse.
PARSE_FAILURES = {
    grpc.StatusCode.INTERNAL: ("Exception deserializing request",),  # sync server (the coordinator)
    grpc.StatusCode.UNKNOWN: ("Error parsing message", "deserializ"),  # grpc.aio server (the PS)
}
PUSH_STATUSES = {"pending", "applied", "late_applied", "late_dropped", "skipped_nonfinite"}
# The PS's rejection reasons the fuzz must reach (by rejected_<reason> counters). Not here: not_initialized and
# no_plan (the fuzzed PS has both), bad_layout (unreachable with one PS), idle_stream (its own test below),
# redirected/moved/moving (would need a real hand-over).
PS_REASONS = {
    "bad_worker_id", "unknown_worker", "bad_total_numel", "layout_mismatch", "bad_dtype", "bad_length",
    "bad_batch_size", "bad_stream", "bad_chunk", "too_many_chunks", "oversized_chunk", "nonfinite",
    "future_epoch", "stale_epoch", "not_in_plan", "push_without_pull", "base_version_mismatch",
    "bad_plan", "stale_plan", "bad_address", "bad_timeout",
}
PS_REQUESTS = {"Register": pb.RegisterRequest, "Init": pb.InitRequest, "Push": pb.PushRequest, "Pull": pb.PullRequest,
               "ConfigurePlan": pb.Plan, "Stats": pb.StatsRequest, "Health": pb.HealthRequest,
               "MigrateOut": pb.MigrateOutRequest}
PS_KINDS = {"Register": "unary", "Init": "client_stream", "Push": "client_stream", "Pull": "server_stream",
            "ConfigurePlan": "unary", "Stats": "unary", "Health": "unary", "MigrateOut": "server_stream"}
# Random bytes never go to MigrateOut: bytes that happen to parse as a valid request would hand the shard away.
PS_RANDOM_METHODS = sorted(set(PS_KINDS) - {"MigrateOut"})
COORDINATOR_REQUESTS = {"Join": pb.JoinRequest, "Report": pb.IterationReport, "SetDirectives": pb.SetDirectivesRequest,
                        "JobStatus": pb.JobStatusRequest, "Health": pb.HealthRequest,
                        "ReportResources": pb.HostResources, "MoveShard": pb.MoveShardRequest}
# Random bytes never go to ReportResources or MoveShard: a valid one would register a host or start a move.
COORDINATOR_RANDOM_METHODS = ["Health", "Join", "JobStatus", "Report", "SetDirectives"]


@dataclass(frozen=True)
class Refuse:
    """The answer a one-field mutation must get: `code`, and the PS counter `rejected_<reason>` bumped by one
    (reason None: refused before any servicer code, no counter). For the coordinator, `reason` is the field
    the refusal must name."""

    code: grpc.StatusCode
    reason: str | None


ACCEPT = "accept"  # a valid message: must be served
ANY = None  # a byte-mutated or random message: any clean outcome


@dataclass
class Case:
    label: str  # "<method>:<what was broken>", for the tally and failure messages
    method: str
    payload: bytes | list[bytes]
    meta: list[tuple[str, str]]
    expect: Refuse | str | None
    prepare: Callable[[], None] | None = None  # run before the "before" snapshot (e.g. a first, valid push)


class Daemons:
    """One PS under fuzz, and a coordinator (with its own PS, so the fuzzed PS's state is the test's alone)."""

    def __init__(self, tmp: Path):
        (tmp / "logs").mkdir()
        self.group = ProcessGroup(tmp / "logs", env={TOKEN_ENV: TOKEN})
        self.ps = self._start("ps-fuzz", ["ps", "--ps-index", "0", "--num-ps", "1", "--optimizer.name", "sgd",
                                          "--optimizer.lr", "0.01", "--stream-idle-timeout-s", str(IDLE_TIMEOUT_S)], tmp)
        self.ps_for_coordinator = self._start("ps-coord", ["ps", "--optimizer.name", "sgd", "--optimizer.lr", "0.1"], tmp)
        self.out = tmp / "run"
        self.coordinator = self._start(
            "coordinator",
            ["coordinator", "--ps-addresses", self.ps_for_coordinator, "--workers", str(NUM_WORKERS), "--task", "digits",
             "--startup-timeout-s", "3600", "--eval-period-s", "2", "--out", str(self.out),
             "--control.decision_period_s", "3600"],  # parked: no background decision writes events or changes the mode
            tmp,
        )
        self.events = self.out / "events.jsonl"
        self.channel = grpc.insecure_channel(self.ps, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
        self.coordinator_channel = grpc.insecure_channel(self.coordinator, options=[("grpc.max_send_message_length", 8 * 1024 * 1024)])
        credentials = Credentials(token=TOKEN)
        self.client = PSClient([self.ps], worker_id=0, credentials=credentials)
        self.client.wait_ready(30)
        self.client.init_if_needed(torch.zeros(NUMEL), self.client.register(NUMEL))
        for worker in (1, 2):
            PSClient([self.ps], worker_id=worker, credentials=credentials).register(NUMEL)
        self.registered = {0, 1, 2}  # worker ids the PS knows (a random Register that gets through adds one)
        self.client.configure(asgd(PLAN_WORKERS, epoch=1))
        self.seen: Counter[str] = Counter()  # case label -> examples
        self.reasons: Counter[str] = Counter()  # rejected_<reason> bumps observed by the PS fuzz
        self.outcomes: Counter[str] = Counter()  # "<label>-><status>" of refused byte-mutated and random messages

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


# ---------------------------------------------------------------- raw calls and checks


def _call(channel: grpc.Channel, service: str, method: str, kind: str, payload, metadata) -> bytes | list[bytes]:
    """Send already-serialised bytes, exactly as given, to `method`; raises grpc.RpcError on refusal."""
    path = f"/star.{service}/{method}"
    if kind == "unary":
        return channel.unary_unary(path)(payload, timeout=CALL_DEADLINE_S, metadata=metadata)
    if kind == "client_stream":
        return channel.stream_unary(path)(iter(payload), timeout=CALL_DEADLINE_S, metadata=metadata)
    return list(channel.unary_stream(path)(payload, timeout=CALL_DEADLINE_S, metadata=metadata))


def _parses(request_type, payload: bytes | list[bytes]) -> bool:
    try:
        for blob in payload if isinstance(payload, list) else [payload]:
            request_type.FromString(blob)
    except DecodeError:
        return False
    return True


def _refusal_kind(error: grpc.RpcError, request_type, payload) -> str:
    """'auth', 'parse' (gRPC refused bytes that are not the message) or 'servicer'; fails on anything else."""
    code, details = error.code(), error.details() or ""
    if code in PARSE_FAILURES and any(marker in details for marker in PARSE_FAILURES[code]):
        assert not _parses(request_type, payload), f"{code} {details!r} for bytes that parse as {request_type.__name__}"
        return "parse"
    assert code in REFUSALS, f"not a deliberate refusal: {code} {details!r}"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        assert "stream_idle_timeout_s" in details, f"the call hung until the client's deadline: {details!r}"
    return "auth" if code == grpc.StatusCode.UNAUTHENTICATED else "servicer"


def _token_sent_once(meta: list[tuple[str, str]]) -> bool:
    return (TOKEN_METADATA_KEY, TOKEN) in meta and sum(k == TOKEN_METADATA_KEY for k, _ in meta) == 1


# ---------------------------------------------------------------- metadata

_KEY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-_."
u32 = st.one_of(st.integers(0, 4), st.integers(0, 2**32 - 1))
u64 = st.one_of(st.integers(0, 4), st.integers(0, 2**64 - 1))
any_float = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0.0, 2.0))
bad_seconds = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, -1e-9, -1.0]),
                        st.floats(ABSURD_S, 1e300, exclude_min=True), st.floats(-1e300, 0.0, exclude_max=True))


def _extra_headers(data: st.DataObject) -> list[tuple[str, str]]:
    pairs = []
    for _ in range(data.draw(st.integers(0, 3))):
        key = "x-" + data.draw(st.text(_KEY_CHARS, min_size=1, max_size=20))
        if key.endswith("-bin"):
            key += "x"
        pairs.append((key, data.draw(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=64))))
    return pairs


def _good_meta(data: st.DataObject) -> list[tuple[str, str]]:
    """The right token once, sometimes with harmless extra headers."""
    return [(TOKEN_METADATA_KEY, TOKEN)] + (_extra_headers(data) if data.draw(st.integers(0, 3)) == 0 else [])


TOKEN_MUTATIONS = ["token_missing", "token_wrong", "token_twice_wrong", "token_twice_right", "token_garbage", "token_prefix"]


def _bad_meta(data: st.DataObject, how: str) -> list[tuple[str, str]]:
    """One thing wrong with the token; every such call must be UNAUTHENTICATED before any servicer code."""
    extra = _extra_headers(data)
    if how == "token_missing":
        return extra
    if how == "token_wrong":
        i = data.draw(st.integers(0, len(TOKEN) - 1))
        wrong = TOKEN[:i] + ("x" if TOKEN[i] != "x" else "y") + TOKEN[i + 1 :]
        return [(TOKEN_METADATA_KEY, wrong)] + extra
    if how == "token_twice_wrong":
        return [(TOKEN_METADATA_KEY, TOKEN), (TOKEN_METADATA_KEY, TOKEN + "x")] + extra
    if how == "token_twice_right":
        return [(TOKEN_METADATA_KEY, TOKEN), (TOKEN_METADATA_KEY, TOKEN)] + extra
    if how == "token_prefix":
        return [(TOKEN_METADATA_KEY, TOKEN[: data.draw(st.integers(0, len(TOKEN) - 1))])] + extra
    garbage = data.draw(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=200).filter(lambda s: s != TOKEN))
    return [(TOKEN_METADATA_KEY, garbage)] + extra


def _random_meta(data: st.DataObject) -> list[tuple[str, str]]:
    how = data.draw(st.sampled_from(["right"] * 8 + TOKEN_MUTATIONS))
    return _good_meta(data) if how == "right" else _bad_meta(data, how)


def _mutate(data: st.DataObject, blob: bytes) -> bytes:
    """Flip, drop or insert a few bytes of a serialised message."""
    raw = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "truncate", "insert"]))
        at = data.draw(st.integers(0, 2**16))  # taken modulo the length: draws must not depend on the live state
        if op == "flip" and raw:
            raw[at % len(raw)] ^= data.draw(st.integers(1, 255))
        elif op == "truncate" and raw:
            del raw[at % len(raw):]
        else:
            raw[at % (len(raw) + 1):0] = data.draw(st.binary(min_size=1, max_size=8))
    return bytes(raw)


# ---------------------------------------------------------------- PS: valid messages, one thing broken


def _values(data: st.DataObject, numel: int = NUMEL) -> np.ndarray:
    seed = data.draw(st.integers(0, 2**32 - 1))
    scale = data.draw(st.sampled_from([0.0, 1e-6, 1e-3, 1.0]))
    return (np.random.default_rng(seed).standard_normal(numel) * scale).astype("<f4")


def _stream(header_field: str, request_type, header, chunks: list[tuple[int, bytes]]) -> list:
    return [request_type(**{header_field: header})] + [request_type(chunk=pb.TensorChunk(offset=o, data=d)) for o, d in chunks]


def _serialise(messages: list) -> list[bytes]:
    return [m.SerializeToString() for m in messages]


CHUNK_MUTATIONS = ["chunk_offset", "chunk_past_end", "chunk_ragged", "chunk_empty", "too_many_chunks", "oversized_chunk",
                   "truncated_payload", "header_only", "two_headers", "chunk_before_header", "no_header", "empty_stream"]


def _break_stream(data: st.DataObject, how: str, header_field: str, request_type, header, payload: bytes) -> tuple[list, Refuse]:
    """The valid stream (header, one chunk at offset 0: a shard of NUMEL elements allows one chunk), one aspect broken."""
    inv, exhausted = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED
    assert max_stream_chunks(NUMEL) == 1
    chunks = [(0, payload)]
    if how == "chunk_offset":
        chunks = [(data.draw(st.one_of(st.integers(1, NUMEL), st.integers(1, 2**64 - 1))), payload)]
        expect = Refuse(inv, "bad_chunk")
    elif how == "chunk_past_end":
        chunks = [(0, payload + bytes(4 * data.draw(st.integers(1, 64))))]
        expect = Refuse(inv, "bad_chunk")
    elif how == "chunk_ragged":
        cut = data.draw(st.integers(1, 3))
        chunks = [(0, payload[:-cut] if data.draw(st.booleans()) else payload + bytes(cut))]
        expect = Refuse(inv, "bad_chunk")
    elif how == "chunk_empty":
        chunks = [(0, b"")]
        expect = Refuse(inv, "bad_chunk")
    elif how == "too_many_chunks":
        split = data.draw(st.integers(1, NUMEL - 1))
        chunks = [(0, payload[: 4 * split]), (split, payload[4 * split :])]
        expect = Refuse(exhausted, "too_many_chunks")
    elif how == "oversized_chunk":  # over the PS's chunk limit, under gRPC's message limit: the servicer refuses it
        chunks = [(0, bytes(MAX_CHUNK_BYTES + 4 * data.draw(st.integers(1, 1024))))]
        expect = Refuse(exhausted, "oversized_chunk")
    elif how == "truncated_payload":
        chunks = [(0, payload[: 4 * data.draw(st.integers(1, NUMEL - 1))])]
        expect = Refuse(inv, "bad_length")
    elif how == "header_only":
        chunks = []
        expect = Refuse(inv, "bad_length")
    else:
        expect = Refuse(inv, "bad_stream")
    messages = _stream(header_field, request_type, header, chunks)
    if how == "two_headers":
        messages.insert(data.draw(st.integers(1, len(messages))), request_type(**{header_field: header}))
    elif how == "chunk_before_header":
        messages = messages[1:] + messages[:1]
    elif how == "no_header":
        messages = messages[1:]
    elif how == "empty_stream":
        messages = []
    return messages, expect


PUSH_MUTATIONS = ["unknown_worker", "bad_worker_id", "not_in_plan", "bad_dtype", "bad_numel", "bad_batch_size",
                  "stale_epoch", "future_epoch", "base_version_mismatch", "push_without_pull", "nonfinite",
                  *CHUNK_MUTATIONS, *TOKEN_MUTATIONS]


def _valid_push_header(data: st.DataObject, epoch: int, version: int, worker: int = 0) -> pb.PushHeader:
    return pb.PushHeader(worker_id=worker, plan_epoch=epoch, base_version=version, iteration=data.draw(u64),
                         dtype="float32", numel=NUMEL, batch_size=data.draw(st.integers(0, MAX_BATCH_SIZE)))


def _unregistered(data: st.DataObject, d: Daemons) -> int:
    worker = data.draw(st.one_of(st.integers(3, 16), st.integers(3, MAX_WORKERS - 1)))
    while worker in d.registered:  # mapped, not filtered: what hypothesis draws must not depend on the live state
        worker = 3 + (worker - 2) % (MAX_WORKERS - 3)
    return worker


def _push_case(data: st.DataObject, d: Daemons, epoch: int, version: int, how: str) -> Case:
    """A push that is valid for worker 0 (which has just pulled `version` under `epoch`), one thing broken."""
    header = _valid_push_header(data, epoch, version)
    values = _values(data)
    inv, fp = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION
    meta, expect, prepare = _good_meta(data), ACCEPT, None
    if how == "unknown_worker":
        header.worker_id, expect = _unregistered(data, d), Refuse(grpc.StatusCode.NOT_FOUND, "unknown_worker")
    elif how == "bad_worker_id":
        header.worker_id, expect = data.draw(st.integers(MAX_WORKERS, 2**32 - 1)), Refuse(inv, "bad_worker_id")
    elif how == "not_in_plan":
        header.worker_id, expect = 2, Refuse(fp, "not_in_plan")
    elif how == "bad_dtype":
        header.dtype = data.draw(st.one_of(st.sampled_from(["float16", "FLOAT32", "float64", "bf16", "float32 "]),
                                           st.text(max_size=16)).filter(lambda s: s and s not in WIRE_ELEMENT_BYTES))
        expect = Refuse(inv, "bad_dtype")
    elif how == "bad_numel":
        header.numel, expect = data.draw(u64.filter(lambda n: n != NUMEL)), Refuse(inv, "bad_length")
    elif how == "bad_batch_size":
        header.batch_size, expect = data.draw(st.integers(MAX_BATCH_SIZE + 1, 2**32 - 1)), Refuse(inv, "bad_batch_size")
    # Offsets from the live epoch/version, not bounds: what hypothesis draws must not depend on the live state.
    elif how == "stale_epoch":
        header.plan_epoch = epoch - min(data.draw(st.one_of(st.just(1), st.integers(1, 2**64 - 1))), epoch)
        expect = Refuse(fp, "stale_epoch")
    elif how == "future_epoch":
        header.plan_epoch = min(epoch + data.draw(st.one_of(st.just(1), st.integers(1, 2**64 - 1))), 2**64 - 1)
        expect = Refuse(inv, "future_epoch")
    elif how == "base_version_mismatch":
        delta = data.draw(st.one_of(st.sampled_from([1, 2**64 - 1]), st.integers(1, 2**64 - 1)))  # 2**64 - 1: version - 1
        header.base_version, expect = (version + delta) % 2**64, Refuse(inv, "base_version_mismatch")
    elif how == "push_without_pull":  # a first, valid push takes the pull; the same push again has none
        first = _serialise(_stream("header", pb.PushRequest, header, [(0, values.tobytes())]))
        prepare = lambda: _call(d.channel, "ParameterServer", "Push", "client_stream", first, [(TOKEN_METADATA_KEY, TOKEN)])  # noqa: E731
        expect = Refuse(fp, "push_without_pull")
    elif how == "nonfinite":
        values[data.draw(st.integers(0, NUMEL - 1))] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        expect = Refuse(inv, "nonfinite")
    elif how in TOKEN_MUTATIONS:
        meta, expect = _bad_meta(data, how), Refuse(grpc.StatusCode.UNAUTHENTICATED, None)
    if how in CHUNK_MUTATIONS:
        messages, expect = _break_stream(data, how, "header", pb.PushRequest, header, values.tobytes())
    else:
        messages = _stream("header", pb.PushRequest, header, [(0, values.tobytes())])
    return Case(f"Push:{how}", "Push", _serialise(messages), meta, expect, prepare)


REGISTER_MUTATIONS = ["bad_worker_id", "bad_total_numel", "layout_mismatch"]


def _register_case(data: st.DataObject, d: Daemons, how: str) -> Case:
    request = pb.RegisterRequest(worker_id=data.draw(st.sampled_from([0, 1, 2])), total_numel=NUMEL)  # registered at start
    inv, expect = grpc.StatusCode.INVALID_ARGUMENT, ACCEPT
    if how == "bad_worker_id":
        request.worker_id, expect = data.draw(st.integers(MAX_WORKERS, 2**32 - 1)), Refuse(inv, "bad_worker_id")
    elif how == "bad_total_numel":
        request.total_numel = data.draw(st.one_of(st.just(0), st.integers(MAX_TOTAL_NUMEL + 1, 2**64 - 1)))
        expect = Refuse(inv, "bad_total_numel")
    elif how == "layout_mismatch":
        request.total_numel = data.draw(st.integers(1, MAX_TOTAL_NUMEL).filter(lambda n: n != NUMEL))
        expect = Refuse(inv, "layout_mismatch")
    return Case(f"Register:{how}", "Register", request.SerializeToString(), _good_meta(data), expect)


INIT_MUTATIONS = ["bad_total_numel", "layout_mismatch", "bad_dtype", *CHUNK_MUTATIONS]


def _init_case(data: st.DataObject, how: str) -> Case:
    """Init of an initialised PS: a valid one is answered applied=False and changes nothing."""
    header = pb.InitHeader(total_numel=NUMEL, dtype="float32")
    inv, expect = grpc.StatusCode.INVALID_ARGUMENT, ACCEPT
    if how == "bad_total_numel":
        header.total_numel = data.draw(st.one_of(st.just(0), st.integers(MAX_TOTAL_NUMEL + 1, 2**64 - 1)))
        expect = Refuse(inv, "bad_total_numel")
    elif how == "layout_mismatch":
        header.total_numel = data.draw(st.integers(1, MAX_TOTAL_NUMEL).filter(lambda n: n != NUMEL))
        expect = Refuse(grpc.StatusCode.FAILED_PRECONDITION, "layout_mismatch")
    elif how == "bad_dtype":
        header.dtype, expect = data.draw(st.sampled_from(["", "float16", "x"])), Refuse(inv, "bad_dtype")
    payload = _values(data).tobytes()
    if how in CHUNK_MUTATIONS:
        messages, expect = _break_stream(data, how, "header", pb.InitRequest, header, payload)
    else:
        messages = _stream("header", pb.InitRequest, header, [(0, payload)])
    return Case(f"Init:{how}", "Init", _serialise(messages), _good_meta(data), expect)


PULL_MUTATIONS = ["unknown_worker", "bad_worker_id"]


def _pull_case(data: st.DataObject, d: Daemons, how: str) -> Case:
    request = pb.PullRequest(worker_id=0)
    expect = ACCEPT
    if how == "valid_observer":
        request.worker_id, request.observer = data.draw(st.integers(0, MAX_WORKERS - 1)), True
    elif how == "unknown_worker":
        request.worker_id, expect = _unregistered(data, d), Refuse(grpc.StatusCode.NOT_FOUND, "unknown_worker")
    elif how == "bad_worker_id":
        request.worker_id, request.observer = data.draw(st.integers(MAX_WORKERS, 2**32 - 1)), data.draw(st.booleans())
        expect = Refuse(grpc.StatusCode.INVALID_ARGUMENT, "bad_worker_id")
    return Case(f"Pull:{how}", "Pull", request.SerializeToString(), _good_meta(data), expect)


def _fuzz_plan(epoch: int, in_force: str) -> SyncPlan:
    """ASGD over PLAN_WORKERS at `epoch`, with the late policy that the plan in force (its Stats description) does
    not have: a change of synchronisation, so every earlier epoch is stale. (A PS takes pushes of every epoch since
    the plan's synchronisation last changed: a pacing-only switch leaves the previous epoch valid.) ASGD closes every
    round at once, so the late policy itself never matters here."""
    late = in_force.rsplit(" late=", 1)[-1].split()[0] if " late=" in in_force else ""
    return replace(asgd(PLAN_WORKERS, epoch=epoch), late_policy=LatePolicy.DROP if late == "apply" else LatePolicy.APPLY)


PLAN_MUTATIONS = ["stale_plan", "epoch_too_big", "label_too_long", "worker_too_big", "quorum_zero", "quorum_too_big",
                  "duplicate_worker", "empty_group", "no_groups", "bad_scale", "bad_late_policy", "bad_pace"]


def _plan_case(data: st.DataObject, epoch: int, in_force: str, how: str) -> Case:
    """The fuzz plan (ASGD over PLAN_WORKERS) at the next epoch, one field broken; or valid: a full switch, or a
    pacing-only one (the same synchronisation as the plan in force, undone after the example)."""
    plan = plan_to_proto(_fuzz_plan(epoch + 1, in_force))
    expect: Refuse | str = Refuse(grpc.StatusCode.INVALID_ARGUMENT, "bad_plan")
    if how == "valid":
        expect = ACCEPT
    elif how == "valid_pace_only":
        plan.late_policy = LatePolicy.APPLY.value if plan.late_policy == LatePolicy.DROP.value else LatePolicy.DROP.value
        plan.push_pace_bytes_per_s = data.draw(st.floats(1.0, 1e12))
        expect = ACCEPT
    elif how == "stale_plan":
        plan.epoch = epoch - min(data.draw(st.one_of(st.just(0), st.integers(0, 2**64 - 1))), epoch)
        expect = Refuse(grpc.StatusCode.FAILED_PRECONDITION, "stale_plan")
    elif how == "epoch_too_big":
        plan.epoch = data.draw(st.integers(MAX_EPOCH + 1, 2**64 - 1))
    elif how == "label_too_long":
        plan.label = "x" * data.draw(st.integers(MAX_LABEL_CHARS + 1, 4 * MAX_LABEL_CHARS))
    elif how == "worker_too_big":
        plan.groups[data.draw(st.integers(0, 1))].workers[0] = data.draw(st.integers(MAX_WORKERS, 2**32 - 1))
    elif how == "quorum_zero":
        plan.groups[data.draw(st.integers(0, 1))].quorum = 0
    elif how == "quorum_too_big":
        plan.groups[data.draw(st.integers(0, 1))].quorum = data.draw(st.integers(2, 2**32 - 1))
    elif how == "duplicate_worker":
        plan.groups[1].workers.append(0)
    elif how == "empty_group":
        plan.groups.add(quorum=1)
    elif how == "no_groups":
        del plan.groups[:]
    elif how == "bad_scale":
        plan.scale = data.draw(st.sampled_from(["bogus", "PER_ARRIVALS", " per_arrivals"]))
    elif how == "bad_late_policy":
        plan.late_policy = data.draw(st.sampled_from(["bogus", "Drop", "apply "]))
    elif how == "bad_pace":
        plan.push_pace_bytes_per_s = math.inf
    return Case(f"ConfigurePlan:{how}", "ConfigurePlan", plan.SerializeToString(), _good_meta(data), expect)


MIGRATE_MUTATIONS = ["empty_address", "long_address", "bad_timeout"]


def _migrate_case(data: st.DataObject, how: str) -> Case:
    """MigrateOut, always invalid (a valid one would hand the shard away): a bad address or drain timeout."""
    request = pb.MigrateOutRequest(new_address="127.0.0.1:9", drain_timeout_s=data.draw(st.sampled_from([0.0, 1.0])))
    reason = "bad_timeout" if how == "bad_timeout" else "bad_address"
    if how == "empty_address":
        request.new_address = ""
    elif how == "long_address":
        request.new_address = "h" * data.draw(st.integers(MAX_LABEL_CHARS + 1, 4 * MAX_LABEL_CHARS)) + ":1"
    else:
        request.drain_timeout_s = data.draw(st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, -1.0, -1e-9]),
                                                      st.floats(3600.0, 1e300, exclude_min=True)))
    return Case(f"MigrateOut:{how}", "MigrateOut", request.SerializeToString(), _good_meta(data),
                Refuse(grpc.StatusCode.INVALID_ARGUMENT, reason))


BYTE_MUTATED = ["Push", "Push", "Register", "Pull", "ConfigurePlan", "Init"]


def _byte_mutated_case(data: st.DataObject, epoch: int, version: int, method: str) -> Case:
    """A valid message with a few bytes flipped, dropped or inserted: any clean answer."""
    if method == "Push":
        blobs = _serialise(_stream("header", pb.PushRequest, _valid_push_header(data, epoch, version), [(0, _values(data).tobytes())]))
        i = data.draw(st.integers(0, len(blobs) - 1))
        blobs[i] = _mutate(data, blobs[i])
        return Case("bytes:Push", method, blobs, _good_meta(data), ANY)
    if method == "Init":
        blobs = _serialise(_stream("header", pb.InitRequest, pb.InitHeader(total_numel=NUMEL, dtype="float32"), [(0, bytes(4 * NUMEL))]))
        i = data.draw(st.integers(0, len(blobs) - 1))
        blobs[i] = _mutate(data, blobs[i])
        return Case("bytes:Init", method, blobs, _good_meta(data), ANY)
    message = {"Register": pb.RegisterRequest(worker_id=0, total_numel=NUMEL), "Pull": pb.PullRequest(worker_id=0),
               "ConfigurePlan": plan_to_proto(asgd(PLAN_WORKERS, epoch=epoch + 1))}[method]
    return Case(f"bytes:{method}", method, _mutate(data, message.SerializeToString()), _good_meta(data), ANY)


RANDOM_KINDS = ["push", "push", "random_bytes", "random_bytes", "register", "pull", "plan", "init"]


def _random_case(data: st.DataObject, epoch: int, version: int, kind: str) -> Case:
    """Every field independently random (the shallow fuzz, kept for breadth), or random bytes."""
    meta = _random_meta(data)
    if kind == "push":
        header = pb.PushHeader(
            worker_id=data.draw(st.one_of(st.just(0), u32)),
            plan_epoch=data.draw(st.one_of(st.just(epoch), u64)),
            base_version=data.draw(st.one_of(st.just(version), u64)),
            iteration=data.draw(u64),
            dtype=data.draw(st.one_of(st.just("float32"), st.text(max_size=16))),
            numel=data.draw(st.one_of(st.just(NUMEL), u64)),
            batch_size=data.draw(u32),
        )
        chunks = data.draw(st.lists(st.tuples(u64, st.binary(max_size=2048)), max_size=6))
        messages = _stream("header", pb.PushRequest, header, chunks)
        if data.draw(st.booleans()):
            messages = data.draw(st.permutations(messages))
        return Case("random:Push", "Push", _serialise(messages), meta, ANY)
    if kind == "random_bytes":
        method = data.draw(st.sampled_from(PS_RANDOM_METHODS))
        if PS_KINDS[method] == "client_stream":
            return Case(f"random:bytes:{method}", method, data.draw(st.lists(st.binary(max_size=512), max_size=5)), meta, ANY)
        return Case(f"random:bytes:{method}", method, data.draw(st.binary(max_size=512)), meta, ANY)
    if kind == "register":
        request = pb.RegisterRequest(worker_id=data.draw(u32), total_numel=data.draw(u64))
        return Case("random:Register", "Register", request.SerializeToString(), meta, ANY)
    if kind == "pull":
        request = pb.PullRequest(worker_id=data.draw(u32), observer=data.draw(st.booleans()))
        return Case("random:Pull", "Pull", request.SerializeToString(), meta, ANY)
    if kind == "plan":
        groups = data.draw(st.lists(st.tuples(st.lists(u32, max_size=4), u32), max_size=3))
        plan = pb.Plan(
            epoch=data.draw(st.one_of(st.just(epoch + 1), u64)),
            groups=[pb.PlanGroup(workers=w, quorum=q) for w, q in groups],
            staleness_bound=data.draw(st.integers(-(2**31), 2**31 - 1)),
            scale=data.draw(st.sampled_from(["", "per_arrivals", "bogus"])),
            late_policy=data.draw(st.sampled_from(["", "drop", "bogus"])),
            label=data.draw(st.text(max_size=300)),
            push_pace_bytes_per_s=data.draw(any_float),
        )
        return Case("random:ConfigurePlan", "ConfigurePlan", plan.SerializeToString(), meta, ANY)
    header = pb.InitHeader(total_numel=data.draw(st.one_of(st.just(NUMEL), u64)), dtype=data.draw(st.sampled_from(["float32", "x"])))
    chunks = data.draw(st.lists(st.tuples(u64, st.binary(max_size=1024)), max_size=4))
    return Case("random:Init", "Init", _serialise(_stream("header", pb.InitRequest, header, chunks)), meta, ANY)


# (family, what is broken): each is fuzzed in turn for PS_EXAMPLES_PER_CASE examples times its count here, so every
# case is reached whatever hypothesis's choices; within a case, hypothesis draws the values (and the metadata).
PS_CASES = Counter(
    [("push", "valid")] * 4 + [("push", how) for how in PUSH_MUTATIONS]
    + [("register", how) for how in ["valid", *REGISTER_MUTATIONS]]
    + [("init", how) for how in ["valid", *INIT_MUTATIONS]]
    + [("pull", how) for how in ["valid", "valid_observer", *PULL_MUTATIONS]]
    + [("plan", how) for how in ["valid", "valid_pace_only", *PLAN_MUTATIONS]]
    + [("migrate", how) for how in MIGRATE_MUTATIONS]
    + [("stats", "Stats"), ("stats", "Health")]
    + [("bytes", method) for method in BYTE_MUTATED]
    + [("random", kind) for kind in RANDOM_KINDS * 3]
)


def _ps_case(data: st.DataObject, d: Daemons, state: "PsState", family: str, how: str) -> Case:
    epoch, version = state.epoch, state.version
    if family == "push":
        return _push_case(data, d, epoch, version, how)
    if family == "register":
        return _register_case(data, d, how)
    if family == "init":
        return _init_case(data, how)
    if family == "pull":
        return _pull_case(data, d, how)
    if family == "plan":
        return _plan_case(data, epoch, state.state["plan"], how)
    if family == "migrate":
        return _migrate_case(data, how)
    if family == "stats":
        return Case(f"{how}:valid", how, b"", _good_meta(data), ACCEPT)
    if family == "bytes":
        return _byte_mutated_case(data, epoch, version, how)
    return _random_case(data, epoch, version, how)


# ---------------------------------------------------------------- PS: state and the property


OBSERVING = "observer_board_pulls"  # counts the observer pulls that read this very state, not a change


@dataclass
class PsState:
    state: dict  # everything a refusal must leave as it was
    rejected: Counter  # reason -> count (Stats counters rejected_<reason>)
    params: torch.Tensor

    @property
    def epoch(self) -> int:
        return self.state["plan_epoch"]

    @property
    def version(self) -> int:
        return self.state["version"]


def _ps_state(client: PSClient) -> PsState:
    s = client.stats(timeout_s=CALL_DEADLINE_S)[0]
    counters = dict(s.counters)
    rejected = Counter({k[len("rejected_"):]: v for k, v in counters.items() if k.startswith("rejected_")})
    state = {
        "version": s.version, "plan_epoch": s.plan_epoch, "plan": s.plan, "accepted": s.accepted, "applied": s.applied,
        "dropped": s.dropped, "pending": s.pending, "waiting_pulls": s.waiting_pulls,
        "counters": {k: v for k, v in counters.items() if not k.startswith("rejected_") and k != OBSERVING},
        "staleness": dict(s.staleness), "range": (s.range_start, s.range_end), "moved_to": s.moved_to,
        "noise": (s.noise_small_sq, s.noise_big_sq, s.noise_small_batch, s.noise_big_batch),
    }
    params = torch.empty(NUMEL)
    client.pull(params, timeout_s=CALL_DEADLINE_S, observer=True)
    return PsState(state, rejected, params)


def _state_diff(before: dict, after: dict) -> dict:
    return {k: (before[k], after.get(k)) for k in before if before[k] != after.get(k)}


def _restore_fuzz_plan(d: Daemons) -> None:
    """Back to the fuzz plan with a full switch, so every epoch before the one in force is stale again."""
    state = _ps_state(d.client)
    d.client.configure(_fuzz_plan(state.epoch + 1, state.state["plan"]), timeout_s=CALL_DEADLINE_S)


def _check_ps_example(d: Daemons, case: Case) -> None:
    if case.prepare is not None:
        case.prepare()
    before = _ps_state(d.client)
    d.seen[case.label] += 1
    try:
        reply = _call(d.channel, "ParameterServer", case.method, PS_KINDS[case.method], case.payload, case.meta)
    except grpc.RpcError as error:
        d.assert_alive()
        where = f"{case.label}: {error.code()} {error.details()!r}"
        kind = _refusal_kind(error, PS_REQUESTS[case.method], case.payload)
        after = _ps_state(d.client)
        assert not _state_diff(before.state, after.state), f"{where} was refused but the state changed: {_state_diff(before.state, after.state)}"
        assert torch.equal(after.params, before.params), f"{where} was refused but the parameters changed"
        bumped = after.rejected - before.rejected
        assert not before.rejected - after.rejected, f"{where}: a rejected_* counter went down"
        if kind == "servicer":
            assert sum(bumped.values()) == 1, f"{where}: a deliberate refusal must count one rejected_<reason>, got {dict(bumped)}"
        else:
            assert not bumped, f"{where}: refused before the servicer, yet counted {dict(bumped)}"
        d.reasons.update(bumped)
        if not isinstance(case.expect, Refuse):
            d.outcomes[f"{case.label}->{error.code().name}"] += 1
        assert case.expect is not ACCEPT, f"{where}: a valid message was refused"
        if isinstance(case.expect, Refuse):
            assert error.code() == case.expect.code, f"{where}: expected {case.expect.code}"
            expected = Counter({case.expect.reason: 1}) if case.expect.reason else Counter()
            assert bumped == expected, f"{where}: expected rejected_{case.expect.reason}, counted {dict(bumped)}"
        return
    d.assert_alive()
    assert not isinstance(case.expect, Refuse), f"{case.label}: served, but must be refused with {case.expect}"
    assert _token_sent_once(case.meta), f"{case.label}: served without the token"
    after = _ps_state(d.client)
    assert torch.isfinite(after.params).all(), f"{case.label}: an accepted call made the parameters non-finite"
    if case.method == "Push":
        status = pb.PushReply.FromString(reply).status
        assert status in PUSH_STATUSES, f"{case.label}: push status {status!r}"
        if case.expect is ACCEPT:
            assert status == "applied", f"{case.label}: a valid ASGD push must be applied, got {status!r}"
    elif case.method == "Init":
        assert not pb.InitReply.FromString(reply).applied, f"{case.label}: an initialised PS initialised again"
        assert not _state_diff(before.state, after.state) and torch.equal(after.params, before.params)
    elif case.method == "Register":
        d.registered.add(pb.RegisterRequest.FromString(case.payload).worker_id)
    elif case.method == "ConfigurePlan" and case.label != "ConfigurePlan:valid":  # not a full switch to the fuzz plan
        _restore_fuzz_plan(d)
    elif case.method == "MigrateOut":
        pytest.fail(f"{case.label}: MigrateOut with a bad address/timeout was served: the shard may have moved")


def test_valid_ps_messages_with_one_thing_broken_are_refused_for_that_reason_and_change_nothing(daemons):
    d = daemons
    counted_before = _ps_state(d.client).rejected

    for (family, how), weight in PS_CASES.items():

        @settings(max_examples=PS_EXAMPLES_PER_CASE * weight, **FUZZ)
        @given(data=st.data())
        def fuzz(data):
            d.client.pull(torch.empty(NUMEL), timeout_s=CALL_DEADLINE_S)  # worker 0 has pulled: its valid push gets deep
            state = _ps_state(d.client)
            _check_ps_example(d, _ps_case(data, d, state, family, how))

        fuzz()
    counted = _ps_state(d.client).rejected - counted_before
    print(f"\nPS fuzz: {sum(d.seen.values())} calls, {len(d.seen)} cases; rejected_* counters reached: {dict(sorted(counted.items()))}")
    print("cases: " + ", ".join(f"{label}={n}" for label, n in sorted(d.seen.items())))
    print(f"byte-mutated and random messages refused: {dict(sorted(d.outcomes.items()))}")
    assert counted == d.reasons, (counted, d.reasons)
    missing = PS_REASONS - set(counted)
    assert not missing, f"the fuzz no longer reaches these PS rejection reasons: {sorted(missing)}"
    methods = {"push": "Push", "register": "Register", "init": "Init", "pull": "Pull", "plan": "ConfigurePlan", "migrate": "MigrateOut"}
    targeted = {f"{methods[family]}:{how}" for family, how in PS_CASES if family in methods}
    assert not targeted - set(d.seen), f"one-thing-broken cases the fuzz did not draw: {sorted(targeted - set(d.seen))}"
    d.assert_alive()


# ---------------------------------------------------------------- coordinator


def _valid_report(data: st.DataObject, worker: int) -> pb.IterationReport:
    seconds = st.floats(0.0, 1.0)
    return pb.IterationReport(worker_id=worker, iteration=data.draw(st.integers(0, 10**6)), compute_s=data.draw(seconds),
                              push_s=data.draw(seconds), pull_s=data.draw(seconds), batch_size=data.draw(st.sampled_from([0, 32])),
                              amp=data.draw(st.booleans()), loss=data.draw(any_float),  # a NaN loss is a true report
                              slowdown=data.draw(st.floats(0.0, 4.0)), cpu_percent=data.draw(st.floats(0.0, 400.0)))


def _valid_resources() -> pb.HostResources:
    return pb.HostResources(host="127.0.0.1", time_s=1.0, interval_s=1.0, cpu_count=2, cpu_percent=10.0, memory_percent=10.0,
                            nics=[pb.NicRate(name="lo", rx_bytes_per_s=1.0, tx_bytes_per_s=1.0)],
                            ps=[pb.PsRunning(ps_index=0, address="127.0.0.1:1")])


REPORT_FIELDS = ["worker_id", "compute_s", "push_s", "pull_s", "slowdown", "cpu_percent", "batch_size"]
JOIN_FIELDS = ["worker_id", "host", "batch_size"]
DIRECTIVES_FIELDS = ["worker_id", "directives.batch_size"]
RESOURCES_FIELDS = ["host", "time_s", "interval_s", "cpu_percent", "memory_percent", "cpu_count", "nics", "busy_share", "ps"]
MOVE_FIELDS = ["ps_index", "host"]
COORDINATOR_CASES = Counter(
    [("report", "valid")] * 3 + [("report", f) for f in REPORT_FIELDS]
    + [("join", f) for f in ["valid", *JOIN_FIELDS]]
    + [("directives", f) for f in ["valid", *DIRECTIVES_FIELDS]]
    + [("resources", f) for f in RESOURCES_FIELDS]
    + [("move", f) for f in MOVE_FIELDS]
    + [("status", "JobStatus"), ("status", "Health")]
    + [("token", how) for how in TOKEN_MUTATIONS]
    + [("bytes", "Report"), ("bytes", "Join")]
    + [("random", shape) for shape in ["report", "report", "join", "directives", "bytes", "bytes"] * 3]
)


def _coordinator_case(data: st.DataObject, kind: str, field: str) -> Case:
    """(A valid message, or one field broken: the refusal must be INVALID_ARGUMENT naming that field), or random."""
    inv = grpc.StatusCode.INVALID_ARGUMENT
    worker = data.draw(st.integers(0, NUM_WORKERS - 1))
    bad_worker = st.one_of(st.just(NUM_WORKERS), st.integers(NUM_WORKERS, 2**32 - 1))
    meta = _good_meta(data)
    if kind == "report":
        report = _valid_report(data, worker)
        if field == "worker_id":
            report.worker_id = data.draw(bad_worker)
        elif field in ("compute_s", "push_s", "pull_s"):
            setattr(report, field, data.draw(bad_seconds))
        elif field == "slowdown":
            report.slowdown = data.draw(st.one_of(st.sampled_from([math.nan, math.inf, -1.0]), st.floats(MAX_SLOWDOWN, 1e300, exclude_min=True)))
        elif field == "cpu_percent":
            report.cpu_percent = data.draw(st.one_of(st.sampled_from([math.nan, -math.inf, -0.5]), st.floats(MAX_CPU_PERCENT, 1e300, exclude_min=True)))
        elif field == "batch_size":
            report.batch_size = data.draw(st.integers(MAX_BATCH_SIZE + 1, 2**32 - 1))
        return Case(f"Report:{field}", "Report", report.SerializeToString(), meta, ACCEPT if field == "valid" else Refuse(inv, field))
    if kind == "join":
        request = pb.JoinRequest(worker_id=worker, host=data.draw(st.text(max_size=40)), pid=data.draw(u32), batch_size=32)
        if field == "worker_id":
            request.worker_id = data.draw(bad_worker)
        elif field == "host":
            request.host = data.draw(st.text(min_size=MAX_LABEL_CHARS + 1, max_size=2 * MAX_LABEL_CHARS))
        elif field == "batch_size":
            request.batch_size = data.draw(st.integers(MAX_BATCH_SIZE + 1, 2**32 - 1))
        return Case(f"Join:{field}", "Join", request.SerializeToString(), meta, ACCEPT if field == "valid" else Refuse(inv, field))
    if kind == "directives":
        request = pb.SetDirectivesRequest(worker_id=worker, directives=pb.Directives(amp=data.draw(st.booleans()), batch_size=32))
        if field == "worker_id":
            request.worker_id = data.draw(bad_worker)
        elif field == "directives.batch_size":
            request.directives.batch_size = data.draw(st.integers(MAX_BATCH_SIZE + 1, 2**32 - 1))
        return Case(f"SetDirectives:{field}", "SetDirectives", request.SerializeToString(), meta,
                    ACCEPT if field == "valid" else Refuse(inv, field))
    if kind == "resources":  # never valid: a valid one registers a host
        request = _valid_resources()
        if field == "host":
            request.host = data.draw(st.sampled_from(["", "h" * (MAX_LABEL_CHARS + 1)]))
        elif field == "cpu_count":
            request.cpu_count = data.draw(st.integers((1 << 16) + 1, 2**32 - 1))
        elif field == "nics":
            request.nics[0].rx_bytes_per_s = data.draw(st.sampled_from([math.nan, -1.0, 1e14]))
        elif field == "busy_share":
            request.nics[0].busy_share = data.draw(st.sampled_from([math.nan, -0.1, 1.5]))
        elif field == "ps":
            request.ps[0].address = ""
        else:
            setattr(request, field, data.draw(st.sampled_from([math.nan, math.inf, -1.0])))
        return Case(f"ReportResources:{field}", "ReportResources", request.SerializeToString(), meta, Refuse(inv, field))
    if kind == "move":  # never valid: a valid one starts a shard move
        request = pb.MoveShardRequest(ps_index=0, host="127.0.0.1")
        if field == "ps_index":
            request.ps_index = data.draw(st.integers(1, 2**32 - 1))
        else:
            request.host = data.draw(st.sampled_from(["", "h" * (MAX_LABEL_CHARS + 1)]))
        return Case(f"MoveShard:{field}", "MoveShard", request.SerializeToString(), meta, Refuse(inv, field))
    if kind == "status":
        return Case(f"{field}:valid", field, b"", meta, ACCEPT)
    if kind == "token":
        how = field
        return Case(f"Report:{how}", "Report", _valid_report(data, worker).SerializeToString(), _bad_meta(data, how),
                    Refuse(grpc.StatusCode.UNAUTHENTICATED, None))
    if kind == "bytes":
        method = field
        message = _valid_report(data, worker) if method == "Report" else pb.JoinRequest(worker_id=worker, host="h", batch_size=32)
        return Case(f"bytes:{method}", method, _mutate(data, message.SerializeToString()), meta, ANY)
    # fully random: fields independently random, or random bytes
    meta = _random_meta(data)
    shape = field
    worker = data.draw(st.one_of(st.integers(0, NUM_WORKERS - 1), u32))
    if shape == "report":
        fields = {n: data.draw(st.one_of(st.floats(0.0, 1.0), any_float)) for n in ("compute_s", "push_s", "pull_s", "slowdown", "cpu_percent")}
        report = pb.IterationReport(worker_id=worker, iteration=data.draw(u64), batch_size=data.draw(st.one_of(st.just(32), u32)),
                                    amp=data.draw(st.booleans()), loss=data.draw(any_float), **fields)
        return Case("random:Report", "Report", report.SerializeToString(), meta, ANY)
    if shape == "join":
        request = pb.JoinRequest(worker_id=worker, host=data.draw(st.text(max_size=400)), pid=data.draw(u32), batch_size=data.draw(u32))
        return Case("random:Join", "Join", request.SerializeToString(), meta, ANY)
    if shape == "directives":
        directives = pb.Directives(amp=data.draw(st.booleans()), batch_size=data.draw(st.one_of(st.integers(0, 64), u32)))
        request = pb.SetDirectivesRequest(worker_id=worker, directives=directives)
        return Case("random:SetDirectives", "SetDirectives", request.SerializeToString(), meta, ANY)
    method = data.draw(st.sampled_from(COORDINATOR_RANDOM_METHODS))
    return Case(f"random:bytes:{method}", method, data.draw(st.binary(max_size=512)), meta, ANY)


def _job_state(d: Daemons) -> tuple[dict, int]:
    """JobStatus (all but the clock-driven elapsed_s and iterations_per_s) and the events.jsonl line count."""
    s = pb.JobStatusReply.FromString(
        _call(d.coordinator_channel, "Coordinator", "JobStatus", "unary", b"", [(TOKEN_METADATA_KEY, TOKEN)])
    )
    status = {"state": s.state, "max_iteration": s.max_iteration, "metric": s.metric, "has_metric": s.has_metric,
              "metric_name": s.metric_name, "version": s.version, "mode": s.mode, "reached": s.reached, "tta_s": s.tta_s,
              "workers_reporting": s.workers_reporting, "reason": s.reason}
    with open(d.events, "rb") as handle:
        lines = sum(1 for _ in handle)
    return status, lines


def test_coordinator_messages_with_one_field_broken_are_refused_naming_it_and_change_nothing(daemons):
    d = daemons
    seen: Counter[str] = Counter()
    refused: Counter[str] = Counter()

    def check(case: Case) -> None:
        seen[case.label] += 1
        before, lines_before = _job_state(d)
        try:
            _call(d.coordinator_channel, "Coordinator", case.method, "unary", case.payload, case.meta)
        except grpc.RpcError as error:
            where = f"{case.label}: {error.code()} {error.details()!r}"
            _refusal_kind(error, COORDINATOR_REQUESTS[case.method], case.payload)
            d.assert_alive()
            after, lines_after = _job_state(d)
            assert after == before, f"{where} was refused but the job state changed: {_state_diff(before, after)}"
            assert lines_after == lines_before, f"{where} was refused but {lines_after - lines_before} events were logged"
            assert case.expect is not ACCEPT, f"{where}: a valid message was refused"
            if isinstance(case.expect, Refuse):
                assert error.code() == case.expect.code, f"{where}: expected {case.expect.code}"
                if case.expect.reason:
                    assert case.expect.reason in (error.details() or ""), f"{where}: the refusal must name {case.expect.reason!r}"
            refused[case.label if isinstance(case.expect, Refuse) else f"{case.label}->{error.code().name}"] += 1
            return
        d.assert_alive()
        assert not isinstance(case.expect, Refuse), f"{case.label}: served, but must be refused with {case.expect}"
        assert _token_sent_once(case.meta), f"{case.label}: served without the token"

    for (kind, field), weight in COORDINATOR_CASES.items():

        @settings(max_examples=COORDINATOR_EXAMPLES_PER_CASE * weight, **FUZZ)
        @given(data=st.data())
        def fuzz(data):
            check(_coordinator_case(data, kind, field))

        fuzz()
    print(f"\ncoordinator fuzz: {sum(seen.values())} calls; refused: {dict(sorted(refused.items()))}")
    required = {f"Report:{f}" for f in REPORT_FIELDS} | {f"Join:{f}" for f in JOIN_FIELDS}
    required |= {f"SetDirectives:{f}" for f in DIRECTIVES_FIELDS} | {f"ReportResources:{f}" for f in RESOURCES_FIELDS}
    required |= {f"MoveShard:{f}" for f in MOVE_FIELDS} | {f"Report:{how}" for how in TOKEN_MUTATIONS}
    missing = required - set(refused)
    assert not missing, f"the coordinator fuzz no longer reaches these refusals: {sorted(missing)}"
    d.assert_alive()


# ---------------------------------------------------------------- limits, one case each


def _fresh_pull_and_state(daemons: Daemons) -> PsState:
    daemons.client.pull(torch.empty(NUMEL), timeout_s=CALL_DEADLINE_S)
    return _ps_state(daemons.client)


def _push_bytes(header: pb.PushHeader, chunks) -> list[bytes]:
    return _serialise(_stream("header", pb.PushRequest, header, chunks))


def _valid_header(state: PsState) -> pb.PushHeader:
    return pb.PushHeader(worker_id=0, plan_epoch=state.epoch, base_version=state.version, dtype="float32", numel=NUMEL)


def _assert_unchanged(before: PsState, after: PsState, reason: str | None) -> None:
    assert not _state_diff(before.state, after.state) and torch.equal(after.params, before.params)
    assert after.rejected - before.rejected == (Counter({reason: 1}) if reason else Counter())


def test_a_push_in_more_chunks_than_its_shard_needs_is_refused_and_changes_nothing(daemons):
    before = _fresh_pull_and_state(daemons)
    assert max_stream_chunks(NUMEL) == 1
    one_element_chunks = [(i, np.float32(1.0).tobytes()) for i in range(NUMEL)]
    with pytest.raises(grpc.RpcError) as error:
        _call(daemons.channel, "ParameterServer", "Push", "client_stream",
              _push_bytes(_valid_header(before), one_element_chunks), [(TOKEN_METADATA_KEY, TOKEN)])
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "more than 1 chunks" in error.value.details()
    _assert_unchanged(before, _ps_state(daemons.client), "too_many_chunks")


def test_a_message_over_the_size_limit_is_refused_by_the_server(daemons):
    before = _fresh_pull_and_state(daemons)
    huge = [(0, bytes(MAX_MESSAGE_BYTES + 1024))]
    with pytest.raises(grpc.RpcError) as error:
        _call(daemons.channel, "ParameterServer", "Push", "client_stream",
              _push_bytes(_valid_header(before), huge), [(TOKEN_METADATA_KEY, TOKEN)])
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    after = _ps_state(daemons.client)
    assert not _state_diff(before.state, after.state) and torch.equal(after.params, before.params)
    # gRPC's own limit. The servicer then sees the stream end after the header and may count it as bad_length
    # (its abort is ignored: the call is already over): at most that one counter moves.
    assert sum((after.rejected - before.rejected).values()) <= 1, after.rejected - before.rejected


def test_a_push_stream_that_goes_silent_is_refused_after_the_idle_timeout(daemons):
    before = _fresh_pull_and_state(daemons)
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
    _assert_unchanged(before, _ps_state(daemons.client), "idle_stream")
