"""The transport seam of the PS: how a payload arrives or leaves, never what is decided about it.

A Push or Init stream yields one header, then its payload through a `Payload`: gRPC chunks
(`ChunkPayload`, float32 or bfloat16 on the wire) or, for a same-host worker, its shared-memory
mailbox (`MailboxPayload`, star/shm.py). Either way the server gets a float32 tensor of the shard's
length and runs the same checks and the same aggregator calls on it, so a decision never depends on
how the bytes came. A Pull answers with one header and then chunks, or with the header alone after
the parameters were put in the worker's mailbox (`pull_body`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import grpc
import torch

from star.ps_server.config import Rejected
from star.flat import BF16_WIRE, MAX_CHUNK_BYTES, ChunkAssembler, FlatError, wire_dtype
from star.logs import log
from star.rpc import star_pb2 as pb
from star.rpc.common import max_stream_chunks
from star.ps_server.board import BoardSlots, Placement
from star.shm import GradSegment, Mailbox, PullBoard, ShmError, board_name, mailbox_name, sweep

logger = logging.getLogger("ps")

BOARD_SLOTS = 3  # synchronous rounds need 2 (the version being read, the next); a third for asynchronous ones


def checked_dtype(name: str) -> str:
    try:
        return wire_dtype(name)
    except FlatError as exc:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_dtype", str(exc)) from None


class ChunkPayload:
    """A payload arriving as gRPC chunks: they must tile [0, numel) exactly, in the header's dtype."""

    def __init__(self, numel: int, what: str, dtype: str = ""):
        self.what = what
        self.assembler = ChunkAssembler(numel, dtype=checked_dtype(dtype))
        self.count = 0

    def add(self, chunk: pb.TensorChunk) -> None:
        limit = max_stream_chunks(self.assembler.numel, self.assembler.element_bytes)
        if self.count + 1 > limit:
            raise Rejected(grpc.StatusCode.RESOURCE_EXHAUSTED, "too_many_chunks",
                           f"{self.what} stream sent more than {limit} chunks for {self.assembler.numel} elements "
                           f"(chunks must average >= 128 KiB)")
        self.count += 1
        if len(chunk.data) > MAX_CHUNK_BYTES:
            raise Rejected(grpc.StatusCode.RESOURCE_EXHAUSTED, "oversized_chunk",
                           f"chunk of {len(chunk.data)} bytes exceeds the {MAX_CHUNK_BYTES}-byte limit")
        try:
            self.assembler.add(chunk.offset, chunk.data)
        except FlatError as exc:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_chunk", str(exc)) from None

    def finish(self) -> torch.Tensor:
        try:
            return self.assembler.finish()
        except FlatError as exc:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_length", str(exc)) from None


class MailboxPayload:
    """A push whose gradient waits in the worker's mailbox, stamped with the header's shm_seq."""

    def __init__(self, box: Mailbox, seq: int):
        self.box, self.seq = box, seq

    def add(self, chunk: pb.TensorChunk) -> None:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", "a shared-memory push (shm_seq > 0) carries no chunks")

    def finish(self) -> torch.Tensor:
        """The gradient in place in the mailbox (see star/shm.py's ownership rule): no copy."""
        try:
            return self.box.push_view(self.seq)
        except ShmError as exc:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_shm_seq", str(exc)) from None


class GradSegmentPayload:
    """A push whose gradient is this PS's range of the worker's gradient segment, stamped shm_seq."""

    def __init__(self, link: "GradLink", seq: int):
        self.link, self.seq = link, seq

    def add(self, chunk: pb.TensorChunk) -> None:
        raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_stream", "a shared-memory push (shm_seq > 0) carries no chunks")

    def finish(self) -> torch.Tensor:
        """The gradient in place in the worker's segment (the same ownership rule as a mailbox's): no copy."""
        try:
            return self.link.segment.push_view(self.link.shard, self.seq, self.link.start, self.link.start + self.link.numel)
        except ShmError as exc:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_shm_seq", str(exc)) from None


@dataclass(frozen=True)
class GradLink:
    """A worker's gradient segment as this PS mapped it: its stamp word and this PS's range in it."""

    segment: GradSegment
    shard: int
    start: int
    numel: int


@dataclass(frozen=True)
class Offer:
    """What a worker that asked for shared memory is told at Register (empty names: none here)."""

    name: str = ""
    nonce: bytes = b""
    board_name: str = ""
    board_nonce: bytes = b""
    board_slots: int = 0
    doorbell: str = ""  # the PS's doorbell socket ("": none; headers go by PushShm/PullShm)
    socket_port: int = 0  # the PS's socket channel for workers on other hosts (0: none; payloads go by gRPC)
    grad_mapped: bool = False  # the worker's gradient segment is mapped here: pushes may leave it there

    def fill(self, reply: pb.RegisterReply) -> None:
        reply.shm_grad_mapped = self.grad_mapped
        reply.shm_name, reply.shm_nonce = self.name, self.nonce
        reply.shm_board_name, reply.shm_board_nonce, reply.shm_board_slots = self.board_name, self.board_nonce, self.board_slots
        reply.shm_doorbell, reply.socket_port = self.doorbell, self.socket_port


