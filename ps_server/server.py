"""The parameter-server daemon: a grpc.aio servicer around star.aggregate + torch.optim.

All decisions (which gradients to apply, with which scale, which pulls to release)
come from `star.aggregate.Aggregator`; this module only moves bytes, runs the
optimizer step, and parks blocked pulls on futures (so thousands of blocked pulls
cost no threads). Everything runs on one asyncio loop, so aggregator calls between
two `await`s are atomic.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import time
from pathlib import Path
from dataclasses import dataclass, field

import grpc
import torch

from star.aggregate import Aggregator, Effects, PushRejected, RejectCode
from star.config import ConfigError, OptimizerConfig, SecurityConfig
from star.flat import MAX_CHUNK_BYTES, SEND_CHUNK_BYTES, WIRE_DTYPE, ChunkAssembler, FlatError, ShardRange, shard_ranges, tensor_chunks
from star.logs import log
from star.optim import build_optimizer
from star.plan import PlanError, SyncPlan, tree_layout
from star.policy.noise import NoiseAccumulator
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import (
    CHANNEL_OPTIONS,
    MAX_BATCH_SIZE,
    MOVED_TO_KEY,
    MAX_EPOCH,
    MAX_LABEL_CHARS,
    max_stream_chunks,
    plan_from_proto,
    tune_malloc,
    address,
    write_ready_file,
)
from star.rpc.security import Credentials
from ps_server.checkpointing import CheckpointSchedule, ShardCheckpointer, capture_shard, restore_shard
from star.checkpoint import ShardCheckpoint, shard_from_bytes, shard_to_bytes

logger = logging.getLogger("ps")

_STATUS = {
    RejectCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    RejectCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
}


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
    max_workers: int = 65536  # worker ids this PS accepts: 0..max_workers-1 (bounds per-worker state)
    max_model_bytes: int = 16 * 1024**3  # largest flat model (float32, all shards) a Register/Init may declare
    stream_idle_timeout_s: float = 30.0  # a Push/Init stream silent this long is refused (frees its buffer)
    security: SecurityConfig = field(default_factory=SecurityConfig)  # job token file and TLS
    checkpoint_dir: str | None = None  # write shard checkpoints here (star.checkpoint layout); None = never
    checkpoint_every_updates: int = 0  # checkpoint after this many updates (0 = not by count)
    checkpoint_every_s: float = 0.0  # ... or after this many seconds (0 = not by time); always at shutdown
    job_id: str = ""  # written into every checkpoint, so shards of different jobs are never mixed
    restore_dir: str | None = None  # start from this PS's newest checkpoint in this directory, when there is one
    migrate_from: str | None = None  # take the shard over from the PS serving it at this address (a live move)
    drain_timeout_s: float = 30.0  # handing the shard over: wait this long for the pushes of workers it served

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
        if not self.drain_timeout_s > 0:
            raise ConfigError("drain_timeout_s", self.drain_timeout_s, "must be > 0")
        if self.migrate_from is not None and self.restore_dir is not None:
            raise ConfigError("migrate_from", self.migrate_from, "a PS takes its state from a checkpoint or a live shard, not both")


def all_finite(tensor: torch.Tensor) -> bool:
    """Exact NaN/Inf check: a finite sum implies finite elements (NaN and Inf propagate through a sum),
    so only a sum that overflowed needs the elementwise pass (which allocates a numel bool tensor)."""
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def _check_relay_address(relay_address: str) -> None:
    """A worker's relay address is handed to other workers: it must be a plain host:port."""
    if not relay_address:
        return
    host, _, port = relay_address.rpartition(":")
    if len(relay_address) > MAX_LABEL_CHARS or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_relay_address",
                        f"relay_address {relay_address[:MAX_LABEL_CHARS]!r} is not host:port")


