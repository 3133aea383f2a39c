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
import time
from typing import Any

import grpc
import torch

from star.ps_server.checkpointing import ShardCheckpointer
from star.ps_server.config import (PSConfig, Rejected, check_plan_fields, check_relay_address, check_total_numel,
                                   check_worker_id)
from star.ps_server.handover import HandOver
from star.ps_server.restoring import Restoring
from star.ps_server.received import Received, ReceivedGradients
from star.ps_server.shard import ShardState, Snapshot, squared_norm_if_finite
from star.ps_server.transport import ChunkPayload, Mailboxes, checked_dtype
from star.ps_server.version_watch import VersionWatch
from star.aggregate import Aggregator, Effects, PushRejected, RejectCode
from star.flat import WIRE_DTYPE, FlatError, shard_ranges
from star.logs import log
from star.plan import PlanError, SyncPlan, tree_layout
from star.policy.noise import NoiseAccumulator
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.limits import MAX_BATCH_SIZE
from star.rpc.common import MOVED_TO_KEY, plan_from_proto, plan_to_proto
from star.waits import WaitLedger

logger = logging.getLogger("ps")

_STATUS = {
    RejectCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    RejectCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
}


class ParameterServer(HandOver, Restoring, pb_grpc.ParameterServerServicer):
    def __init__(self, config: PSConfig):
        self.config = config
        self.aggregator = Aggregator()
        self.shard: ShardState | None = None
        self.total_numel: int | None = None
        self.registered: set[int] = set()
        self.rejected: dict[str, int] = {}
        self.received = ReceivedGradients()  # accepted payloads the aggregator has not applied or dropped yet
        self.relay_addresses: dict[int, str] = {}  # worker -> where it takes tree children's gradients
        self._tree: tuple[SyncPlan | None, dict[int, tuple[int, ...]], dict[int, int]] = (None, {}, {})
        self.push_bytes_received = 0
        self.pushes_received = 0
        self.pull_bytes_sent = 0  # parameter bytes streamed to pulls over gRPC (shared-memory pulls not included)
        self.waits = WaitLedger()  # who made whom wait, by this PS's clock (straggler summary, /metrics)
        self.noise = NoiseAccumulator()
        self._waiters: dict[int, asyncio.Future] = {}
        self.observers = VersionWatch()  # evaluators' pulls held for a version (PullRequest.wait_s)
        self._started = time.monotonic()
        self._first_update: float | None = None
        self._clock_held_s: float | None = None  # a resumed job's training time so far, until its first update here
        # Handing the shard over (MigrateOut): while draining, pulls are held; once moved, every call is redirected.
        self.draining = False
        self.moved_to: str | None = None
        self._moved_state: bytes | None = None  # what was handed over (sent again if the successor asks again)
        self._migration_done: asyncio.Event | None = None
        self._drained: asyncio.Event | None = None
        self._ready = asyncio.Event()  # unset while a moving shard is on its way here (migrate_from)
        if config.migrate_from is None:
            self._ready.set()
        self.checkpointer = ShardCheckpointer.for_ps(config)  # None: no checkpoint_dir
        self.mailboxes = Mailboxes(config.job_id, config.ps_index, config.shm)  # same-host payloads (transport seam)

    # ---- helpers ---------------------------------------------------------------
    def _since_first_update(self) -> float:
        """Training time by this PS's clock: -1 before any update; a resumed job's clock stands still until its first."""
        if self._first_update is None:
            return -1.0 if self._clock_held_s is None else self._clock_held_s
        return time.monotonic() - self._first_update

    def _require_shard(self) -> ShardState:
        if self.shard is None:
            raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "not_initialized", "parameter server not initialised: send Init first")
        return self.shard

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
                raise Rejected(
                    grpc.StatusCode.DEADLINE_EXCEEDED, "idle_stream", f"{what} stream sent nothing for {timeout_s} s (stream_idle_timeout_s)"
                ) from None
            yield message

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

    async def _reject(self, context: grpc.aio.ServicerContext, error: Rejected) -> None:
        self.rejected[error.reason] = self.rejected.get(error.reason, 0) + 1
        log(logger, logging.DEBUG, "rejected", reason=error.reason, detail=error.message)
        await context.abort(error.code, error.message)

    def _carry_out(self, effects: Effects) -> None:
        """Apply, drop, then release: released pulls must see the new parameters."""
        shard, plan = self.shard, self.aggregator.plan
        self.waits.settled(effects, None, 0.0)  # forget rounds flushed without a closer
        for apply in effects.applies:
            payloads = self.received.take(apply.gradient_ids)
            noise_round = None  # its small-batch norms are read before the in-place sum below
            if len(payloads.gradients) >= 2 and all(payloads.batch_sizes):
                noise_round = self.noise.begin_round(payloads.gradients, payloads.batch_sizes, payloads.counts,
                                                     payloads.squared_norms)
            assert shard is not None
            shard.follow_plan(len(plan.groups) if plan is not None else 1)
            left_out = shard.apply(payloads.gradients, apply.scale, payloads.intact, on_sum=noise_round)
            if left_out:
                self.rejected["overwritten_in_mailbox"] = self.rejected.get("overwritten_in_mailbox", 0) + left_out
                log(logger, logging.ERROR, "gradients left out: their mailbox was written while the PS held them",
                    count=left_out, version_after=apply.version_after)
            if self._first_update is None:
                self._first_update = time.monotonic() - (self._clock_held_s or 0.0)
                self._clock_held_s = None
        for drop in effects.drops:
            self.received.drop(drop.gradient_id)
        for worker in effects.released:
            future = self._waiters.pop(worker, None)
            if future is not None and not future.done():
                future.set_result(self._pull_view())
        if effects.applies:
            self.observers.applied(self.aggregator.version)
        if effects.applies and self.checkpointer is not None:
            self.checkpointer.record_version(self.aggregator.version)
            self.checkpointer.maybe_save(self.aggregator.version, self.capture)
        self._check_drained()

    def _pull_view(self) -> tuple[int, int, Snapshot]:
        shard = self._require_shard()
        version = self.aggregator.version
        return version, max(self.aggregator.epoch, 0), shard.snapshot(version, self.mailboxes.publish)

    # ---- RPCs ------------------------------------------------------------------
    async def Register(self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext) -> pb.RegisterReply:
        await self._gate(context)
        try:
            check_worker_id(request.worker_id, self.config.max_workers)
            check_total_numel(request.total_numel, self.config.max_model_bytes)
            if self.total_numel is not None and request.total_numel != self.total_numel:
                raise Rejected(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "layout_mismatch",
                    f"total_numel {request.total_numel} does not match this job's model ({self.total_numel} elements)",
                )
            check_relay_address(request.relay_address)
        except Rejected as error:
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
        own = shard_ranges(request.total_numel, self.config.num_ps)[self.config.ps_index] \
            if request.total_numel >= self.config.num_ps else None
        if request.want_shm and own is not None and own.numel:
            self.mailboxes.offer(request, own.numel, own.start).fill(reply)
        return reply

    async def Init(self, request_iterator, context: grpc.aio.ServicerContext) -> pb.InitReply:
        await self._gate(context)
        try:
            header, initial = await self._receive_stream(request_iterator, "Init", self._open_init)
            shard_range = shard_ranges(header.total_numel, self.config.num_ps)[self.config.ps_index]
        except Rejected as error:
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

    async def Push(self, request_iterator, context: grpc.aio.ServicerContext) -> pb.PushReply:
        await self._gate(context, hold_while_draining=False)
        try:
            header, gradient = await self._receive_push(request_iterator)
        except Rejected as error:
            await self._reject(context, error)
            raise
        return await self._take_push(header, gradient, context)

    async def PushShm(self, request: pb.PushHeader, context: grpc.aio.ServicerContext) -> pb.PushReply:
        await self._gate(context, hold_while_draining=False)
        try:
            if not request.shm_seq:
                raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", "PushShm needs shm_seq > 0 (chunks go through Push)")
            gradient = self._open_push(request, self._require_shard().range.numel).finish()
        except Rejected as error:
            await self._reject(context, error)
            raise
        return await self._take_push(request, gradient, context)

    async def _take_push(self, header: pb.PushHeader, gradient: torch.Tensor, context: grpc.aio.ServicerContext) -> pb.PushReply:
        """The checks and aggregator call every push gets, however its payload came."""
        try:
            if (self.draining or self.moved_to) and header.worker_id not in self.aggregator.outstanding:
                await self._gate(context)  # only gradients of pulls served here are taken before the shard leaves
            squared_norm = squared_norm_if_finite(gradient)
            usable = squared_norm is not None
            if not usable and self.config.nonfinite == "reject":
                raise Rejected(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "nonfinite",
                    f"gradient from worker {header.worker_id} has NaN/Inf values (nonfinite=reject)",
                )
            try:
                outcome = self.aggregator.push(header.worker_id, header.plan_epoch, header.base_version, usable=usable,
                                               contributors=tuple(header.contributors))
            except PushRejected as exc:
                raise Rejected(_STATUS[exc.code], exc.reason, exc.message) from None
        except Rejected as error:
            await self._reject(context, error)
            raise
        self.pushes_received += 1
        self.mailboxes.count_accepted(header)
        self.push_bytes_received += gradient.numel() * gradient.element_size()
        if usable:
            self.received.keep(outcome.gradient_id, Received(gradient, header.worker_id, header.batch_size,
                                                             1 + len(header.contributors), self.mailboxes.held_check(header),
                                                             squared_norm))
        now = time.monotonic()
        self.waits.arrived(outcome.gradient_id, header.worker_id, now)
        self.waits.settled(outcome.effects, outcome.gradient_id, now)
        self._carry_out(outcome.effects)
        return pb.PushReply(status=outcome.status.value, version=self.aggregator.version, gradient_id=outcome.gradient_id)

    async def _receive_stream(self, request_iterator, what: str, open_payload) -> tuple[Any, torch.Tensor]:
        """A header message, then the payload's chunks: (header, payload tensor). `open_payload(header)`
        checks the header (raising Rejected) and returns the payload its chunks fill."""
        header, payload = None, None
        async for message in self._messages(request_iterator, what):
            if message.HasField("header"):
                if header is not None:
                    raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", f"{what} stream has two headers")
                header = message.header
                payload = open_payload(header)
            elif payload is None:
                raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", f"{what} stream must start with a header")
            else:
                payload.add(message.chunk)
        if header is None or payload is None:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", f"{what} stream had no header")
        return header, payload.finish()

    def _open_init(self, header: pb.InitHeader) -> ChunkPayload:
        """Checks an Init header; the payload is this PS's shard of the initial fp32 parameters."""
        check_total_numel(header.total_numel, self.config.max_model_bytes)
        if header.dtype != WIRE_DTYPE:  # the initial parameters are the fp32 master copy: never rounded
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_dtype", f"dtype {header.dtype!r} is not {WIRE_DTYPE}")
        if self.total_numel is not None and header.total_numel != self.total_numel:
            raise Rejected(
                grpc.StatusCode.FAILED_PRECONDITION,
                "layout_mismatch",
                f"already initialised with total_numel {self.total_numel}, got {header.total_numel}",
            )
        try:
            shard_range = shard_ranges(header.total_numel, self.config.num_ps)[self.config.ps_index]
        except FlatError as exc:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_layout", str(exc)) from None
        return ChunkPayload(shard_range.numel, "Init")

    async def _receive_push(self, request_iterator) -> tuple[pb.PushHeader, torch.Tensor]:
        shard = self._require_shard()
        return await self._receive_stream(request_iterator, "Push", lambda header: self._open_push(header, shard.range.numel))

    def _open_push(self, header: pb.PushHeader, shard_numel: int):
        """Checks a Push header; the payload comes through the transport seam (gRPC chunks or a mailbox)."""
        check_worker_id(header.worker_id, self.config.max_workers)
        if header.worker_id not in self.registered:
            raise Rejected(
                grpc.StatusCode.NOT_FOUND, "unknown_worker", f"unknown worker {header.worker_id}: call Register first"
            )
        checked_dtype(header.dtype)
        if header.numel != shard_numel:
            raise Rejected(
                grpc.StatusCode.INVALID_ARGUMENT,
                "bad_length",
                f"numel {header.numel} does not match this shard's length {shard_numel}",
            )
        if len(header.contributors) >= self.config.max_workers:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_contributors",
                            f"{len(header.contributors)} contributors: this PS takes at most {self.config.max_workers} workers")
        for child in header.contributors:
            check_worker_id(child, self.config.max_workers)
            if child not in self.registered:
                raise Rejected(grpc.StatusCode.NOT_FOUND, "unknown_worker",
                                f"unknown contributor {child}: it must call Register first")
        if header.batch_size > MAX_BATCH_SIZE:
            raise Rejected(
                grpc.StatusCode.INVALID_ARGUMENT, "bad_batch_size", f"batch_size {header.batch_size} exceeds {MAX_BATCH_SIZE}"
            )
        return self.mailboxes.push_payload(header, shard_numel)  # the transport seam

    async def Pull(self, request: pb.PullRequest, context: grpc.aio.ServicerContext):
        served = await self._serve_pull(request, context)
        if served is None:
            return
        header, chunks = served
        yield pb.PullReply(header=header)
        for offset, data in chunks:
            yield pb.PullReply(chunk=pb.TensorChunk(offset=offset, data=data))
            self.pull_bytes_sent += len(data)

    async def PullShm(self, request: pb.PullRequest, context: grpc.aio.ServicerContext) -> pb.PullHeader:
        served = await self._serve_pull(request, context, need_mailbox=True)
        if served is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the shard left while this pull waited")
        return served[0]  # type: ignore[index]

    async def _serve_pull(self, request: pb.PullRequest, context,
                          need_mailbox: bool = False) -> tuple[pb.PullHeader, list[tuple[int, bytes]]] | None:
        """The header and chunks of a pull, once its round allows; None when the shard left meanwhile.
        `need_mailbox` (PullShm): refuse a puller without a mailbox here, after the checks every pull gets."""
        worker = request.worker_id
        await self._gate(context, hold_while_draining=not request.observer)
        try:
            shard = self._require_shard()
            check_worker_id(worker, self.config.max_workers)
            if not request.observer and worker not in self.registered:
                raise Rejected(grpc.StatusCode.NOT_FOUND, "unknown_worker", f"unknown worker {worker}: call Register first")
            dtype = checked_dtype(request.dtype)
            if need_mailbox and (not request.shm or request.observer or worker not in self.mailboxes.boxes):
                raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "no_mailbox",
                               f"worker {worker} has no shared-memory mailbox here: register again (want_shm) or use Pull")
        except Rejected as error:
            await self._reject(context, error)
            raise
        if not request.observer:
            self.mailboxes.release(worker)
        if request.observer and request.wait_s > 0 and self.aggregator.version < request.min_version:
            await self.observers.wait_for(request.min_version, request.wait_s)
        view = self._pull_view() if request.observer else await self._wait_for_round(worker)
        if view is None:  # the shard moved away while this pull waited
            await self._gate(context)
            return None
        version, epoch, snapshot = view
        if request.observer and version < request.min_version:  # an evaluator polling: the header says "not yet"
            shm_seq, shm_slot, chunks = 0, 0, []
        else:
            shm_seq, shm_slot, chunks = self.mailboxes.pull_body(request, snapshot)  # the transport seam
        plan = self.aggregator.plan
        applied_at = self.observers.applied_at(version)
        made = {} if applied_at is None or self._first_update is None else {"version_applied_s": applied_at - self._first_update}
        header = pb.PullHeader(
            version=version, plan_epoch=epoch, numel=shard.range.numel, dtype=dtype, range_start=shard.range.start,
            shm_seq=shm_seq, shm_slot=shm_slot, since_first_update_s=self._since_first_update(),
            push_pace_bytes_per_s=(plan.push_pace_bytes_per_s or 0.0) if plan else 0.0, **made, **self._tree_role(worker))
        return header, chunks

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

    async def _wait_for_round(self, worker: int) -> tuple[int, int, Snapshot] | None:
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

    async def ConfigurePlan(self, request: pb.Plan, context: grpc.aio.ServicerContext) -> pb.ConfigureReply:
        await self._gate(context)
        try:
            check_plan_fields(request, self.config.max_workers)
            plan = plan_from_proto(request)
        except PlanError as exc:
            await self._reject(context, Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_plan", f"invalid plan: {exc}"))
            raise
        except Rejected as error:
            await self._reject(context, error)
            raise
        try:
            effects = self.aggregator.configure(plan)
        except PushRejected as exc:
            await self._reject(context, Rejected(_STATUS[exc.code], exc.reason, exc.message))
            raise
        if effects.applies and self.shard is None:  # cannot happen: no push is accepted before Init
            raise RuntimeError("updates to apply before initialisation")
        self._carry_out(effects)
        log(logger, logging.INFO, "plan switched", plan=plan.describe(), flushed=len(effects.applies), released=len(effects.released))
        return pb.ConfigureReply(
            epoch=plan.epoch, version=self.aggregator.version, released=len(effects.released), flushed=len(effects.applies)
        )

    async def Stats(self, request: pb.StatsRequest, context: grpc.aio.ServicerContext) -> pb.PsStats:
        agg = self.aggregator
        counts = agg.accounting()
        counters = {k: v for k, v in agg.counters.items()}
        counters.update({f"rejected_{k}": v for k, v in self.rejected.items()})
        counters.update(self.waits.counters())
        reply = pb.PsStats(
            ps_index=self.config.ps_index,
            version=agg.version,
            plan_epoch=max(agg.epoch, 0),
            plan=agg.plan.describe() if agg.plan else "",
            plan_in_force=plan_to_proto(agg.plan) if agg.plan else None,
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
        reply.counters.update(self.mailboxes.counters())
        if self.shard is not None:
            reply.range_start, reply.range_end = self.shard.range.start, self.shard.range.end
        return reply

    async def Health(self, request: pb.HealthRequest, context: grpc.aio.ServicerContext) -> pb.HealthReply:
        import os  # noqa: PLC0415

        return pb.HealthReply(status="serving", role="ps", uptime_s=time.monotonic() - self._started, pid=os.getpid())
