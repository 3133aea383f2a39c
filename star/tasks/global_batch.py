"""Batches cut out of each round's global batch, so that resizing batches changes who computes
which samples, never which samples a round trains on.

Without resizes, worker w's k-th batch is the k-th `base_batch` samples of its own shard's
endless order (star.tasks.sharding). Round k's *global batch* is those batches laid end to end
in worker order: positions [w·base, (w+1)·base) are shard w's k-th batch. Once the coordinator
sizes batches by speed (LB-BSP), it gives every worker an offset into that layout as well, and a
worker then takes positions [offset, offset + size) of the round it computes for. Sizes that
sum to the global batch tile it exactly, so a round sums the gradients of the same samples as
without resizes (weighted by size, star.worker): batch sizing keeps synchronous SGD's
arithmetic, up to floating-point order, and no shard is visited more often because its
worker is fast. Positions past the global batch (sizes summing to more, e.g. a worker
admitted mid-run) continue into the next round's layout.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch


class ShardTape:
    """One shard's endless sample order (its epochs' orders end to end), readable at any position.
    `order_of_epoch(e)` must return the same order for the same e; epochs are asked for in
    increasing order as rounds advance, so only the last two are kept."""

    def __init__(self, order_of_epoch: Callable[[int], torch.Tensor], shard_len: int):
        if shard_len <= 0:
            raise ValueError(f"shard_len must be > 0, got {shard_len}")
        self._order_of_epoch = order_of_epoch
        self.shard_len = shard_len
        self._epochs: dict[int, torch.Tensor] = {}

    def _epoch(self, epoch: int) -> torch.Tensor:
        if epoch not in self._epochs:
            self._epochs[epoch] = self._order_of_epoch(epoch)
            for old in [e for e in self._epochs if e < epoch - 1]:
                del self._epochs[old]
        return self._epochs[epoch]

    def indices(self, start: int, count: int) -> torch.Tensor:
        """Dataset rows at positions [start, start + count) of this shard's endless order."""
        pieces = []
        while count > 0:
            epoch, within = divmod(start, self.shard_len)
            take = min(count, self.shard_len - within)
            pieces.append(self._epoch(epoch)[within:within + take])
            start, count = start + take, count - take
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def round_slice(tapes: Sequence[ShardTape], round_index: int, offset: int, size: int, base_batch: int) -> torch.Tensor:
    """Dataset rows at positions [offset, offset + size) of round `round_index`'s global batch, where
    position p is sample p mod base_batch of shard (p // base_batch) mod W's batch number
    round_index + (p // base_batch) // W (W = len(tapes))."""
    if round_index < 0 or offset < 0 or size <= 0 or base_batch <= 0:
        raise ValueError(f"round_slice needs round_index >= 0, offset >= 0, size > 0, base_batch > 0; "
                         f"got {round_index}, {offset}, {size}, {base_batch}")
    pieces = []
    position, end = offset, offset + size
    while position < end:
        slot, within = divmod(position, base_batch)
        shard, rounds_ahead = slot % len(tapes), slot // len(tapes)
        take = min(end - position, base_batch - within)
        pieces.append(tapes[shard].indices((round_index + rounds_ahead) * base_batch + within, take))
        position += take
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)
