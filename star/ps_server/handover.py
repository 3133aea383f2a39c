"""Handing a PS's shard to a successor without losing an update (MigrateOut) and taking one over.

`HandOver` is mixed into `star.ps_server.server.ParameterServer`: it uses that class's aggregator,
shard, waiters and `_carry_out`, and owns the draining/moved state transitions.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING

import grpc

from star.ps_server.checkpointing import capture_shard
from star.ps_server.config import PSConfig, Rejected
from star.checkpoint import shard_from_bytes, shard_to_bytes
from star.flat import SEND_CHUNK_BYTES
from star.logs import log
from star.rpc import star_pb2 as pb
from star.rpc.common import MAX_LABEL_CHARS
from star.rpc.security import Credentials

if TYPE_CHECKING:
    from star.ps_server.server import ParameterServer

logger = logging.getLogger("ps")


class HandOver:
    """MigrateOut and its drain; see proto/star.proto for the protocol."""

    async def MigrateOut(self, request: pb.MigrateOutRequest, context: grpc.aio.ServicerContext):
        """Hand this shard to its successor at `new_address` without losing an update (see the proto)."""
        new = request.new_address
        resend = self.moved_to is not None
        try:
            if not new or len(new) > MAX_LABEL_CHARS:
                raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_address", f"new_address {new[:64]!r} must be 1..{MAX_LABEL_CHARS} characters")
            if not (math.isfinite(request.drain_timeout_s) and 0 <= request.drain_timeout_s <= 3600):
                raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_timeout", f"drain_timeout_s={request.drain_timeout_s} must be in [0, 3600]")
            if resend and new != self.moved_to:
                raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "moved", f"this shard already moved to {self.moved_to}")
            if not resend:
                self._require_shard()
                if self.draining:
                    raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "moving", "this shard is already being handed over")
        except Rejected as error:
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


async def take_over(servicer: ParameterServer, config: PSConfig, credentials: Credentials, own_address: str) -> None:
    """Receive the shard from the PS at `config.migrate_from` (it drains, then streams its state),
    and serve it from here; callers that arrive meanwhile wait (see ParameterServer._gate)."""
    from star.ps_server.migration import fetch_moving_shard

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
