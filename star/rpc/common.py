"""Thin helpers shared by every daemon and client: channel options, plan messages, ready files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import grpc

from star.flat import MAX_CHUNK_BYTES, SEND_CHUNK_BYTES
from star.plan import LatePolicy, PlanError, Scale, SyncPlan
from star.resources import HostSample, NicSample
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
    # A restarted coordinator is back on the same port within seconds: reconnect attempts stay at most
    # 2 s apart (gRPC's default backoff grows to 2 minutes), so workers' reports reach it soon after.
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
# Every server: its port is its own. gRPC turns SO_REUSEPORT on by default, so a second PS (or coordinator) started
# on a port in use bound it too and the kernel split the connections between the two without a word.
EXCLUSIVE_PORT = [("grpc.so_reuseport", 0)]
# Trailing metadata of an UNAVAILABLE answer from a PS whose shard moved: the address to use instead.
MOVED_TO_KEY = "star-moved-to"
# Bounds on request fields that no honest peer comes near; beyond them a value is refused, naming the field.
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
        push_pace_bytes_per_s=plan.push_pace_bytes_per_s or 0.0,
        tree_fanout=plan.tree_fanout or 0,
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
        push_pace_bytes_per_s=message.push_pace_bytes_per_s if message.push_pace_bytes_per_s > 0 else None,
        tree_fanout=message.tree_fanout or None,
    )


def sample_to_proto(sample: HostSample, node_rank: int = 0, ps: dict[int, str] | None = None) -> pb.HostResources:
    return pb.HostResources(
        host=sample.host, time_s=sample.time_s, interval_s=sample.interval_s, cpu_count=sample.cpu_count,
        cpu_percent=sample.cpu_percent, job_cpu_percent=sample.job_cpu_percent, memory_percent=sample.memory_percent,
        memory_available_bytes=sample.memory_available_bytes, job_nic=sample.job_nic or "", node_rank=node_rank,
        nics=[pb.NicRate(name=n.name, rx_bytes_per_s=n.rx_bytes_per_s, tx_bytes_per_s=n.tx_bytes_per_s,
                         link_bytes_per_s=n.link_bytes_per_s or 0.0, busy_share=n.busy_share) for n in sample.nics],
        ps=[pb.PsRunning(ps_index=i, address=a) for i, a in sorted((ps or {}).items())],
    )


def sample_from_proto(message: pb.HostResources) -> HostSample:
    """Inverse of sample_to_proto (validate first: see star.coordinator_checks.resources_problem)."""
    return HostSample(
        host=message.host, time_s=message.time_s, interval_s=message.interval_s, cpu_count=max(1, message.cpu_count),
        cpu_percent=message.cpu_percent, job_cpu_percent=message.job_cpu_percent, memory_percent=message.memory_percent,
        memory_available_bytes=message.memory_available_bytes, job_nic=message.job_nic or None,
        nics=tuple(NicSample(n.name, n.rx_bytes_per_s, n.tx_bytes_per_s, n.link_bytes_per_s or None,
                             n.busy_share if n.HasField("busy_share") else None) for n in message.nics),
    )


def host_of(address_text: str) -> str:
    """'10.0.0.2:50051' -> '10.0.0.2'; '[::1]:50051' -> '::1'."""
    host = address_text.rsplit(":", 1)[0]
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


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


class PsUnreachable(grpc.FutureTimeoutError):
    """A PS channel did not connect in time (the message says which and why it may be)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
