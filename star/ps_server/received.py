"""Gradients a PS has accepted and not yet applied or dropped: their payloads and what travels with them.

The aggregator decides by gradient id; this store keeps, per id, the payload (a receive buffer the PS
owns, or a view into the sender's shared-memory mailbox with the check that it is still the one
pushed), the sender (which fixes the summation order), the batch size, how many gradients a tree
push sums and the payload's squared norm (for the noise scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from star.ps_server.shard import summation_order


@dataclass(frozen=True)
class Received:
    gradient: torch.Tensor
    sender: int
    batch_size: int = 0
    count: int = 1  # gradients summed in this payload (tree pushes: > 1)
    intact: Callable[[], bool] | None = None  # mailbox payloads: still the one pushed? (None: owned)
    squared_norm: float | None = None  # |gradient|², read with the finiteness check at push time


@dataclass(frozen=True)
class Round:
    """One apply's payloads, in summation order."""

    gradients: list[torch.Tensor]
    batch_sizes: list[int]
    counts: list[int]
    intact: list[Callable[[], bool] | None]
    squared_norms: list[float | None]


class ReceivedGradients:
    def __init__(self) -> None:
        self._by_id: dict[int, Received] = {}

    def keep(self, gradient_id: int, received: Received) -> None:
        self._by_id[gradient_id] = received

    def take(self, gradient_ids) -> Round:
        """The payloads of one apply, forgotten here, in their senders' order (summation_order)."""
        senders = {gid: self._by_id[gid].sender for gid in gradient_ids}
        taken = [self._by_id.pop(gid) for gid in summation_order(gradient_ids, senders)]
        return Round([r.gradient for r in taken], [r.batch_size for r in taken], [r.count for r in taken],
                     [r.intact for r in taken], [r.squared_norm for r in taken])

    def drop(self, gradient_id: int) -> None:
        self._by_id.pop(gradient_id, None)
