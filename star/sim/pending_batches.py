"""Every simulated worker's directed batches not in force yet: the worker daemon's rule (star.policy.batch_queue)
kept for many workers at once. Sizes only: where a batch sits in the round costs no time."""

from __future__ import annotations

import numpy as np

from star.policy.batch_queue import PendingBatch, batch_for_iteration, queue_batch


class PendingBatches:
    def __init__(self) -> None:
        self.queues: dict[int, list[PendingBatch]] = {}  # only workers with something pending: most have nothing

    def direct(self, worker: int, size: int, from_iteration: int, at_once: bool, in_force: int) -> None:
        """A batch directive for `worker`, as its daemon queues it (queue_batch)."""
        self._set(worker, queue_batch(self.queues.get(worker, []), PendingBatch(size, None, from_iteration, at_once),
                                      (in_force, None)))

    def take_due(self, workers: np.ndarray, iterations: np.ndarray, batch: np.ndarray, placed: np.ndarray) -> None:
        """`batch` (samples) and `placed` (the sizes of their places in the round), updated in place, for `workers`
        starting iterations `iterations` (batch_for_iteration)."""
        if not self.queues:
            return
        for index in np.flatnonzero([w in self.queues for w in workers.tolist()]):
            worker = int(workers[index])
            taken = batch_for_iteration(self.queues[worker], int(iterations[index]), (int(placed[worker]), None))
            batch[worker], placed[worker] = taken.size, taken.placed_size
            self._set(worker, taken.pending)

    def cut_now(self, worker: int, in_force: int) -> int | None:
        """The size `worker`'s newest directive cuts it to at once (PendingBatch.shrinks), or None."""
        queue = self.queues.get(worker)
        return queue[-1].size if queue and queue[-1].shrinks(in_force) else None

    def _set(self, worker: int, queue: list[PendingBatch]) -> None:
        if queue:
            self.queues[worker] = queue
        else:
            self.queues.pop(worker, None)