class Mailboxes:
    """This PS's shared memory: a mailbox per worker that asked (and could have) one, and one pull board."""

    def __init__(self, job_id: str, ps_index: int, enabled: bool):
        self.job_id, self.ps_index, self.enabled = job_id, ps_index, enabled
        self.boxes: dict[int, Mailbox] = {}
        self.grads: dict[int, GradLink] = {}  # workers' gradient segments mapped here (zero-copy pushes)
        self.grad_pushes = 0  # accepted pushes summed straight out of a worker's gradient segment
        self.board: PullBoard | None = None
        self.slots = BoardSlots(BOARD_SLOTS)
        self.pushes = 0  # pushes that came through a mailbox
        self.pulls = 0
        self.board_pulls = 0  # of those, served from the pull board (the rest: written into the mailbox)
        self.bf16_pushes = 0  # pushes whose chunks were bfloat16
        self.doorbell = ""  # the doorbell socket's path, once the daemon serves one (offered with every mailbox)
        self.doorbell_calls = 0  # pushes and pulls whose header came by the doorbell
        self.socket_port = 0  # the socket channel's port, once the daemon serves one (offered with every mailbox)
        self.socket_pushes = 0  # accepted pushes whose bytes came by the socket channel (counted in `pushes` too)
        self.socket_pulls = 0  # pulls served by the socket channel (counted in `pulls` too)
        self.bf16_pull_roundings = 0  # board versions rounded to bfloat16 for the socket channel's bf16 pulls
        self.observer_board_pulls = 0  # evaluator pulls served from the pull board (not counted in `pulls`)
        if enabled:
            removed = sweep()
            if removed:
                log(logger, logging.INFO, "removed shared-memory mailboxes of processes that are gone", count=len(removed))

    def offer(self, request: pb.RegisterRequest, numel: int, start: int) -> Offer:
        """The registering worker's mailbox (the one it already has, so that a second Register under its id,
        e.g. the evaluator's, or a restarted worker's, maps the same file) and the board, with its gradient
        segment mapped when it offered one; empty when none can be made. `numel`, `start`: this PS's range."""
        if not self.enabled:
            return Offer()
        worker = request.worker_id
        try:
            if self.board is None or self.board.numel != numel:
                self._new_board(numel)
            box = self.boxes.get(worker)
            if box is None or box.numel != numel:
                if box is not None:
                    self.boxes.pop(worker).close()
                box, _ = Mailbox.create(mailbox_name(self.job_id, self.ps_index, worker), numel)
                self.boxes[worker] = box
        except (OSError, ShmError) as exc:
            log(logger, logging.WARNING, "no shared-memory mailbox: this worker's payloads go over gRPC", worker=worker, error=str(exc))
            return Offer()
        assert self.board is not None
        return Offer(box.path.name, box.nonce, self.board.path.name, self.board.nonce, self.board.slots, self.doorbell,
                     self.socket_port, self._map_grads(request, numel, start))

    def _map_grads(self, request: pb.RegisterRequest, numel: int, start: int) -> bool:
        """Map the worker's gradient segment (replacing one it registered before); False when it offered
        none or it cannot be mapped here (another host's /dev/shm: its pushes then come by the mailbox).
        A Register that offers none (the evaluator's, under worker 0's id) leaves a mapped one as it is."""
        if not request.shm_grad_name:
            return False
        old = self.grads.pop(request.worker_id, None)
        if old is not None:
            old.segment.close()
        try:
            segment = GradSegment.attach(request.shm_grad_name, request.total_numel, request.shm_grad_shards,
                                         request.shm_grad_nonce)
        except (OSError, ShmError) as exc:
            log(logger, logging.INFO, "worker's gradient segment not mapped: its pushes come by the mailbox",
                worker=request.worker_id, error=str(exc))
            return False
        if not 0 <= request.shm_grad_shard < segment.shards:  # not a client of ours: it gets no zero-copy pushes
            segment.close()
            log(logger, logging.WARNING, "worker's gradient segment not mapped: shm_grad_shard out of range",
                worker=request.worker_id, shm_grad_shard=request.shm_grad_shard, shards=segment.shards)
            return False
        self.grads[request.worker_id] = GradLink(segment, request.shm_grad_shard, start, numel)
        return True

    def _new_board(self, numel: int) -> None:
        if self.board is not None:
            self.board.close()
            self.board = None
        self.board, _ = PullBoard.create(board_name(self.job_id, self.ps_index), numel, BOARD_SLOTS)
        self.slots = BoardSlots(BOARD_SLOTS)

    def publish(self, params: torch.Tensor, version: int) -> Placement | None:
        """Write a new version's parameters on the board once for every same-host puller (None: no board,
        or every slot is still read; the pullers then get them in their mailboxes)."""
        if self.board is None or self.board.numel != params.numel():
            return None
        slot = self.slots.free_slot()
        if slot is None:
            return None
        placement = Placement(slot, self.board.publish(slot, params, version), version, self.board.area(slot))
        self.slots.place(placement)
        return placement

    def release(self, worker: int) -> None:
        """A call from `worker`: what it was served from the board has been read."""
        self.slots.release(worker)

    def push_payload(self, header: pb.PushHeader, numel: int) -> ChunkPayload | MailboxPayload:
        """Where this push's gradient comes from: the worker's mailbox (shm_seq > 0) or the stream's chunks."""
        self.release(header.worker_id)
        if not header.shm_seq:
            return ChunkPayload(numel, "Push", header.dtype)
        if header.shm_grad:
            link = self.grads.get(header.worker_id)
            if link is None or link.numel != numel:
                raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "no_mailbox",
                               f"worker {header.worker_id} has no shared-memory mailbox here for its gradient segment: "
                               f"register again (shm_grad_name)")
            return GradSegmentPayload(link, header.shm_seq)
        box = self.boxes.get(header.worker_id)
        if box is None or box.numel != numel:
            raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "no_mailbox",
                           f"worker {header.worker_id} has no shared-memory mailbox here: register again (want_shm)")
        return MailboxPayload(box, header.shm_seq)

    def held_check(self, header: pb.PushHeader) -> Callable[[], bool] | None:
        """For a gradient left in its mailbox: a check that it is still the one pushed (None: the PS owns a copy)."""
        if not header.shm_seq:
            return None
        seq = header.shm_seq
        if header.shm_grad:
            link = self.grads[header.worker_id]
            return lambda: link.segment.intact(link.shard, seq)
        box = self.boxes[header.worker_id]
        return lambda: box.push_intact(seq)

    def count_accepted(self, header: pb.PushHeader) -> None:
        """Count a push by how it travelled, once the PS has accepted it (a refused push changes no counter)."""
        if header.shm_seq:
            self.pushes += 1
            self.grad_pushes += bool(header.shm_grad)
        elif header.dtype == BF16_WIRE:
            self.bf16_pushes += 1

    def pull_body(self, request: pb.PullRequest, snapshot) -> tuple[int, int, list[tuple[int, bytes]]]:
        """(shm_seq, shm_slot, chunks to stream): a worker that asked and has a mailbox reads the board slot
        its version is on (shm_slot = slot + 1), or its mailbox (shm_slot 0); anyone else gets chunks."""
        if request.observer:
            return self._observer_body(request, snapshot)
        box = self.boxes.get(request.worker_id) if request.shm else None
        if box is None:
            return 0, 0, snapshot.chunks(checked_dtype(request.dtype))
        self.pulls += 1
        placement = snapshot.placement
        if placement is not None and self.board is not None:
            self.slots.read_by(placement.slot, request.worker_id)
            self.board_pulls += 1
            return placement.seq, placement.slot + 1, []
        return box.put_pull(snapshot.chunks(), snapshot.version), 0, []

    def _observer_body(self, request: pb.PullRequest, snapshot) -> tuple[int, int, list[tuple[int, bytes]]]:
        """An evaluator on this host reads the version's board slot, as workers do: at 10M parameters a
        streamed pull was 40 MB through both processes for each evaluation. It is never written into a
        mailbox (the evaluator shares worker 0's) and holds no slot: a slot rewritten while it copies fails
        the stamp check, and the evaluator pulls that shard again as chunks."""
        placement = snapshot.placement
        if request.shm and request.worker_id in self.boxes and placement is not None and self.board is not None:
            self.observer_board_pulls += 1
            return placement.seq, placement.slot + 1, []
        return 0, 0, snapshot.chunks(checked_dtype(request.dtype))

    def counters(self) -> dict[str, int]:
        """How pushes and pulls travelled, for Stats (transport_in_use in star/shm.py reads them)."""
        return dict(shm_pushes=self.pushes, shm_pulls=self.pulls, shm_board_pulls=self.board_pulls,
                    bf16_pushes=self.bf16_pushes, doorbell_calls=self.doorbell_calls, socket_pushes=self.socket_pushes,
                    shm_grad_pushes=self.grad_pushes, socket_pulls=self.socket_pulls,
                    bf16_pull_roundings=self.bf16_pull_roundings, observer_board_pulls=self.observer_board_pulls)

    def close(self) -> None:
        for box in self.boxes.values():
            box.close()
        self.boxes.clear()
        for link in self.grads.values():
            link.segment.close()
        self.grads.clear()
        if self.board is not None:
            self.board.close()
            self.board = None
