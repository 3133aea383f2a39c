"""Per-worker data sharding and batching.

Strided shards keep every worker's slice class-balanced when the rows are
already shuffled, and need no coordination: worker i only needs N and i.
"""

from __future__ import annotations

import torch

from star.tasks.base import TaskData
from star.tasks.global_batch import ShardTape, round_slice


def shard_indices(num_samples: int, worker_id: int, num_workers: int) -> torch.Tensor:
    """Rows worker_id, worker_id + N, worker_id + 2N, ... of a dataset."""
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if not 0 <= worker_id < num_workers:
        raise ValueError(f"worker_id must be in [0, {num_workers}), got {worker_id}")
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    return torch.arange(worker_id, num_samples, num_workers, dtype=torch.long)


class BatchStream:
    """Endless shuffled batches from one worker's shard.

    Batches may change size between calls (the coordinator resizes stragglers' batches live), so
    a batch that crosses an epoch boundary is completed from the next epoch's shuffle instead of
    being cut short. The order is the shard's tape (`shard_tape`) read from the start: the same
    rule that places resized batches in the global batch, so the two can never disagree.
    """

    def __init__(self, data: TaskData, worker_id: int, num_workers: int, seed: int = 0) -> None:
        self._data = data
        self._shard = shard_indices(len(data), worker_id, num_workers)
        if len(self._shard) == 0:
            raise ValueError(
                f"worker_id {worker_id} gets no rows: {len(data)} samples over {num_workers} workers"
            )
        self._own = ShardTape(_SequentialOrders(self._shard, seed + worker_id).order, len(self._shard))
        self._drawn = 0  # samples handed out so far: the position on the tape
        self._num_workers, self._seed = num_workers, seed
        self._tapes: list[ShardTape] | None = None  # every shard's order, once batches are cut from global ones

    @property
    def shard(self) -> torch.Tensor:
        """Dataset rows this worker owns (unshuffled)."""
        return self._shard

    @property
    def epoch(self) -> int:
        """Number of completed passes over the shard (a pass counts once a sample past it is drawn)."""
        return max(0, self._drawn - 1) // len(self._shard)

    def next_indices(self, batch_size: int) -> torch.Tensor:
        """Dataset row indices of the next batch."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        indices = self._own.indices(self._drawn, batch_size)
        self._drawn += batch_size
        return indices

    def next_batch(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) of exactly `batch_size` samples."""
        indices = self.next_indices(batch_size)
        return self._data.inputs[indices], self._data.targets[indices]

    def round_batch(self, round_index: int, offset: int, size: int, base_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) at positions [offset, offset + size) of round `round_index`'s global batch
        (star.tasks.global_batch): what a worker computes once the coordinator placed its batch."""
        if self._tapes is None:
            self._tapes = [shard_tape(len(self._data), j, self._num_workers, self._seed) for j in range(self._num_workers)]
        indices = round_slice(self._tapes, round_index, offset, size, base_batch)
        return self._data.inputs[indices], self._data.targets[indices]


def shard_tape(num_samples: int, worker_id: int, num_workers: int, seed: int) -> ShardTape:
    """Shard `worker_id`'s endless order as its BatchStream draws it (one generator seeded
    seed + worker_id, one permutation per epoch), readable at any position."""
    shard = shard_indices(num_samples, worker_id, num_workers)
    return ShardTape(_SequentialOrders(shard, seed + worker_id).order, len(shard))


class _SequentialOrders:
    """Epoch orders drawn one after another from one generator (one permutation per epoch); an
    epoch asked for again after later ones were drawn is replayed from the seed."""

    def __init__(self, shard: torch.Tensor, seed: int):
        self._shard, self._seed = shard, seed
        self._generator = torch.Generator().manual_seed(seed)
        self._next_epoch = 0

    def order(self, epoch: int) -> torch.Tensor:
        if epoch < self._next_epoch:
            self._generator, self._next_epoch = torch.Generator().manual_seed(self._seed), 0
        while True:
            order = self._shard[torch.randperm(len(self._shard), generator=self._generator)]
            self._next_epoch += 1
            if self._next_epoch > epoch:
                return order
