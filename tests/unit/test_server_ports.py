"""A daemon's port is its own: a second server on a port in use fails to bind (it used to share it)."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from star.rpc.common import CHANNEL_OPTIONS, CONTROL_CHANNEL_OPTIONS, EXCLUSIVE_PORT
from star.rpc.security import Credentials


@pytest.mark.parametrize("options", [CHANNEL_OPTIONS, CONTROL_CHANNEL_OPTIONS])
def test_a_second_server_on_a_port_in_use_fails_to_bind_instead_of_sharing_it(options):
    """gRPC's default SO_REUSEPORT let a second `star ps --port P` serve beside the first, the kernel splitting
    the workers' connections between them."""
    credentials = Credentials.load(None)
    first = grpc.server(futures.ThreadPoolExecutor(max_workers=1), options=options + EXCLUSIVE_PORT)
    second = grpc.server(futures.ThreadPoolExecutor(max_workers=1), options=options + EXCLUSIVE_PORT)
    try:
        port = credentials.add_port(first, "127.0.0.1:0")
        first.start()
        assert port > 0
        assert credentials.add_port(second, f"127.0.0.1:{port}") == 0
    finally:
        first.stop(None)
        second.stop(None)


def test_a_parameter_server_that_accepts_no_connection_is_named_with_the_likely_causes():
    """The coordinator's start-up said only `grpc.FutureTimeoutError` (a traceback) when a PS refused its TLS
    handshake or did not serve at the address."""
    from star.rpc.common import PsUnreachable
    from star.rpc.ps_client import PSClient

    probe = grpc.server(futures.ThreadPoolExecutor(max_workers=1), options=CHANNEL_OPTIONS + EXCLUSIVE_PORT)
    port = Credentials.load(None).add_port(probe, "127.0.0.1:0")
    probe.stop(None)  # a port nothing serves now
    with PSClient([f"127.0.0.1:{port}"], worker_id=0) as client:
        with pytest.raises(PsUnreachable, match=rf"127.0.0.1:{port} accepted no connection in 0.3 s.*TLS") as raised:
            client.wait_ready(0.3)
    assert isinstance(raised.value, grpc.FutureTimeoutError)  # callers that caught the bare timeout still do
