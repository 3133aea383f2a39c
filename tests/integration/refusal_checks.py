"""What every transport's refusal test needs: a push header to vary, and the PS's observable state, which
a refused call must leave exactly as it was (shared by the shm, doorbell and socket-channel tests)."""

from __future__ import annotations

import torch

from star.rpc import star_pb2 as pb
from star.rpc.ps_client import PSClient


def push_header(shard_numel: int, /, **overrides) -> pb.PushHeader:
    """Worker 0's first push of a whole shard under plan epoch 1, with `overrides` (the field a case gets wrong)."""
    fields = dict(worker_id=0, plan_epoch=1, base_version=0, iteration=0, dtype="float32", numel=shard_numel)
    fields.update(overrides)
    return pb.PushHeader(**fields)


def observed_state(client: PSClient, numel: int) -> tuple[tuple, torch.Tensor]:
    """The first PS's version and round counters, and its parameters (an observer pull records no round)."""
    stats = client.stats()[0]
    out = torch.empty(numel)
    client.pull(out, timeout_s=10, observer=True)
    return (stats.version, stats.accepted, stats.applied, stats.dropped, stats.pending), out
