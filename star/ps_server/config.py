"""The PS daemon's configuration and the error every refusal travels in."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from star.config import ConfigError, OptimizerConfig, SecurityConfig
from star.limits import MAX_WORKER_IDS
from star.rpc.common import MAX_EPOCH, MAX_LABEL_CHARS


@dataclass(frozen=True)
class PSConfig:
    """One parameter-server process."""

    ps_index: int = 0  # which shard range of the flat vector this PS holds
    num_ps: int = 1  # how many PSs split the flat vector
    host: str = "127.0.0.1"  # bind address
    port: int = 0  # 0 = an ephemeral port (written to the ready file)
    optimizer: OptimizerConfig = OptimizerConfig(name="sgd", lr=0.1, momentum=0.9)
    nonfinite: str = "reject"  # NaN/Inf gradients: reject (INVALID_ARGUMENT) | skip (counted, dropped)
    threads: int = 1  # torch intra-op threads
    max_workers: int = MAX_WORKER_IDS  # worker ids this PS accepts: 0..max_workers-1 (bounds per-worker state)
    max_model_bytes: int = 16 * 1024**3  # largest flat model (float32, all shards) a Register/Init may declare
    stream_idle_timeout_s: float = 30.0  # a Push/Init stream silent this long is refused (frees its buffer)
    security: SecurityConfig = field(default_factory=SecurityConfig)  # job token file and TLS
    checkpoint_dir: str | None = None  # write shard checkpoints here (star.checkpoint layout); None = never
    checkpoint_every_updates: int = 0  # checkpoint after this many updates (0 = not by count)
    checkpoint_every_s: float = 0.0  # ... or after this many seconds (0 = not by time); always at shutdown
    checkpoint_max_write_share: float = 0.1  # ... but spaced so that writing takes at most this share of the time
    job_id: str = ""  # written into every checkpoint, so shards of different jobs are never mixed
    restore_dir: str | None = None  # start from this PS's newest checkpoint in this directory, when there is one
    resumed: bool = False  # with restore_dir, a stopped job resumed: its clock waits for the first update (the pause is not training time)
    migrate_from: str | None = None  # take the shard over from the PS serving it at this address (a live move)
    drain_timeout_s: float = 30.0  # handing the shard over: wait this long for the pushes of workers it served
    metrics_port: int | None = None  # serve Prometheus /metrics on this port (0: a free one; None: not at all)
    shm: bool = True  # offer workers that ask a shared-memory mailbox (used when they share this host; star/shm.py)
    shm_doorbell: bool = True  # with shm: carry same-host push/pull headers on a Unix socket, not gRPC (star/rpc/doorbell.py)
    socket_channel: bool = True  # with shm: move other hosts' workers' payloads as raw TCP bytes, not gRPC (star/rpc/socket_channel.py)

    def __post_init__(self) -> None:
        if not 0 <= self.ps_index < max(self.num_ps, 1):
            raise ConfigError("ps_index", self.ps_index, f"must be in 0..num_ps-1 (num_ps={self.num_ps})")
        if self.max_workers < 1:
            raise ConfigError("max_workers", self.max_workers, "must be >= 1")
        if self.max_model_bytes < 4:
            raise ConfigError("max_model_bytes", self.max_model_bytes, "must be >= 4")
        if not self.stream_idle_timeout_s > 0:
            raise ConfigError("stream_idle_timeout_s", self.stream_idle_timeout_s, "must be > 0")
        if self.checkpoint_every_updates < 0:
            raise ConfigError("checkpoint_every_updates", self.checkpoint_every_updates, "must be >= 0")
        if self.checkpoint_every_s < 0:
            raise ConfigError("checkpoint_every_s", self.checkpoint_every_s, "must be >= 0")
        if not 0 < self.checkpoint_max_write_share <= 1:
            raise ConfigError("checkpoint_max_write_share", self.checkpoint_max_write_share, "must be in (0, 1]")
        if not self.drain_timeout_s > 0:
            raise ConfigError("drain_timeout_s", self.drain_timeout_s, "must be > 0")
        if self.migrate_from is not None and self.restore_dir is not None:
            raise ConfigError("migrate_from", self.migrate_from, "a PS takes its state from a checkpoint or a live shard, not both")


class Rejected(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def check_worker_id(worker_id: int, max_workers: int) -> None:
    if worker_id >= max_workers:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_worker_id",
                       f"worker_id {worker_id} is outside 0..{max_workers - 1} (this PS's max_workers)")


def check_total_numel(total_numel: int, max_model_bytes: int) -> None:
    limit = max_model_bytes // 4
    if not 1 <= total_numel <= limit:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_total_numel",
                       f"total_numel {total_numel} is outside 1..{limit} (max_model_bytes={max_model_bytes})")


def check_relay_address(relay_address: str) -> None:
    """A worker's relay address is handed to other workers: it must be a plain host:port."""
    if not relay_address:
        return
    host, _, port = relay_address.rpartition(":")
    if len(relay_address) > MAX_LABEL_CHARS or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_relay_address",
                        f"relay_address {relay_address[:MAX_LABEL_CHARS]!r} is not host:port")


def check_plan_fields(request, max_workers: int) -> None:
    """Bounds SyncPlan itself does not know: this PS's worker ids, epochs, label length (`request`: a pb.Plan)."""
    if request.epoch > MAX_EPOCH:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_plan", f"invalid plan: epoch {request.epoch} exceeds {MAX_EPOCH}")
    if len(request.label) > MAX_LABEL_CHARS:
        raise Rejected(
            grpc.StatusCode.INVALID_ARGUMENT, "bad_plan", f"invalid plan: label of {len(request.label)} characters exceeds {MAX_LABEL_CHARS}"
        )
    for index, group in enumerate(request.groups):
        too_big = [w for w in group.workers if w >= max_workers]
        if too_big:
            raise Rejected(
                grpc.StatusCode.INVALID_ARGUMENT,
                "bad_plan",
                f"invalid plan: groups[{index}] has worker id {too_big[0]} outside 0..{max_workers - 1} (max_workers)",
            )
