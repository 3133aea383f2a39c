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

import grpc
import torch

from star.ps_server.config import Rejected
from star.flat import BF16_WIRE, MAX_CHUNK_BYTES, ChunkAssembler, FlatError, wire_dtype
from star.logs import log
from star.rpc import star_pb2 as pb
from star.rpc.common import max_stream_chunks
from star.shm import Mailbox, ShmError, mailbox_name, sweep

logger = logging.getLogger("ps")


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
        try:
            return self.box.take_push(self.seq)
        except ShmError as exc:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "bad_shm_seq", str(exc)) from None


class Mailboxes:
    """This PS's shared-memory mailboxes, one per worker that asked (and could have) one."""

    def __init__(self, job_id: str, ps_index: int, enabled: bool):
        self.job_id, self.ps_index, self.enabled = job_id, ps_index, enabled
        self.boxes: dict[int, Mailbox] = {}
        self.pushes = 0  # pushes that came through a mailbox
        self.pulls = 0
        self.bf16_pushes = 0  # pushes whose chunks were bfloat16
        if enabled:
            removed = sweep()
            if removed:
                log(logger, logging.INFO, "removed shared-memory mailboxes of processes that are gone", count=len(removed))

    def offer(self, worker: int, numel: int) -> tuple[str, bytes]:
        """`worker`'s mailbox (the one it already has, so that a second Register under its id, e.g. the
        evaluator's, or a restarted worker's, maps the same file); ("", b"") when none can be made."""
        if not self.enabled:
            return "", b""
        box = self.boxes.get(worker)
        if box is not None and box.numel == numel:
            return box.path.name, box.nonce
        if box is not None:
            self.boxes.pop(worker).close()
        try:
            box, _ = Mailbox.create(mailbox_name(self.job_id, self.ps_index, worker), numel)
        except (OSError, ShmError) as exc:
            log(logger, logging.WARNING, "no shared-memory mailbox: this worker's payloads go over gRPC", worker=worker, error=str(exc))
            return "", b""
        self.boxes[worker] = box
        return box.path.name, box.nonce

    def push_payload(self, header: pb.PushHeader, numel: int) -> ChunkPayload | MailboxPayload:
        """Where this push's gradient comes from: the worker's mailbox (shm_seq > 0) or the stream's chunks."""
        if not header.shm_seq:
            return ChunkPayload(numel, "Push", header.dtype)
        box = self.boxes.get(header.worker_id)
        if box is None or box.numel != numel:
            raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "no_mailbox",
                           f"worker {header.worker_id} has no shared-memory mailbox here: register again (want_shm)")
        return MailboxPayload(box, header.shm_seq)

    def count_accepted(self, header: pb.PushHeader) -> None:
        """Count a push by how it travelled, once the PS has accepted it (a refused push changes no counter)."""
        if header.shm_seq:
            self.pushes += 1
        elif header.dtype == BF16_WIRE:
            self.bf16_pushes += 1

    def pull_body(self, request: pb.PullRequest, snapshot) -> tuple[int, list[tuple[int, bytes]]]:
        """(shm_seq, chunks to stream): the parameters go into the worker's mailbox when it asked and has one."""
        box = self.boxes.get(request.worker_id) if request.shm and not request.observer else None
        if box is None:
            return 0, snapshot.chunks(checked_dtype(request.dtype))
        self.pulls += 1
        return box.put_pull(snapshot.chunks(), snapshot.version), []

    def close(self) -> None:
        for box in self.boxes.values():
            box.close()
        self.boxes.clear()