class _Rejected(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


class ShardState:
    """The PS's slice of the flat parameter vector and the optimizer over it."""

    def __init__(self, shard: ShardRange, initial: torch.Tensor, optimizer: OptimizerConfig):
        self.range = shard
        self.param = torch.nn.Parameter(initial.clone(), requires_grad=True)
        self.optimizer = build_optimizer(optimizer, self.param)
        self._snapshot: tuple[int, list[tuple[int, bytes]]] | None = None

    def apply(self, gradients: list[torch.Tensor], scale: float) -> None:
        # The gradients are this server's own receive buffers, used once: sum into the first in place
        # (same left-to-right order as stack(...).sum(0), without a stacked N x numel copy).
        total = gradients[0]
        for gradient in gradients[1:]:
            total.add_(gradient)
        if scale != 1.0:
            total.mul_(scale)
        self.param.grad = total
        self.optimizer.step()
        self.param.grad = None

    def snapshot(self, version: int) -> list[tuple[int, bytes]]:
        """Wire chunks of the parameters at `version`, serialised once however many workers pull it."""
        if self._snapshot is None or self._snapshot[0] != version:
            self._snapshot = (version, tensor_chunks(self.param.data))
        return self._snapshot[1]


class ParameterServer(pb_grpc.ParameterServerServicer):
    def __init__(self, config: PSConfig):
        self.config = config
        self.aggregator = Aggregator()
        self.shard: ShardState | None = None
        self.total_numel: int | None = None
        self.registered: set[int] = set()
        self.rejected: dict[str, int] = {}
        self._gradients: dict[int, torch.Tensor] = {}
        self._batch_sizes: dict[int, int] = {}
        self._counts: dict[int, int] = {}  # gradient id -> gradients its payload sums (tree pushes: > 1)
        self.relay_addresses: dict[int, str] = {}  # worker -> where it takes tree children's gradients
        self._tree: tuple[SyncPlan | None, dict[int, tuple[int, ...]], dict[int, int]] = (None, {}, {})
        self.push_bytes_received = 0
        self.pushes_received = 0
        self.noise = NoiseAccumulator()
        self._waiters: dict[int, asyncio.Future] = {}
        self._started = time.monotonic()
        self._first_update: float | None = None
        # Handing the shard over (MigrateOut): while draining, pulls are held; once moved, every call is redirected.
        self.draining = False
        self.moved_to: str | None = None
        self._moved_state: bytes | None = None  # what was handed over (sent again if the successor asks again)
        self._migration_done: asyncio.Event | None = None
        self._drained: asyncio.Event | None = None
        self._ready = asyncio.Event()  # unset while a moving shard is on its way here (migrate_from)
        if config.migrate_from is None:
            self._ready.set()
        self.checkpointer = (
            ShardCheckpointer(config.checkpoint_dir, config.job_id,
                              CheckpointSchedule(config.checkpoint_every_updates, config.checkpoint_every_s))
            if config.checkpoint_dir else None
        )

    # ---- helpers ---------------------------------------------------------------
    def _since_first_update(self) -> float:
        return -1.0 if self._first_update is None else time.monotonic() - self._first_update

    def _require_shard(self) -> ShardState:
        if self.shard is None:
            raise _Rejected(grpc.StatusCode.FAILED_PRECONDITION, "not_initialized", "parameter server not initialised: send Init first")
        return self.shard

    def _check_worker_id(self, worker_id: int) -> None:
        if worker_id >= self.config.max_workers:
            raise _Rejected(
                grpc.StatusCode.INVALID_ARGUMENT,
                "bad_worker_id",
                f"worker_id {worker_id} is outside 0..{self.config.max_workers - 1} (this PS's max_workers)",
            )

    def _check_total_numel(self, total_numel: int) -> None:
        limit = self.config.max_model_bytes // 4
        if not 1 <= total_numel <= limit:
            raise _Rejected(
                grpc.StatusCode.INVALID_ARGUMENT,
                "bad_total_numel",
                f"total_numel {total_numel} is outside 1..{limit} (max_model_bytes={self.config.max_model_bytes})",
            )

    async def _messages(self, request_iterator, what: str):
        """The client stream's messages; a stream that goes silent for stream_idle_timeout_s is refused."""
        iterator = request_iterator.__aiter__()
        timeout_s = self.config.stream_idle_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(iterator.__anext__(), timeout_s)
            except StopAsyncIteration:
                return
            except asyncio.TimeoutError:
                raise _Rejected(
                    grpc.StatusCode.DEADLINE_EXCEEDED, "idle_stream", f"{what} stream sent nothing for {timeout_s} s (stream_idle_timeout_s)"
                ) from None
            yield message

    @staticmethod
    def _count_chunk(count: int, numel: int, what: str) -> int:
        limit = max_stream_chunks(numel)
        if count + 1 > limit:
            raise _Rejected(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "too_many_chunks",
                f"{what} stream sent more than {limit} chunks for {numel} elements (chunks must average >= 128 KiB)",
            )
        return count + 1

    async def _gate(self, context: grpc.aio.ServicerContext, hold_while_draining: bool = True) -> None:
        """Redirect callers of a shard that moved away; hold them while it is arriving here or leaving."""
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), timeout=self.config.drain_timeout_s)
            except asyncio.TimeoutError:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "the shard is still on its way to this parameter server")
        if self.draining and hold_while_draining:
            await self._migration_done.wait()  # type: ignore[union-attr]
        if self.moved_to is not None:
            self.rejected["redirected"] = self.rejected.get("redirected", 0) + 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"shard {self.config.ps_index} moved to {self.moved_to}",
                                trailing_metadata=((MOVED_TO_KEY, self.moved_to),))

    def _check_drained(self) -> None:
        if self._drained is not None and not self.aggregator.outstanding:
            self._drained.set()

    async def _reject(self, context: grpc.aio.ServicerContext, error: _Rejected) -> None:
        self.rejected[error.reason] = self.rejected.get(error.reason, 0) + 1
        log(logger, logging.DEBUG, "rejected", reason=error.reason, detail=error.message)
        await context.abort(error.code, error.message)

    def _carry_out(self, effects: Effects) -> None:
        """Apply, drop, then release: released pulls must see the new parameters."""
        shard = self.shard
        for apply in effects.applies:
            gradients = [self._gradients.pop(gid) for gid in apply.gradient_ids]
            batches = [self._batch_sizes.pop(gid, 0) for gid in apply.gradient_ids]
            counts = [self._counts.pop(gid, 1) for gid in apply.gradient_ids]
            if len(gradients) >= 2 and all(batches):
                self.noise.observe(gradients, batches, counts)  # before the in-place sum below
            assert shard is not None
            shard.apply(gradients, apply.scale)
            if self._first_update is None:
                self._first_update = time.monotonic()
        for drop in effects.drops:
            self._gradients.pop(drop.gradient_id, None)
            self._batch_sizes.pop(drop.gradient_id, None)
            self._counts.pop(drop.gradient_id, None)
        for worker in effects.released:
            future = self._waiters.pop(worker, None)
            if future is not None and not future.done():
                future.set_result(self._pull_view())
        if effects.applies and self.checkpointer is not None:
            self.checkpointer.record_version(self.aggregator.version)
            self.checkpointer.maybe_save(self.aggregator.version, self.capture)
        self._check_drained()

    # ---- checkpoints -----------------------------------------------------------
    def capture(self) -> ShardCheckpoint:
        """A consistent copy of this shard (parameters, optimizer, aggregator) at the current version."""
        assert self.shard is not None and self.total_numel is not None
        trained_s = max(0.0, self._since_first_update())
        return capture_shard(self.config.job_id, self.config.ps_index, self.config.num_ps, self.total_numel, self.shard,
                             self.aggregator, trained_s)

    def restore(self, checkpoint: ShardCheckpoint, version_at_exit: int | None = None, moved: bool = False) -> None:
        """Continue from a checkpoint: same parameters, optimizer state, version and plan.
        Workers must register and pull again (a restored PS knows no worker). `version_at_exit`
        (what the previous incarnation recorded last) gives the updates the checkpoint lacks."""
        c = self.config
        if (checkpoint.ps_index, checkpoint.num_ps) != (c.ps_index, c.num_ps):
            raise ConfigError("restore", checkpoint.ps_index,
                              f"checkpoint is shard {checkpoint.ps_index} of {checkpoint.num_ps}, this PS is {c.ps_index} of {c.num_ps}")
        expected = shard_ranges(checkpoint.total_numel, c.num_ps)[c.ps_index]
        if (expected.start, expected.end) != (checkpoint.range_start, checkpoint.range_end):
            raise ConfigError("restore", (checkpoint.range_start, checkpoint.range_end), f"does not match the shard range {expected}")
        self.total_numel = checkpoint.total_numel
        self.shard = ShardState(expected, checkpoint.param, c.optimizer)
        self.shard.optimizer.load_state_dict(checkpoint.optimizer)
        self.aggregator = Aggregator.restore(checkpoint.aggregator)
        lost = max(0, (version_at_exit or checkpoint.version) - checkpoint.version)
        if moved:  # a live hand-over: nothing was lost, and the workers it knew stay known
            self.aggregator.counters["moved_in"] += 1
            self.aggregator.counters["moved_in_at_version"] = checkpoint.version
            self.registered = {int(w) for w in checkpoint.aggregator.get("registered", [])}
            self.relay_addresses = {int(w): str(a) for w, a in checkpoint.aggregator.get("relay_addresses", {}).items()}
        else:
            self.aggregator.counters["restores"] += 1
            self.aggregator.counters["updates_lost_in_restart"] += lost
        trained_s = float(checkpoint.aggregator.get("trained_s", 0.0))
        self._first_update = time.monotonic() - trained_s if checkpoint.version > 0 else None
        if self.checkpointer is not None:
            self.checkpointer.last_version = checkpoint.version
        log(logger, logging.INFO, "restored from checkpoint", version=checkpoint.version, epoch=self.aggregator.epoch,
            updates_lost=lost, pending_gradients_lost=checkpoint.aggregator.get("pending", 0))

    async def final_checkpoint(self) -> None:
        if self.checkpointer is not None and self.shard is not None and self.moved_to is None:  # a moved shard is not ours
            await self.checkpointer.save_now(self.capture())

    def _pull_view(self) -> tuple[int, int, list[tuple[int, bytes]]]:
        shard = self._require_shard()
        version = self.aggregator.version
        return version, max(self.aggregator.epoch, 0), shard.snapshot(version)

    # ---- RPCs ------------------------------------------------------------------
    async def Register(self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext) -> pb.RegisterReply:
        await self._gate(context)
        try:
            self._check_worker_id(request.worker_id)
            self._check_total_numel(request.total_numel)
            if self.total_numel is not None and request.total_numel != self.total_numel:
                raise _Rejected(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "layout_mismatch",
                    f"total_numel {request.total_numel} does not match this job's model ({self.total_numel} elements)",
                )
            _check_relay_address(request.relay_address)
        except _Rejected as error:
            await self._reject(context, error)
            raise
        self.registered.add(request.worker_id)
        if request.relay_address:
            self.relay_addresses[request.worker_id] = request.relay_address
        else:
            self.relay_addresses.pop(request.worker_id, None)
        reply = pb.RegisterReply(initialized=self.shard is not None, ps_index=self.config.ps_index, num_ps=self.config.num_ps)
        if self.shard is not None:
            reply.range_start, reply.range_end = self.shard.range.start, self.shard.range.end
            reply.total_numel = self.total_numel or 0
        return reply

    async def Init(self, request_iterator, context: grpc.aio.ServicerContext) -> pb.InitReply:
        await self._gate(context)
        try:
            header, shard_range, assembler, chunks = None, None, None, 0
            async for message in self._messages(request_iterator, "Init"):
                if message.HasField("header"):
                    if header is not None:
                        raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", "Init stream has two headers")
                    header = message.header
                    self._check_total_numel(header.total_numel)
                    if header.dtype != WIRE_DTYPE:
                        raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_dtype", f"dtype {header.dtype!r} is not {WIRE_DTYPE}")
                    if self.total_numel is not None and header.total_numel != self.total_numel:
                        raise _Rejected(
                            grpc.StatusCode.FAILED_PRECONDITION,
                            "layout_mismatch",
                            f"already initialised with total_numel {self.total_numel}, got {header.total_numel}",
                        )
                    try:
                        shard_range = shard_ranges(header.total_numel, self.config.num_ps)[self.config.ps_index]
                    except FlatError as exc:
                        raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_layout", str(exc)) from None
                    assembler = ChunkAssembler(shard_range.numel)
                elif assembler is None:
                    raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", "Init stream must start with a header")
                else:
                    chunks = self._count_chunk(chunks, assembler.numel, "Init")
                    self._add_chunk(assembler, message.chunk)
            if assembler is None or header is None or shard_range is None:
                raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", "Init stream had no header")
            initial = self._finish(assembler)
        except _Rejected as error:
            await self._reject(context, error)
            raise  # unreachable: abort raises
        if self.shard is not None:
            return pb.InitReply(applied=False, version=self.aggregator.version)
        self.total_numel = header.total_numel
        self.shard = ShardState(shard_range, initial, self.config.optimizer)
        log(logger, logging.INFO, "initialised", range=f"[{shard_range.start},{shard_range.end})", numel=shard_range.numel)
        if self.checkpointer is not None:  # a crash before the first scheduled checkpoint still restarts initialised
            await self.checkpointer.save_now(self.capture())
        return pb.InitReply(applied=True, version=self.aggregator.version)

    def _add_chunk(self, assembler: ChunkAssembler, chunk: pb.TensorChunk) -> None:
        if len(chunk.data) > MAX_CHUNK_BYTES:
            raise _Rejected(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "oversized_chunk",
                f"chunk of {len(chunk.data)} bytes exceeds the {MAX_CHUNK_BYTES}-byte limit",
            )
        try:
            assembler.add(chunk.offset, chunk.data)
        except FlatError as exc:
            raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_chunk", str(exc)) from None

    @staticmethod
    def _finish(assembler: ChunkAssembler) -> torch.Tensor:
        try:
            return assembler.finish()
        except FlatError as exc:
            raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_length", str(exc)) from None

    async def Push(self, request_iterator, context: grpc.aio.ServicerContext) -> pb.PushReply:
        await self._gate(context, hold_while_draining=False)
        try:
            header, gradient = await self._receive_push(request_iterator)
            if (self.draining or self.moved_to) and header.worker_id not in self.aggregator.outstanding:
                await self._gate(context)  # only gradients of pulls served here are taken before the shard leaves
            usable = all_finite(gradient)
            if not usable and self.config.nonfinite == "reject":
                raise _Rejected(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "nonfinite",
                    f"gradient from worker {header.worker_id} has NaN/Inf values (nonfinite=reject)",
                )
            try:
                outcome = self.aggregator.push(header.worker_id, header.plan_epoch, header.base_version, usable=usable,
                                               contributors=tuple(header.contributors))
            except PushRejected as exc:
                raise _Rejected(_STATUS[exc.code], exc.reason, exc.message) from None
        except _Rejected as error:
            await self._reject(context, error)
            raise
        self.pushes_received += 1
        self.push_bytes_received += gradient.numel() * gradient.element_size()
        if usable:
            self._gradients[outcome.gradient_id] = gradient
            self._batch_sizes[outcome.gradient_id] = header.batch_size
            if header.contributors:
                self._counts[outcome.gradient_id] = 1 + len(header.contributors)
        self._carry_out(outcome.effects)
        return pb.PushReply(status=outcome.status.value, version=self.aggregator.version, gradient_id=outcome.gradient_id)

    async def _receive_push(self, request_iterator) -> tuple[pb.PushHeader, torch.Tensor]:
        shard = self._require_shard()
        header, assembler, chunks = None, None, 0
        async for message in self._messages(request_iterator, "Push"):
            if message.HasField("header"):
                if header is not None:
                    raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", "Push stream has two headers")
                header = message.header
                self._check_worker_id(header.worker_id)
                if header.worker_id not in self.registered:
                    raise _Rejected(
                        grpc.StatusCode.NOT_FOUND, "unknown_worker", f"unknown worker {header.worker_id}: call Register first"
                    )
                if header.dtype != WIRE_DTYPE:
                    raise _Rejected(
                        grpc.StatusCode.INVALID_ARGUMENT, "bad_dtype", f"dtype {header.dtype!r} is not {WIRE_DTYPE}"
                    )
                if header.numel != shard.range.numel:
                    raise _Rejected(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "bad_length",
                        f"numel {header.numel} does not match this shard's length {shard.range.numel}",
                    )
                if len(header.contributors) >= self.config.max_workers:
                    raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_contributors",
                                    f"{len(header.contributors)} contributors: this PS takes at most {self.config.max_workers} workers")
                for child in header.contributors:
                    self._check_worker_id(child)
                    if child not in self.registered:
                        raise _Rejected(grpc.StatusCode.NOT_FOUND, "unknown_worker",
                                        f"unknown contributor {child}: it must call Register first")
                if header.batch_size > MAX_BATCH_SIZE:
                    raise _Rejected(
                        grpc.StatusCode.INVALID_ARGUMENT, "bad_batch_size", f"batch_size {header.batch_size} exceeds {MAX_BATCH_SIZE}"
                    )
                assembler = ChunkAssembler(shard.range.numel)
            elif assembler is None:
                raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", "Push stream must start with a header")
            else:
                chunks = self._count_chunk(chunks, shard.range.numel, "Push")
                self._add_chunk(assembler, message.chunk)
        if header is None or assembler is None:
            raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", "Push stream had no header")
        return header, self._finish(assembler)

    async def Pull(self, request: pb.PullRequest, context: grpc.aio.ServicerContext):
        worker = request.worker_id
        await self._gate(context, hold_while_draining=not request.observer)
        try:
            shard = self._require_shard()
            self._check_worker_id(worker)
            if not request.observer and worker not in self.registered:
                raise _Rejected(grpc.StatusCode.NOT_FOUND, "unknown_worker", f"unknown worker {worker}: call Register first")
        except _Rejected as error:
            await self._reject(context, error)
            raise
        view = self._pull_view() if request.observer else await self._wait_for_round(worker)
        if view is None:  # the shard moved away while this pull waited
            await self._gate(context)
            return
        version, epoch, chunks = view
        yield pb.PullReply(
            header=pb.PullHeader(
                version=version,
                plan_epoch=epoch,
                numel=shard.range.numel,
                dtype=WIRE_DTYPE,
                range_start=shard.range.start,
                since_first_update_s=self._since_first_update(),
                push_pace_bytes_per_s=(self.aggregator.plan.push_pace_bytes_per_s or 0.0) if self.aggregator.plan else 0.0,
                **self._tree_role(worker),
            )
        )
        for offset, data in chunks:
            yield pb.PullReply(chunk=pb.TensorChunk(offset=offset, data=data))

    def _tree_role(self, worker: int) -> dict:
        """The puller's place in the plan's aggregation tree, for its pull header. A parent that
        gave no relay address has no children: they push here themselves."""
        plan = self.aggregator.plan
        if plan is None or plan.tree_fanout is None:
            return {}
        if self._tree[0] is not plan:
            layout = tree_layout(plan)
            self._tree = (plan, layout, {c: p for p, children in layout.items() for c in children})
        _, children_of, parent_of = self._tree
        parent = parent_of.get(worker)
        if parent is not None and parent in self.relay_addresses:
            return {"tree_parent": self.relay_addresses[parent]}
        if worker in children_of and worker in self.relay_addresses:
            return {"tree_children": list(children_of[worker])}
        return {}

    async def _wait_for_round(self, worker: int) -> tuple[int, int, list[tuple[int, bytes]]] | None:
        """The parameters this worker may compute on next, once its group's round allows; None when the
        shard started to move meanwhile (a pull released then is not served here: the successor serves it)."""
        while True:
            if self.draining or self.moved_to is not None:
                await self._migration_done.wait()  # type: ignore[union-attr]
                if self.moved_to is not None:
                    return None
            if self.aggregator.pull(worker).ready:
                return self._pull_view()
            previous = self._waiters.pop(worker, None)
            if previous is not None and not previous.done():
                previous.cancel()
            future = asyncio.get_running_loop().create_future()
            self._waiters[worker] = future
            try:
                view = await future
            except asyncio.CancelledError:
                if self._waiters.get(worker) is future:
                    del self._waiters[worker]
                    self.aggregator.cancel_pull(worker)
                raise
            if not self.draining and self.moved_to is None and view is not None:
                return view
            self.aggregator.forget_pull(worker)
            self._check_drained()

    # ---- handing the shard over ----------------------------------------------------
    async def MigrateOut(self, request: pb.MigrateOutRequest, context: grpc.aio.ServicerContext):
        """Hand this shard to its successor at `new_address` without losing an update (see the proto)."""
        new = request.new_address
        resend = self.moved_to is not None
        try:
            if not new or len(new) > MAX_LABEL_CHARS:
                raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_address", f"new_address {new[:64]!r} must be 1..{MAX_LABEL_CHARS} characters")
            if not (math.isfinite(request.drain_timeout_s) and 0 <= request.drain_timeout_s <= 3600):
                raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_timeout", f"drain_timeout_s={request.drain_timeout_s} must be in [0, 3600]")
            if resend and new != self.moved_to:
                raise _Rejected(grpc.StatusCode.FAILED_PRECONDITION, "moved", f"this shard already moved to {self.moved_to}")
            if not resend:
                self._require_shard()
                if self.draining:
                    raise _Rejected(grpc.StatusCode.FAILED_PRECONDITION, "moving", "this shard is already being handed over")
        except _Rejected as error:
            await self._reject(context, error)
            raise
        data = self._moved_state if resend else await self._drain_and_export(new, request.drain_timeout_s or self.config.drain_timeout_s)
        assert data is not None
        try:
            for offset in range(0, len(data), SEND_CHUNK_BYTES):
                yield pb.MigrateChunk(data=data[offset : offset + SEND_CHUNK_BYTES], total_bytes=len(data) if offset == 0 else 0)
        except BaseException:
            if not resend:
                self._end_migration(None)  # the successor did not get it all: keep serving here
            raise
        if not resend:
            self._moved_state = data
            self._end_migration(new)

    async def _drain_and_export(self, new_address: str, timeout_s: float) -> bytes:
        """Hold new pulls, take the pushes of every pull already served, close open rounds, serialise."""
        self.draining = True
        self._migration_done, self._drained = asyncio.Event(), asyncio.Event()
        for worker, future in list(self._waiters.items()):  # blocked pulls: they will be served by the successor
            if not future.done():
                future.set_result(None)
            self._waiters.pop(worker, None)
        self._check_drained()
        try:
            await asyncio.wait_for(self._drained.wait(), timeout=timeout_s)
        except asyncio.TimeoutError:
            log(logger, logging.WARNING, "drain timed out: those workers' next pushes are refused, they pull again",
                outstanding=sorted(self.aggregator.outstanding))
        self._carry_out(self.aggregator.close_open_rounds())
        self.aggregator.counters["moved_out"] += 1
        checkpoint = capture_shard(self.config.job_id, self.config.ps_index, self.config.num_ps, self.total_numel or 0,
                                   self._require_shard(), self.aggregator, max(0.0, self._since_first_update()), self.registered,
                                   self.relay_addresses)
        log(logger, logging.INFO, "shard handed over", to=new_address, version=self.aggregator.version)
        return shard_to_bytes(checkpoint)

    def _end_migration(self, moved_to: str | None) -> None:
        """Moved (every held and later call is redirected to `moved_to`) or not (serving resumes)."""
        self.moved_to = moved_to
        self.draining = False
        self._drained = None
        if self._migration_done is not None:
            self._migration_done.set()
        if moved_to is None:
            self.aggregator.counters["moves_abandoned"] += 1
            log(logger, logging.WARNING, "hand-over abandoned: serving here again")

    async def ConfigurePlan(self, request: pb.Plan, context: grpc.aio.ServicerContext) -> pb.ConfigureReply:
        await self._gate(context)
        try:
            self._check_plan_fields(request)
            plan = plan_from_proto(request)
        except PlanError as exc:
            await self._reject(context, _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_plan", f"invalid plan: {exc}"))
            raise
        except _Rejected as error:
            await self._reject(context, error)
            raise
        try:
            effects = self.aggregator.configure(plan)
        except PushRejected as exc:
            await self._reject(context, _Rejected(_STATUS[exc.code], exc.reason, exc.message))
            raise
        if effects.applies and self.shard is None:  # cannot happen: no push is accepted before Init
            raise RuntimeError("updates to apply before initialisation")
        self._carry_out(effects)
        log(logger, logging.INFO, "plan switched", plan=plan.describe(), flushed=len(effects.applies), released=len(effects.released))
        return pb.ConfigureReply(
            epoch=plan.epoch, version=self.aggregator.version, released=len(effects.released), flushed=len(effects.applies)
        )

    def _check_plan_fields(self, request: pb.Plan) -> None:
        """Bounds SyncPlan itself does not know: this PS's worker ids, epochs, label length."""
        if request.epoch > MAX_EPOCH:
            raise _Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_plan", f"invalid plan: epoch {request.epoch} exceeds {MAX_EPOCH}")
        if len(request.label) > MAX_LABEL_CHARS:
            raise _Rejected(
                grpc.StatusCode.INVALID_ARGUMENT, "bad_plan", f"invalid plan: label of {len(request.label)} characters exceeds {MAX_LABEL_CHARS}"
            )
        for index, group in enumerate(request.groups):
            too_big = [w for w in group.workers if w >= self.config.max_workers]
            if too_big:
                raise _Rejected(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "bad_plan",
                    f"invalid plan: groups[{index}] has worker id {too_big[0]} outside 0..{self.config.max_workers - 1} (max_workers)",
                )

    async def Stats(self, request: pb.StatsRequest, context: grpc.aio.ServicerContext) -> pb.PsStats:
        agg = self.aggregator
        counts = agg.accounting()
        counters = {k: v for k, v in agg.counters.items()}
        counters.update({f"rejected_{k}": v for k, v in self.rejected.items()})
        reply = pb.PsStats(
            ps_index=self.config.ps_index,
            version=agg.version,
            plan_epoch=max(agg.epoch, 0),
            plan=agg.plan.describe() if agg.plan else "",
            accepted=counts["accepted"],
            applied=counts["applied"],
            dropped=counts["dropped"],
            pending=counts["pending"],
            counters=counters,
            staleness={int(k): v for k, v in agg.staleness_histogram.items()},
            since_first_update_s=self._since_first_update(),
            waiting_pulls=len(agg.waiting),
            noise_small_sq=self.noise.small_sq,
            noise_big_sq=self.noise.big_sq,
            noise_small_batch=self.noise.small_batch,
            noise_big_batch=self.noise.big_batch,
            moved_to=self.moved_to or "",
            push_bytes_received=self.push_bytes_received,
            pushes_received=self.pushes_received,
        )
        if self.shard is not None:
            reply.range_start, reply.range_end = self.shard.range.start, self.shard.range.end
        return reply

    async def Health(self, request: pb.HealthRequest, context: grpc.aio.ServicerContext) -> pb.HealthReply:
        import os

        return pb.HealthReply(status="serving", role="ps", uptime_s=time.monotonic() - self._started, pid=os.getpid())


async def take_over(servicer: ParameterServer, config: PSConfig, credentials: Credentials, own_address: str) -> None:
    """Receive the shard from the PS at `config.migrate_from` (it drains, then streams its state),
    and serve it from here; callers that arrive meanwhile wait (see ParameterServer._gate)."""
    from ps_server.migration import fetch_moving_shard

    log(logger, logging.INFO, "taking the shard over", source=config.migrate_from, here=own_address)
    started = time.monotonic()
    limit = 4 * config.max_model_bytes + (1 << 20)  # parameters + optimizer state (Adam: 2 more copies) + metadata
    data = await asyncio.get_running_loop().run_in_executor(
        None, fetch_moving_shard, config.migrate_from, own_address, credentials, config.drain_timeout_s, limit)
    checkpoint = shard_from_bytes(data, f"the shard sent by {config.migrate_from}")
    servicer.restore(checkpoint, moved=True)
    servicer._ready.set()
    log(logger, logging.INFO, "took the shard over", version=checkpoint.version, bytes=len(data),
        seconds=round(time.monotonic() - started, 3))
    await servicer.final_checkpoint()  # a crash right after the move restarts from here, not from the old host


async def serve(config: PSConfig, ready_file: str | None = None) -> None:
    """Run until SIGINT/SIGTERM, then stop accepting RPCs and exit cleanly."""
    torch.set_num_threads(config.threads)
    tune_malloc()
    credentials = Credentials.load(config.security)
    server = grpc.aio.server(options=CHANNEL_OPTIONS, interceptors=credentials.server_interceptors(aio=True))
    servicer = ParameterServer(config)
    version_at_exit = servicer.checkpointer.open_version_file(config.ps_index) if servicer.checkpointer else None
    if config.restore_dir:
        checkpoint = restore_shard(config.restore_dir, config.ps_index)
        if checkpoint is not None:
            same_dir = config.checkpoint_dir and Path(config.checkpoint_dir).resolve() == Path(config.restore_dir).resolve()
            servicer.restore(checkpoint, version_at_exit if same_dir else None)
            await servicer.final_checkpoint()  # the restore (and its counters) survives the next crash too
        else:
            log(logger, logging.WARNING, "no checkpoint to restore: starting fresh", restore_dir=config.restore_dir,
                updates_lost=version_at_exit or 0)
            if version_at_exit:  # it had trained (and died before any checkpoint): say so, the workers re-initialise it
                servicer.aggregator.counters["restores"] += 1
                servicer.aggregator.counters["updates_lost_in_restart"] += version_at_exit
    pb_grpc.add_ParameterServerServicer_to_server(servicer, server)
    port = credentials.add_port(server, address(config.host, config.port))
    if port == 0:
        raise SystemExit(f"ps{config.ps_index}: could not bind {config.host}:{config.port}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if config.migrate_from:
        await take_over(servicer, config, credentials, address(config.host, port))
    write_ready_file(ready_file, port=port, role="ps", index=config.ps_index)
    log(logger, logging.INFO, "serving", address=address(config.host, port), ps_index=config.ps_index, num_ps=config.num_ps,
        tls=credentials.cert_pem is not None, authenticated=credentials.token is not None)
    await stop.wait()
    log(logger, logging.INFO, "shutting down", **servicer.aggregator.accounting())
    await server.stop(grace=1.0)
    await servicer.final_checkpoint()
