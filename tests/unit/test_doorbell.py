"""The doorbell's frames and errors: a refusal reads like the RPC's (code, details, a moved shard's
address where PSClient looks for it), and an oversized frame is refused before it is read."""

from __future__ import annotations

import grpc
import pytest

from star.rpc import star_pb2 as pb
from star.rpc.doorbell import FRAME, MAX_FRAME_BYTES, DoorbellBroken, encode, error_reply, frame_length, raise_for
from star.rpc.ps_client import _lost_mailbox, moved_to


@pytest.mark.parametrize("code", [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                                  grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAUTHENTICATED,
                                  grpc.StatusCode.DEADLINE_EXCEEDED])
def test_a_refusal_comes_back_with_the_rpcs_code_and_details(code):
    reply = pb.DoorbellReply.FromString(encode(error_reply(code, "why it was refused"))[FRAME.size:])
    with pytest.raises(grpc.RpcError) as error:
        raise_for(reply)
    assert error.value.code() == code and error.value.details() == "why it was refused"
    assert moved_to(error.value) is None


def test_a_moved_shard_is_followed_as_over_grpc():
    with pytest.raises(grpc.RpcError) as error:
        raise_for(error_reply(grpc.StatusCode.UNAVAILABLE, "shard 0 moved", moved_to="10.0.0.2:5000"))
    assert moved_to(error.value) == "10.0.0.2:5000"


def test_a_lost_mailbox_is_recognised_as_over_grpc():
    with pytest.raises(grpc.RpcError) as error:
        raise_for(error_reply(grpc.StatusCode.FAILED_PRECONDITION, "worker 3 has no shared-memory mailbox here"))
    assert _lost_mailbox(error.value)


def test_answers_pass_through():
    raise_for(pb.DoorbellReply(push=pb.PushReply(status="pending")))  # not an error: nothing raised


@pytest.mark.parametrize("length, refused", [(0, False), (MAX_FRAME_BYTES, False), (MAX_FRAME_BYTES + 1, True), (2**32 - 1, True)])
def test_a_frame_over_the_limit_is_refused_before_it_is_read(length, refused):
    prefix = FRAME.pack(length)
    if refused:
        with pytest.raises(DoorbellBroken, match="exceeds"):
            frame_length(prefix)
    else:
        assert frame_length(prefix) == length
