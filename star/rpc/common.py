"""Thin helpers shared by every daemon and client: channel options, plan messages, ready files."""

from __future__ import annotations

import json
import os
from pathlib import Path

from star.flat import MAX_CHUNK_BYTES, SEND_CHUNK_BYTES
from star.plan import LatePolicy, PlanError, Scale, SyncPlan
from star.rpc import star_pb2 as pb

# Explicit limits on both ends of every channel, so a hostile or buggy peer cannot make a process
# buffer more than one message's worth: gRPC itself refuses anything larger (RESOURCE_EXHAUSTED).
MAX_MESSAGE_BYTES = MAX_CHUNK_BYTES + 64 * 1024  # PS traffic: one chunk plus its small header
MAX_CONTROL_MESSAGE_BYTES = 256 * 1024  # coordinator traffic: reports, directives, addresses
MAX_METADATA_BYTES = 16 * 1024  # headers of one call (the job token is 64 characters)
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_metadata_size", MAX_METADATA_BYTES),
]
CONTROL_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_CONTROL_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_CONTROL_MESSAGE_BYTES),
    ("grpc.max_metadata_size", MAX_METADATA_BYTES),
]
# Bounds on request fields that no honest peer comes near; beyond them a value is refused, naming the field.
MAX_BATCH_SIZE = 1 << 24  # samples in one worker's batch
MAX_EPOCH = 1 << 62  # plan epochs count switches; a huge one would leave no newer epoch to switch to
MAX_LABEL_CHARS = 256  # plan labels, host names and other free text
# Senders cut payloads into SEND_CHUNK_BYTES chunks; a receiver accepts chunks down to a quarter of that
# before it calls a stream hostile (each message costs a parse and a wakeup, whatever it carries).
MIN_HONEST_CHUNK_BYTES = SEND_CHUNK_BYTES // 4


def max_stream_chunks(numel: int, element_bytes: int = 4) -> int:
    """The most chunks a client stream of `numel` elements may use: derived from the shard and chunk sizes."""
    return max(1, -(-numel * element_bytes // MIN_HONEST_CHUNK_BYTES))


def plan_to_proto(plan: SyncPlan) -> pb.Plan:
    return pb.Plan(
        epoch=plan.epoch,
        groups=[pb.PlanGroup(workers=list(g), quorum=q) for g, q in zip(plan.groups, plan.quorum)],
        staleness_bound=-1 if plan.staleness_bound is None else plan.staleness_bound,
        scale=plan.scale.value,
        late_policy=plan.late_policy.value,
        label=plan.label,
    )


def plan_from_proto(message: pb.Plan) -> SyncPlan:
    """Raises PlanError (with the field) for a malformed plan."""
    try:
        scale = Scale(message.scale or Scale.PER_TOTAL_WORKERS.value)
    except ValueError:
        raise PlanError(f"scale={message.scale!r} is not one of {[s.value for s in Scale]}") from None
    try:
        late = LatePolicy(message.late_policy or LatePolicy.APPLY.value)
    except ValueError:
        raise PlanError(f"late_policy={message.late_policy!r} is not one of {[p.value for p in LatePolicy]}") from None
    return SyncPlan(
        epoch=message.epoch,
        groups=tuple(tuple(g.workers) for g in message.groups),
        quorum=tuple(g.quorum for g in message.groups),
        staleness_bound=None if message.staleness_bound < 0 else message.staleness_bound,
        scale=scale,
        late_policy=late,
        label=message.label,
    )


def tune_malloc(mmap_threshold: int = 32 * 1024 * 1024, trim_threshold: int = 1024 * 1024 * 1024) -> bool:
    """Keep freed payload-sized blocks (chunk bytes, receive buffers, snapshots) in glibc's heap.

    By default a block above the (dynamic) mmap threshold is mmap'ed and unmapped on free, so every
    push/pull re-faults fresh zeroed pages for each chunk and buffer. 32 MiB is glibc's upper limit.
    No-op (False) where mallopt is unavailable (non-glibc).
    """
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, mmap_threshold)) and bool(libc.mallopt(-1, trim_threshold))  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        return False


def write_ready_file(path: str | None, **info: object) -> None:
    """Tell a launcher the daemon is serving (and on which port), atomically."""
    if not path:
        return
    target = Path(path)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), **info}))
    os.replace(tmp, target)


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
