"""The PS's slice of the flat parameter vector: parameters, optimizer, per-version wire snapshots."""

from __future__ import annotations

from typing import Iterable, Mapping

import torch

from star.config import OptimizerConfig
from star.flat import WIRE_DTYPE, ShardRange, tensor_chunks
from star.optim import build_optimizer


def all_finite(tensor: torch.Tensor) -> bool:
    """Exact NaN/Inf check: a finite sum implies finite elements (NaN and Inf propagate through a sum),
    so only a sum that overflowed needs the elementwise pass (which allocates a numel bool tensor)."""
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


def summation_order(gradient_ids: Iterable[int], senders: Mapping[int, int]) -> list[int]:
    """A round's gradients in their senders' order, not in arrival order. Float addition is not
    associative: summed as the pushes raced in, two runs of one seed parted after a few updates (gpt-1m
    under AdamW needed 28 updates to its target in one run and 38 in the next); in worker order a
    synchronous run is the same arithmetic however the pushes race, as DDP's all-reduce is."""
    return sorted(gradient_ids, key=lambda gid: (senders.get(gid, -1), gid))


class ShardState:
    """The PS's slice of the flat parameter vector and the optimizer over it."""

    def __init__(self, shard: ShardRange, initial: torch.Tensor, optimizer: OptimizerConfig):
        self.range = shard
        self.param = torch.nn.Parameter(initial.clone(), requires_grad=True)
        self.optimizer = build_optimizer(optimizer, self.param)
        self._snapshot: Snapshot | None = None

    def apply(self, gradients: list[torch.Tensor], scale: float) -> None:
        # The gradients are this server's own receive buffers, used once: sum into the first in place
        # (same left-to-right order as stack(...).sum(0), without a stacked N x numel copy).
        total = gradients[0]
        for gradient in gradients[1:]:
            total.add_(gradient)
        if scale != 1.0:
            total.mul_(scale)
        self.param.grad = total
        self.optimizer.step()
        self.param.grad = None

    def snapshot(self, version: int) -> "Snapshot":
        """The parameters at `version` as wire chunks, serialised once however many workers pull it."""
        if self._snapshot is None or self._snapshot.version != version:
            self._snapshot = Snapshot(version, tensor_chunks(self.param.data))
        return self._snapshot


class Snapshot:
    """One version's parameters: float32 wire chunks, and the other wire dtypes made from them on demand."""

    def __init__(self, version: int, chunks: list[tuple[int, bytes]]):
        self.version = version
        self._chunks = {WIRE_DTYPE: chunks}

    def chunks(self, dtype: str = WIRE_DTYPE) -> list[tuple[int, bytes]]:
        if dtype not in self._chunks:
            self._chunks[dtype] = _recode(self._chunks[WIRE_DTYPE], dtype)
        return self._chunks[dtype]


def _recode(chunks: list[tuple[int, bytes]], dtype: str) -> list[tuple[int, bytes]]:
    """float32 wire chunks re-encoded in `dtype`, chunk for chunk (same element offsets)."""
    return [(offset, tensor_chunks(torch.frombuffer(bytearray(data), dtype=torch.float32), len(data), dtype)[0][1])
            for offset, data in chunks]
