"""The socket channel, PS side: push and pull payloads of workers on other hosts as raw TCP bytes
(star/rpc/socket_channel.py says why and how a call is framed).

A remote worker gets a mailbox here as a same-host one does; this server is its hands on it. A push's bytes
are received straight into the worker's push area (bfloat16 ones widened there) and stamped, exactly as a
same-host worker writes and stamps it, and the header then goes to the servicer's own PushShm; a pull's
header goes to PullShm, and the parameters are sent from the board slot (or pull area) it names, followed by
the stamp the PS still saw after sending. So the ownership rule, the seqlock checks, every refusal and the
aggregator's calls are the shared-memory path's, unchanged.

Threads, not the event loop, move the bytes: one per connection, blocked in recv_into/sendall with the GIL
released, while the PS's asyncio loop (gRPC, the aggregator) only ever sees headers, handed over with
run_coroutine_threadsafe. A pull waiting for its round watches its connection, and a hang-up cancels it
as a cancelled RPC does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import select
import socket
import ssl
import threading

import grpc
import torch
from google.protobuf.message import DecodeError

from star.flat import BF16_WIRE, FlatError, WIRE_DTYPE, wire_dtype
from star.logs import log
from star.ps_server.doorbell import answer, hello_reply
from star.ps_server.narrowed import NarrowedSlots
from star.rpc import star_pb2 as pb
from star.rpc.doorbell import FRAME, DoorbellBroken, encode, error_reply, frame_length, recv_exactly
from star.rpc.socket_channel import STAMP, payload_bytes, payload_view, receive_payload, tuned
from star.shm import ShmError

logger = logging.getLogger("ps")

NO_STAMP = (1 << 63) - 1  # a push whose bytes did not land in a mailbox: every check before the mailbox's still runs
HELLO_TIMEOUT_S = 10.0
WAIT_POLL_S = 0.05  # how often a waiting pull looks at its connection (and at shutdown)
DISCARD_BYTES = 1 << 20


class _HungUp(Exception):
    """The client closed (or sent out of turn) while its pull waited."""


class SocketChannelServer:
    """Serves one PS's socket channel on (host, an ephemeral port); `start()` returns the port."""

    def __init__(self, servicer, loop: asyncio.AbstractEventLoop, host: str, token: str | None,
                 tls: ssl.SSLContext | None):
        self.servicer, self.loop, self.host, self.token, self.tls = servicer, loop, host, token, tls
        self._listener: socket.socket | None = None
        self._connections: set[socket.socket] = set()
        self._count_lock = threading.Lock()
        self._closed = threading.Event()
        self.narrowed = NarrowedSlots()  # bf16 pulls: each board version rounded once

    def start(self) -> int:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, name="socket-channel", daemon=True).start()
        return listener.getsockname()[1]

    def close(self) -> None:
        self._closed.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        for conn in list(self._connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, peer = self._listener.accept()  # type: ignore[union-attr]
            except OSError:
                return
            threading.Thread(target=self._connection, args=(tuned(conn), peer), name=f"socket-{peer[1]}", daemon=True).start()

    def _connection(self, raw: socket.socket, peer) -> None:
        conn = raw
        self._connections.add(raw)
        try:
            raw.settimeout(HELLO_TIMEOUT_S)
            if self.tls is not None:
                conn = self.tls.wrap_socket(raw, server_side=True)
            hello = self._read(conn)
            reply = hello_reply(self.servicer, hello, self.token, "socket_channel")
            conn.sendall(encode(reply))
            if not reply.hello_ok:
                return
            conn.settimeout(None)
            scratch: dict = {}
            while not self._closed.is_set():
                request = self._read(conn)
                if request is None:
                    return
                kind = request.WhichOneof("body")
                if kind == "push":
                    self._push(conn, request, scratch)
                elif kind == "pull":
                    self._pull(conn, request, scratch)
                else:
                    conn.sendall(encode(error_reply(grpc.StatusCode.INVALID_ARGUMENT,
                                                    f"socket channel request {kind!r}: only push and pull after the hello")))
                    return
        except (OSError, DoorbellBroken, DecodeError, ssl.SSLError, _HungUp) as exc:
            log(logger, logging.DEBUG, "socket channel connection ended", peer=str(peer), error=str(exc))
        except Exception as exc:  # a bug here must not pass silently; the worker's next call goes over gRPC
            log(logger, logging.ERROR, "socket channel connection failed", peer=str(peer), error=repr(exc))
        finally:
            self._connections.discard(raw)
            with contextlib.suppress(OSError):
                conn.close()

    @staticmethod
    def _read(conn: socket.socket) -> pb.DoorbellRequest | None:
        """The next request frame, or None at a clean end of the connection."""
        prefix = bytearray(FRAME.size)
        first = conn.recv_into(prefix)
        if first == 0:
            return None
        if first < FRAME.size:
            recv_exactly(conn, memoryview(prefix)[first:], "a worker")
        body = bytearray(frame_length(bytes(prefix)))
        recv_exactly(conn, memoryview(body), "a worker")
        return pb.DoorbellRequest.FromString(bytes(body))

    # ---- push ------------------------------------------------------------------------------
    def _push(self, conn: socket.socket, request: pb.DoorbellRequest, scratch: dict) -> None:
        header = request.push
        try:
            size = payload_bytes(header.numel, header.dtype)
        except FlatError:  # the payload's length is unknown: answer the servicer's refusal and hang up
            refused = pb.DoorbellRequest(push=header, timeout_s=request.timeout_s)
            refused.push.shm_seq = NO_STAMP  # PushShm refuses the dtype before it looks at a mailbox
            conn.sendall(encode(self._call(refused)))
            raise DoorbellBroken(f"push in unknown dtype {header.dtype!r}") from None
        box = self.servicer.mailboxes.boxes.get(header.worker_id)
        if box is not None and box.numel == header.numel:
            seq = box.write_push(lambda area: receive_payload(conn, area, header.dtype, scratch, "a worker"))
        else:  # no mailbox, or the wrong length: take the bytes off the wire; PushShm says what is wrong
            self._discard(conn, size, box.numel * 4 if box is not None else 0)
            seq = NO_STAMP
        reply = self._call(self._as_mailbox_push(request, seq))
        if reply.WhichOneof("body") == "push":
            with self._count_lock:
                self.servicer.mailboxes.socket_pushes += 1
                if wire_dtype(header.dtype) != WIRE_DTYPE:
                    self.servicer.mailboxes.bf16_pushes += 1
        conn.sendall(encode(reply))

    @staticmethod
    def _as_mailbox_push(request: pb.DoorbellRequest, seq: int) -> pb.DoorbellRequest:
        """The header PushShm checks: the mailbox now holds float32, stamped `seq`."""
        header = pb.PushHeader()
        header.CopyFrom(request.push)
        header.dtype, header.shm_seq = WIRE_DTYPE, seq
        return pb.DoorbellRequest(push=header, timeout_s=request.timeout_s)

    @staticmethod
    def _discard(conn: socket.socket, size: int, allowed: int) -> None:
        """Read and drop `size` bytes (a payload with nowhere to go); more than `allowed` (four times a
        mailbox's push area) is a broken or hostile peer: hang up instead."""
        if size > max(allowed, DISCARD_BYTES):
            raise DoorbellBroken(f"a push of {size} bytes with no mailbox of that length")
        sink = bytearray(min(size, DISCARD_BYTES))
        while size:
            piece = memoryview(sink)[: min(size, len(sink))]
            recv_exactly(conn, piece, "a worker")
            size -= len(piece)

    # ---- pull ------------------------------------------------------------------------------
    def _pull(self, conn: socket.socket, request: pb.DoorbellRequest, scratch: dict) -> None:
        pull = pb.PullRequest()
        pull.CopyFrom(request.pull)
        pull.shm, pull.observer = True, False
        reply = self._call(pb.DoorbellRequest(pull=pull, timeout_s=request.timeout_s), watch=conn)
        if reply.WhichOneof("body") != "pull":
            conn.sendall(encode(reply))
            return
        header = reply.pull
        try:
            area, intact = self._source(header, pull.worker_id)
        except ShmError as exc:
            conn.sendall(encode(error_reply(grpc.StatusCode.INVALID_ARGUMENT, f"bad_shm_seq: {exc}")))
            return
        header.dtype = wire_dtype(request.pull.dtype)
        if header.dtype == BF16_WIRE and header.shm_slot:  # every remote puller of this version shares one rounding
            slot = header.shm_slot - 1
            payload = memoryview(self.narrowed.copy_of(slot, header.shm_seq, area, intact).view(torch.int16).numpy()).cast("B")
            intact = functools.partial(self.narrowed.holds, slot, header.shm_seq)
        else:
            payload = payload_view(area, header.dtype, scratch)
        conn.sendall(encode(pb.DoorbellReply(pull=header)))
        conn.sendall(payload)
        conn.sendall(STAMP.pack(header.shm_seq if intact() else 0))
        with self._count_lock:
            self.servicer.mailboxes.socket_pulls += 1
            self.servicer.mailboxes.bf16_pull_roundings = self.narrowed.rounded

    def _source(self, header: pb.PullHeader, worker: int):
        """Where PullShm put the parameters (a board slot, or the worker's pull area) and a check that they
        are still there."""
        boxes, seq = self.servicer.mailboxes, header.shm_seq
        if header.shm_slot:
            board, slot = boxes.board, header.shm_slot - 1
            return board.slot_view(slot, seq), lambda: board.slot_intact(slot, seq)
        box = boxes.boxes.get(worker)
        if box is None:
            raise ShmError("the mailbox left while its pull was served")
        return box.pull_view(seq), lambda: box.pull_intact(seq)

    # ---- the PS's loop ---------------------------------------------------------------------
    def _call(self, request: pb.DoorbellRequest, watch: socket.socket | None = None) -> pb.DoorbellReply:
        """Run the header through the servicer on the PS's loop and wait for its answer; with `watch`, a
        connection that closes meanwhile cancels the call (raises _HungUp)."""
        future = asyncio.run_coroutine_threadsafe(answer(self.servicer, request, "socket channel"), self.loop)
        while True:
            try:
                return future.result(timeout=WAIT_POLL_S)
            except concurrent.futures.TimeoutError:
                pass
            hung_up = watch is not None and _readable(watch)
            if hung_up or self._closed.is_set():
                future.cancel()
                raise _HungUp("the connection closed while its pull waited" if hung_up else "the PS is shutting down")


def _readable(sock: socket.socket) -> bool:
    """Whether `sock` has data or a hang-up waiting (poll, not select: a PS may hold over 1,024 descriptors)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(0))
