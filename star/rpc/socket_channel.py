"""The socket channel, client side: push and pull payloads to a PS on another host as raw bytes on TCP.

Why: across hosts every payload byte went through gRPC, whose Python stack was measured at 3-4x a gloo
all-reduce of the same bytes between network namespaces, while a plain TCP socket moving the same bytes
ran at about gloo's speed. So a PS serves, beside its gRPC port, one TCP port (RegisterReply.socket_port)
where a worker that cannot map its mailbox (another host) sends the same PushShm / PullShm headers as the
doorbell (DoorbellRequest frames, star/rpc/doorbell.py), each push followed by the gradient's bytes and each
pull's reply by the parameters' bytes. The PS writes the bytes into that worker's mailbox and reads them
from its pull board, and hands the header to the very PushShm / PullShm code, so every check, refusal and
aggregation step is the shared-memory path's (star/ps_server/socket_channel.py).

gRPC stays the protocol of record (Register, Init, plans, stats, the evaluator's pulls) and the fallback:
a connection that breaks is closed and the call made again over gRPC. Security is gRPC's: the first frame
carries the job token, and with TLS configured the socket is TLS with the same certificates and checks.

Framing: request frame [+ payload]; reply frame [+ payload + 8-byte stamp trailer for a pull]. Payloads
are float32, or bfloat16 (round to nearest even) with the bf16 wire; the trailer is the stamp the PS still
saw after sending (0: the area was written meanwhile, and the parameters received must not be used).
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading

import grpc
import torch
from google.protobuf.message import DecodeError

from star.flat import BF16_WIRE, WIRE_ELEMENT_BYTES, wire_dtype
from star.rpc import star_pb2 as pb
from star.rpc.doorbell import REPLY_GRACE_S, DoorbellBroken, DoorbellRpcError, encode, raise_for, receive_reply, recv_exactly, say_hello
from star.rpc.security import Credentials

STAMP = struct.Struct("<Q")
CONNECT_TIMEOUT_S = 5.0


def payload_view(tensor: torch.Tensor, dtype: str, scratch: dict) -> memoryview:
    """`tensor` (float32, contiguous) as the bytes of wire `dtype`: itself for float32, else rounded into a
    bfloat16 buffer kept in `scratch` (one per connection, reused)."""
    if wire_dtype(dtype) != BF16_WIRE:
        return memoryview(tensor.numpy()).cast("B")
    buffer = _scratch(scratch, tensor.numel())
    buffer.copy_(tensor)
    return memoryview(buffer.view(torch.int16).numpy()).cast("B")


def receive_payload(sock: socket.socket, out: torch.Tensor, dtype: str, scratch: dict, where: str) -> None:
    """Fill `out` (float32, contiguous) with a payload of wire `dtype` read from `sock`: float32 straight
    into `out`'s memory, bfloat16 into a scratch buffer, then widened."""
    if wire_dtype(dtype) != BF16_WIRE:
        recv_exactly(sock, memoryview(out.numpy()).cast("B"), where)
        return
    buffer = _scratch(scratch, out.numel())
    recv_exactly(sock, memoryview(buffer.view(torch.int16).numpy()).cast("B"), where)
    out.copy_(buffer)


def payload_bytes(numel: int, dtype: str) -> int:
    return numel * WIRE_ELEMENT_BYTES[wire_dtype(dtype)]


def _scratch(scratch: dict, numel: int) -> torch.Tensor:
    buffer = scratch.get("bf16")
    if buffer is None or buffer.numel() != numel:
        buffer = scratch["bf16"] = torch.empty(numel, dtype=torch.bfloat16)
    return buffer


def tuned(sock: socket.socket) -> socket.socket:
    """Headers go out at once (no Nagle wait behind a payload's ACKs); buffer sizes are left to the kernel's
    autotuning (fixed 4 MiB buffers measured slower between namespaces)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class SocketChannel:
    """One worker's connection to one PS's socket channel; one call at a time."""

    def __init__(self, host: str, port: int, credentials: Credentials):
        self.where = f"socket channel {host}:{port}"
        self._lock = threading.Lock()
        self._scratch: dict = {}
        raw = tuned(socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S))
        try:
            tls = credentials.ssl_client_context()
            self._sock = tls.wrap_socket(raw, server_hostname=credentials.server_name or host) if tls else raw
            say_hello(self._sock, credentials.token, self.where)
        except BaseException:
            raw.close()
            raise

    def close(self) -> None:
        self._sock.close()

    @property
    def closed(self) -> bool:
        return self._sock.fileno() < 0

    def push(self, header: pb.PushHeader, gradient: torch.Tensor, timeout_s: float | None) -> pb.PushReply:
        """Send the header and the gradient's bytes (in header.dtype); the PS's PushReply, or its refusal
        raised as DoorbellRpcError. DoorbellBroken: the connection failed, the push may go over gRPC."""
        request = pb.DoorbellRequest(push=header, timeout_s=timeout_s or 0.0)

        def call() -> pb.PushReply:
            self._sock.sendall(encode(request))
            self._sock.sendall(payload_view(gradient, header.dtype, self._scratch))
            reply = self._reply(timeout_s)
            return reply.push

        return self._call(call, timeout_s)

    def pull(self, request: pb.PullRequest, out: torch.Tensor, timeout_s: float | None) -> pb.PullHeader:
        """Ask for this worker's shard (request.dtype on the wire), written straight into `out`; returns the
        PullHeader (its shm fields cleared: the parameters are already in `out`)."""
        message = pb.DoorbellRequest(pull=request, timeout_s=timeout_s or 0.0)

        def call() -> pb.PullHeader:
            self._sock.sendall(encode(message))
            header = self._reply(timeout_s).pull
            if header.numel != out.numel():
                raise DoorbellBroken(f"{self.where} serves {header.numel} elements, expected {out.numel()}")
            receive_payload(self._sock, out, request.dtype, self._scratch, self.where)
            trailer = bytearray(STAMP.size)
            recv_exactly(self._sock, memoryview(trailer), self.where)
            if STAMP.unpack(trailer)[0] != header.shm_seq:  # written while it was sent: refuse, as a torn shm read is
                raise DoorbellRpcError(grpc.StatusCode.INVALID_ARGUMENT,
                                       f"{self.where}: the parameters changed while they were sent (bad_shm_seq)")
            header.shm_seq = header.shm_slot = 0
            return header

        return self._call(call, timeout_s)

    def _reply(self, timeout_s: float | None) -> pb.DoorbellReply:
        self._sock.settimeout(timeout_s + REPLY_GRACE_S if timeout_s else None)
        reply = receive_reply(self._sock, self.where)
        raise_for(reply)
        return reply

    def _call(self, call, timeout_s: float | None):
        if not self._lock.acquire(blocking=False):
            raise DoorbellBroken(f"{self.where} is busy with another call")
        try:
            self._sock.settimeout(timeout_s + REPLY_GRACE_S if timeout_s else None)
            return call()
        except socket.timeout:
            self.close()  # a reply may still come: this connection is out of step for good
            raise DoorbellRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer on {self.where} in time") from None
        except DoorbellRpcError:
            raise
        except (OSError, DecodeError, ssl.SSLError) as exc:
            self.close()
            raise DoorbellBroken(f"{self.where}: {exc}") from None
        finally:
            self._lock.release()
