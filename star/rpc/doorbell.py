"""The same-host doorbell, client side: PushShm and PullShm headers over a Unix socket.

Why: with the payload already in shared memory (star/shm.py), what is left of a push or a pull is
a header of a few dozen bytes, and a gRPC unary call spends ~0.5 ms of CPU on each side to carry it
(HTTP/2 framing, its threads and completion queues). On a host whose cores the workers need, that is
the largest cost of a round. The doorbell carries the same messages (DoorbellRequest in
proto/star.proto) as length-prefixed frames on a Unix socket the PS made next to its mailboxes; the PS
answers through the very servicer code behind PushShm and PullShm, so every check and refusal is the
same. gRPC stays the protocol of record: Register, Init, plans, stats and every cross-host byte.

Security: the socket file is 0600 under /dev/shm (only the job's user can connect) and the first
frame must carry the job token, checked as the gRPC interceptor checks it. Nothing leaves the host,
so the TLS option has nothing to protect here.

Errors come back as `DoorbellRpcError`, a grpc.RpcError with code(), details() and
trailing_metadata() (a moved shard's address under the same key), so callers handle them exactly as
the RPC's errors.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from typing import Callable, TypeVar

import grpc
from google.protobuf.message import DecodeError

from star.rpc import star_pb2 as pb
from star.rpc.common import MOVED_TO_KEY

T = TypeVar("T")

FRAME = struct.Struct("<I")
MAX_FRAME_BYTES = 1 << 20  # headers are tiny; a larger frame is a broken or hostile peer
REPLY_GRACE_S = 5.0  # past the call's own timeout (which the PS enforces), how long the client still waits
HELLO_TIMEOUT_S = 5.0
_CODES = {code.value[0]: code for code in grpc.StatusCode}


class DoorbellBroken(OSError):
    """The connection failed (closed, reset, a bad frame): the call may be made again over gRPC."""


class DoorbellRpcError(grpc.RpcError):
    """A refusal or failure the PS answered through the doorbell, shaped like the RPC's error."""

    def __init__(self, code: grpc.StatusCode, details: str, moved_to: str = ""):
        super().__init__(f"{code.name}: {details}")
        self._code, self._details = code, details
        self._metadata = ((MOVED_TO_KEY, moved_to),) if moved_to else ()

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self):
        return self._metadata


def error_reply(code: grpc.StatusCode, details: str, moved_to: str = "") -> pb.DoorbellReply:
    return pb.DoorbellReply(error=pb.DoorbellError(code=code.value[0], details=details, moved_to=moved_to))


def raise_for(reply: pb.DoorbellReply) -> None:
    if reply.WhichOneof("body") == "error":
        e = reply.error
        raise DoorbellRpcError(_CODES.get(e.code, grpc.StatusCode.UNKNOWN), e.details, e.moved_to)


def encode(message) -> bytes:
    data = message.SerializeToString()
    return FRAME.pack(len(data)) + data


def frame_length(prefix: bytes) -> int:
    """The length a frame's prefix announces; DoorbellBroken when it is over MAX_FRAME_BYTES."""
    (length,) = FRAME.unpack(prefix)
    if length > MAX_FRAME_BYTES:
        raise DoorbellBroken(f"doorbell frame of {length} bytes exceeds {MAX_FRAME_BYTES}")
    return length


def recv_exactly(sock: socket.socket, view: memoryview, where: str) -> None:
    """Fill `view` from `sock` (DoorbellBroken when the peer closes first). A plain blocking socket waits in
    the kernel for every byte (MSG_WAITALL): one call with the GIL released, not one per arriving segment,
    which matters to a PS whose threads receive several workers' payloads at once."""
    got, size = 0, len(view)
    flags = socket.MSG_WAITALL if sock.gettimeout() is None and not isinstance(sock, ssl.SSLSocket) else 0
    while got < size:
        n = sock.recv_into(view[got:], 0, flags)
        if n == 0:
            raise DoorbellBroken(f"{where} closed the connection")
        got += n


def receive_reply(sock: socket.socket, where: str) -> pb.DoorbellReply:
    """The next length-prefixed DoorbellReply on `sock`."""
    prefix = bytearray(FRAME.size)
    recv_exactly(sock, memoryview(prefix), where)
    body = bytearray(frame_length(bytes(prefix)))
    recv_exactly(sock, memoryview(body), where)
    return pb.DoorbellReply.FromString(bytes(body))


def say_hello(sock: socket.socket, token: str | None, where: str) -> None:
    """The first exchange on a connection: the job token, answered hello_ok (else an error is raised)."""
    sock.sendall(encode(pb.DoorbellRequest(hello=pb.DoorbellHello(token=token or ""))))
    reply = receive_reply(sock, where)
    raise_for(reply)
    if not reply.hello_ok:
        raise DoorbellBroken(f"{where} did not accept the hello")


class Doorbell:
    """One connection to one PS's doorbell; one call at a time (a lock holds it from send to reply)."""

    def __init__(self, path: str, token: str | None):
        self.path = path
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(HELLO_TIMEOUT_S)
            self._sock.connect(path)
            say_hello(self._sock, token, f"doorbell {path}")
        except BaseException:
            self._sock.close()
            raise

    def close(self) -> None:
        self._sock.close()

    def ring(self, request: pb.DoorbellRequest, fallback: Callable[[], T]) -> "Ringing[T]":
        """Send `request` now; `.result()` waits for its answer. When the connection breaks before an
        answer, the doorbell is closed and `fallback()` (the same call over gRPC) answers instead; so it
        does while another call holds this doorbell (a second thread, or a call whose answer was never read)."""
        if not self._lock.acquire(blocking=False):
            return Ringing(None, fallback, self)
        try:
            self._sock.sendall(encode(request))
        except OSError:
            self._lock.release()
            self.close()
            return Ringing(None, fallback, self)
        return Ringing(request, fallback, self)

    def _receive(self) -> pb.DoorbellReply:
        return receive_reply(self._sock, f"doorbell {self.path}")

    @property
    def closed(self) -> bool:
        return self._sock.fileno() < 0


class Ringing:
    """A call in flight on a doorbell (the connection's lock is held until result())."""

    def __init__(self, request: pb.DoorbellRequest | None, fallback: Callable[[], T], bell: Doorbell):
        self._request, self._fallback, self._bell = request, fallback, bell

    def result(self):
        """The PushReply or PullHeader; raises DoorbellRpcError for a refusal (as the RPC would)."""
        if self._request is None:  # the send failed: nothing reached the PS over this connection
            return self._fallback()
        bell, timeout_s = self._bell, self._request.timeout_s
        try:
            bell._sock.settimeout(timeout_s + REPLY_GRACE_S if timeout_s > 0 else None)
            reply = bell._receive()
        except socket.timeout:
            bell.close()  # a reply may still come: this connection is out of step for good
            raise DoorbellRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer on doorbell {bell.path} in time") from None
        except (OSError, DecodeError):
            bell.close()
            return self._fallback()
        finally:
            self._request = None
            bell._lock.release()
        raise_for(reply)
        return reply.push if reply.WhichOneof("body") == "push" else reply.pull
