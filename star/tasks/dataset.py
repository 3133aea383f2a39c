"""Tasks whose data is a map-style `torch.utils.data.Dataset`: each worker reads its shard through a DataLoader.

A worker owns rows worker_id, worker_id + N, ... (as with in-memory data); every epoch it visits
them in a fresh order drawn from (seed, worker id, epoch), so the order is reproducible and
differs per worker and per epoch. Samples are only built when a batch asks for them, so a
dataset larger than memory (files read, or samples generated, in `__getitem__`) works; what is
held is the epoch's order, a permutation of the shard's indices (8 bytes a sample: 10 million
samples over 4 workers, 20 MB each). Batch sizes change live (the coordinator resizes stragglers'
batches): the sampler hands out index lists of the size asked for last; with `loader_workers` > 0
the batches already prefetched (2 per loader worker) keep their old size.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from star.tasks.base import TaskData, as_pair
from star.tasks.global_batch import ShardTape, round_slice
from star.tasks.sharding import BatchStream, shard_indices


def epoch_order(shard: torch.Tensor, seed: int, worker_id: int, epoch: int) -> torch.Tensor:
    """This worker's shard in the order of `epoch`: a permutation keyed by (seed, worker id, epoch)."""
    generator = torch.Generator().manual_seed((seed * 1_000_003 + worker_id) * 1_000_033 + epoch)
    return shard[torch.randperm(len(shard), generator=generator)]


class ShardBatchSampler:
    """Endless batches of indices of one worker's shard; `batch_size` may change between batches.
    A batch that crosses an epoch's end is completed from the next epoch's order."""

    def __init__(self, num_samples: int, worker_id: int, num_workers: int, seed: int, batch_size: int):
        self.shard = shard_indices(num_samples, worker_id, num_workers)
        if len(self.shard) == 0:
            raise ValueError(f"worker_id {worker_id} gets no rows: {num_samples} samples over {num_workers} workers")
        self.seed, self.worker_id = seed, worker_id
        self.batch_size = batch_size
        self.epoch = 0

    def __iter__(self) -> Iterator[list[int]]:
        order, position = epoch_order(self.shard, self.seed, self.worker_id, self.epoch), 0
        while True:
            batch: list[int] = []
            while len(batch) < self.batch_size:
                if position == len(order):
                    self.epoch += 1
                    order, position = epoch_order(self.shard, self.seed, self.worker_id, self.epoch), 0
                take = min(self.batch_size - len(batch), len(order) - position)
                batch.extend(order[position:position + take].tolist())
                position += take
            yield batch


class DatasetStream:
    """The worker's batches of a Dataset task, through a DataLoader; same interface as BatchStream."""

    def __init__(self, dataset: Dataset, worker_id: int, num_workers: int, seed: int, batch_size: int,
                 collate_fn: Callable | None = None, loader_workers: int = 0, pin_memory: bool = False):
        self.sampler = ShardBatchSampler(len(dataset), worker_id, num_workers, seed, batch_size)
        self.loader = DataLoader(dataset, batch_sampler=self.sampler, collate_fn=collate_fn, num_workers=loader_workers,
                                 pin_memory=pin_memory, persistent_workers=loader_workers > 0)
        self._batches = iter(self.loader)  # started now: loader processes fork before any gRPC channel exists
        self._dataset, self._collate = dataset, collate_fn or default_collate
        self._num_workers, self._seed = num_workers, seed
        self._tapes: list[ShardTape] | None = None

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def next_batch(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) of the next batch; a new size applies from the next batch the sampler draws."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.sampler.batch_size = batch_size
        return as_pair(next(self._batches))

    def round_batch(self, round_index: int, offset: int, size: int, base_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions [offset, offset + size) of round `round_index`'s global batch (star.tasks.global_batch),
        read from the Dataset in this process: the loader's prefetched batches would be cut for other
        rounds, so this path does without its processes."""
        if self._tapes is None:
            n = len(self._dataset)
            self._tapes = [_epoch_tape(shard_indices(n, j, self._num_workers), self._seed, j) for j in range(self._num_workers)]
        indices = round_slice(self._tapes, round_index, offset, size, base_batch)
        return as_pair(self._collate([self._dataset[int(i)] for i in indices]))


def _epoch_tape(shard: torch.Tensor, seed: int, worker_id: int) -> ShardTape:
    return ShardTape(lambda epoch: epoch_order(shard, seed, worker_id, epoch), len(shard))


def batch_stream(task, worker_id: int, num_workers: int, seed: int, batch_size: int):
    """The worker's batches: in-memory tensors (BatchStream) or a Dataset through a DataLoader."""
    if isinstance(task.train, TaskData):
        return BatchStream(task.train, worker_id, num_workers, seed=seed)
    return DatasetStream(task.train, worker_id, num_workers, seed, batch_size, task.collate_fn, task.loader_workers,
                         task.pin_memory)

