"""The PS's slice of the flat parameter vector: parameters, optimizer, per-version wire snapshots."""

from __future__ import annotations

import math
from typing import Callable, Iterable, Mapping, Sequence

import torch

from star.config import OptimizerConfig
from star.flat import WIRE_DTYPE, ShardRange, tensor_chunks
from star.optim import build_optimizer, matched_momentum
from star.ps_server.board import Placement


def squared_norm_if_finite(tensor: torch.Tensor) -> float | None:
    """|g|² of a pushed gradient, or None when it holds a NaN or an Inf: the PS's finiteness check and the
    small-batch half of its noise estimate in one read of the payload, at push time (off the round's
    critical path; before, the round's closer read every gradient twice more). A finite dot product
    implies finite elements, as a finite sum does: squares are never negative, so NaN and Inf survive
    it. Only a dot that overflowed float32 (elements near 1e19) takes the exact, slower path."""
    flat = tensor.reshape(-1)
    squared = float(torch.dot(flat, flat))
    if math.isfinite(squared):
        return squared
    if not bool(torch.isfinite(flat).all()):
        return None
    return float(torch.dot(flat.double(), flat.double()))


def summation_order(gradient_ids: Iterable[int], senders: Mapping[int, int]) -> list[int]:
    """A round's gradients in their senders' order, not in arrival order. Float addition is not
    associative: summed as the pushes raced in, two runs of one seed parted after a few updates (gpt-1m
    under AdamW needed 28 updates to its target in one run and 38 in the next); in worker order a
    synchronous run is the same arithmetic however the pushes race, as DDP's all-reduce is."""
    return sorted(gradient_ids, key=lambda gid: (senders.get(gid, -1), gid))


def _sum_in_place(gradients: list[torch.Tensor]) -> torch.Tensor:
    total = gradients[0]
    for gradient in gradients[1:]:
        total.add_(gradient)
    return total


def _sum_into(out: torch.Tensor, gradients: list[torch.Tensor]) -> torch.Tensor:
    """((g0 + g1) + g2) + ... written into `out`: the same arithmetic as _sum_in_place."""
    if len(gradients) == 1:
        return out.copy_(gradients[0])
    torch.add(gradients[0], gradients[1], out=out)
    for gradient in gradients[2:]:
        out.add_(gradient)
    return out


class ShardState:
    """The PS's slice of the flat parameter vector and the optimizer over it."""

    def __init__(self, shard: ShardRange, initial: torch.Tensor, optimizer: OptimizerConfig):
        self.range = shard
        self.param = torch.nn.Parameter(initial.clone(), requires_grad=True)
        self.optimizer = build_optimizer(optimizer, self.param)
        self._optimizer_config = optimizer
        self._snapshot: Snapshot | None = None
        self._accumulator: torch.Tensor | None = None  # where gradients summed out of mailboxes go

    def follow_plan(self, independent_groups: int) -> None:
        """Set SGD's momentum for a plan of `independent_groups` groups that update on their own
        (optimizer.async_momentum; Adam's beta1 stays as configured)."""
        config = self._optimizer_config
        if config.name != "sgd" or config.async_momentum == "fixed" or not config.momentum:
            return
        momentum = matched_momentum(config.momentum, independent_groups)
        for group in self.optimizer.param_groups:
            group["momentum"] = momentum

    def apply(self, gradients: list[torch.Tensor], scale: float,
              intact: Sequence[Callable[[], bool] | None] | None = None,
              on_sum: Callable[[torch.Tensor], None] | None = None) -> int:
        """Sum the gradients left to right, scale, take one optimizer step; returns how many were left
        out. `intact[i]`: for a gradient still in a worker's shared-memory mailbox, whether it is
        unchanged (None: a receive buffer this server owns). Owned buffers are used once: the sum goes
        into the first in place (same order as stack(...).sum(0), without a stacked N x numel copy).
        Mailbox gradients are summed into a buffer of the shard's, then checked: one written while
        held (a broken client) is left out and the rest summed again, never a torn mix. `on_sum`
        sees the sum of the gradients applied, before it is scaled (the gradient-noise estimate)."""
        checks = list(intact) if intact is not None else [None] * len(gradients)
        if all(check is None for check in checks):
            total, left_out = _sum_in_place(gradients), 0
        else:
            total, left_out = self._sum_held(gradients, checks)
            if total is None:
                return left_out
        if on_sum is not None:
            on_sum(total)
        if scale != 1.0:
            total.mul_(scale)
        self.param.grad = total
        self.optimizer.step()
        self.param.grad = None
        return left_out

    def _sum_held(self, gradients: list[torch.Tensor], checks: list[Callable[[], bool] | None]) -> tuple[torch.Tensor | None, int]:
        keep = list(range(len(gradients)))
        while keep:
            if self._accumulator is None:
                self._accumulator = torch.empty_like(self.param.data)
            total = _sum_into(self._accumulator, [gradients[i] for i in keep])
            broken = {i for i in keep if checks[i] is not None and not checks[i]()}
            if not broken:
                return total, len(gradients) - len(keep)
            keep = [i for i in keep if i not in broken]
        return None, len(gradients)

    def snapshot(self, version: int, publish: Callable[[torch.Tensor, int], Placement | None] | None = None) -> "Snapshot":
        """The parameters at `version`, copied once however many workers pull it: onto the shared-memory
        pull board when `publish` finds a slot, else into float32 wire chunks."""
        if self._snapshot is None or self._snapshot.version != version:
            placement = publish(self.param.data, version) if publish is not None else None
            if placement is not None:
                self._snapshot = Snapshot(version, placement=placement)
            else:
                self._snapshot = Snapshot(version, tensor_chunks(self.param.data))
        return self._snapshot


class Snapshot:
    """One version's parameters: on a board slot (kept while this snapshot lives) or as float32 wire
    chunks; the chunks, and other wire dtypes, are made on demand."""

    def __init__(self, version: int, chunks: list[tuple[int, bytes]] | None = None, placement: Placement | None = None):
        self.version = version
        self.placement = placement
        self._chunks = {} if chunks is None else {WIRE_DTYPE: chunks}

    def chunks(self, dtype: str = WIRE_DTYPE) -> list[tuple[int, bytes]]:
        if WIRE_DTYPE not in self._chunks:
            assert self.placement is not None
            self._chunks[WIRE_DTYPE] = tensor_chunks(self.placement.tensor)
        if dtype not in self._chunks:
            self._chunks[dtype] = _recode(self._chunks[WIRE_DTYPE], dtype)
        return self._chunks[dtype]


def _recode(chunks: list[tuple[int, bytes]], dtype: str) -> list[tuple[int, bytes]]:
    """float32 wire chunks re-encoded in `dtype`, chunk for chunk (same element offsets)."""
    return [(offset, tensor_chunks(torch.frombuffer(bytearray(data), dtype=torch.float32), len(data), dtype)[0][1])
            for offset, data in chunks]
