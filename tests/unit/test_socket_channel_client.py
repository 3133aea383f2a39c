"""The socket channel's client (star/rpc/socket_channel.py) against a scripted peer on loopback: payload
bytes and their bf16 round-off, a pull whose parameters changed while they were sent, and a peer that
hangs up, without PS daemons."""

from __future__ import annotations

import socket
import threading

import grpc
import pytest
import torch

from star.rpc import star_pb2 as pb
from star.rpc.doorbell import FRAME, DoorbellBroken, DoorbellRpcError, encode, frame_length, recv_exactly
from star.rpc.security import Credentials
from star.rpc.socket_channel import STAMP, SocketChannel, payload_view, receive_payload

NUMEL = 100_000


def _request(conn: socket.socket) -> pb.DoorbellRequest:
    prefix = bytearray(FRAME.size)
    recv_exactly(conn, memoryview(prefix), "test")
    body = bytearray(frame_length(bytes(prefix)))
    recv_exactly(conn, memoryview(body), "test")
    return pb.DoorbellRequest.FromString(bytes(body))


class FakePS:
    """Accepts one connection, answers its hello, then runs `script(conn)` on it."""

    def __init__(self, script):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received: list = []
        self.error: BaseException | None = None

        def serve():
            try:
                conn, _ = self.listener.accept()
                with conn:
                    assert _request(conn).WhichOneof("body") == "hello"
                    conn.sendall(encode(pb.DoorbellReply(hello_ok=True)))
                    script(conn, self.received)
            except BaseException as exc:  # noqa: BLE001 - reported by join()
                self.error = exc

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(timeout=10)
        self.listener.close()
        if self.error is not None:
            raise self.error


def _pull_script(params: torch.Tensor, dtype: str, trailer_delta: int):
    def script(conn, received):
        received.append(_request(conn))
        header = pb.PullHeader(numel=params.numel(), version=4, shm_seq=9, dtype=dtype)
        conn.sendall(encode(pb.DoorbellReply(pull=header)))
        conn.sendall(payload_view(params, dtype, {}))
        conn.sendall(STAMP.pack(9 + trailer_delta))
    return script


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_pull_writes_the_parameters_straight_into_the_buffer(dtype):
    params = torch.randn(NUMEL, generator=torch.Generator().manual_seed(1))
    peer = FakePS(_pull_script(params, dtype, trailer_delta=0))
    channel = SocketChannel("127.0.0.1", peer.port, Credentials())
    out = torch.empty(NUMEL)
    header = channel.pull(pb.PullRequest(worker_id=2, shm=True, dtype=dtype), out, timeout_s=10)
    channel.close()
    peer.join()
    assert header.version == 4 and header.shm_seq == 0  # the parameters are in `out`: nothing left to copy
    expected = params if dtype == "float32" else params.to(torch.bfloat16).float()
    assert torch.equal(out, expected)
    assert peer.received[0].pull.worker_id == 2 and peer.received[0].timeout_s == 10


def test_a_pull_whose_parameters_changed_while_they_were_sent_is_refused():
    params = torch.randn(NUMEL)
    peer = FakePS(_pull_script(params, "float32", trailer_delta=1))
    channel = SocketChannel("127.0.0.1", peer.port, Credentials())
    with pytest.raises(DoorbellRpcError) as error:
        channel.pull(pb.PullRequest(worker_id=0, shm=True), torch.empty(NUMEL), timeout_s=10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "bad_shm_seq" in error.value.details()
    channel.close()
    peer.join()


def test_a_push_sends_its_header_then_the_payload_in_the_wire_dtype():
    gradient = torch.randn(NUMEL, generator=torch.Generator().manual_seed(2)) * torch.logspace(-20, 20, NUMEL)

    def script(conn, received):
        for dtype in ("float32", "bfloat16"):
            request = _request(conn)
            out = torch.empty(request.push.numel)
            receive_payload(conn, out, dtype, {}, "test")
            received.append((request, out))
            conn.sendall(encode(pb.DoorbellReply(push=pb.PushReply(status="pending", version=1))))

    peer = FakePS(script)
    channel = SocketChannel("127.0.0.1", peer.port, Credentials())
    for dtype in ("float32", "bfloat16"):
        reply = channel.push(pb.PushHeader(worker_id=1, numel=NUMEL, dtype=dtype), gradient, timeout_s=10)
        assert reply.status == "pending"
    channel.close()
    peer.join()
    (fp32_request, fp32), (bf16_request, bf16) = peer.received
    assert fp32_request.push.dtype == "float32" and torch.equal(fp32, gradient)
    assert bf16_request.push.dtype == "bfloat16"
    assert torch.equal(bf16, gradient.to(torch.bfloat16).float())  # round to nearest even, as the gRPC wire does
    assert torch.all((bf16 - gradient).abs() <= gradient.abs() * 2.0**-8)  # within half a bf16 ulp


def test_a_peer_that_hangs_up_mid_call_breaks_the_channel_so_the_caller_can_use_grpc():
    def script(conn, received):
        received.append(_request(conn))  # then close without answering

    peer = FakePS(script)
    channel = SocketChannel("127.0.0.1", peer.port, Credentials())
    with pytest.raises(DoorbellBroken):
        channel.pull(pb.PullRequest(worker_id=0, shm=True), torch.empty(NUMEL), timeout_s=10)
    assert channel.closed
    peer.join()
