"""The receiving side of a live shard move: fetch the state a draining PS streams out.

Runs in a thread of the new PS (a blocking gRPC stream), before it starts serving.
"""

from __future__ import annotations

from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CHANNEL_OPTIONS
from star.rpc.security import Credentials


class MigrationError(RuntimeError):
    """The shard did not arrive whole; the new PS must not serve."""


def fetch_moving_shard(source: str, own_address: str, credentials: Credentials, drain_timeout_s: float,
                       limit_bytes: int, timeout_s: float | None = None) -> bytes:
    """The serialised shard of the PS at `source`, which from then on redirects its callers to `own_address`."""
    channel = credentials.channel(source, CHANNEL_OPTIONS)
    try:
        stub = pb_grpc.ParameterServerStub(channel)
        request = pb.MigrateOutRequest(new_address=own_address, drain_timeout_s=drain_timeout_s)
        parts: list[bytes] = []
        total, received = None, 0
        for chunk in stub.MigrateOut(request, timeout=timeout_s or drain_timeout_s + 120.0):
            if total is None:
                total = chunk.total_bytes
                if not 0 < total <= limit_bytes:
                    raise MigrationError(f"{source} announced {total} bytes of state (limit {limit_bytes})")
            received += len(chunk.data)
            if received > total:
                raise MigrationError(f"{source} sent more than the {total} bytes it announced")
            parts.append(chunk.data)
        if total is None or received != total:
            raise MigrationError(f"{source} sent {received} of {total} bytes")
        return b"".join(parts)
    finally:
        channel.close()
