"""A worker's directed batches that are not in force yet, and the batch each new iteration runs with.

One rule for the worker daemon (star.worker.worker) and the simulator (star.sim.engine), so that both switch
sizes at the same iterations. Pure: no clocks, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PendingBatch:
    """A batch the coordinator directed, not yet in force: every worker switches at the same
    iteration, so that the new batches tile one round's global batch together."""

    size: int
    offset: int | None  # position in each round's global batch (None: the next batch of its own shard)
    from_iteration: int  # the first iteration computed with it; a directive that arrives later applies at once
    at_once: bool = False  # a cut that starts at once (Directives.cut_at_once)

    def due(self, iteration: int) -> bool:
        return iteration >= self.from_iteration

    def shrinks(self, size: int) -> bool:
        """A cut from `size` marked to start at once: before it is due, as the first samples of the batch it replaces.
        That round then has fewer samples (none twice), and a straggler whose batch was cut does not run one more
        iteration at its old size while the others wait (the reply to its report carried the cut; star.decision_clock).
        Other cuts wait for the common iteration: each would cost a round some samples."""
        return self.at_once and self.size < size


def queue_batch(pending: list[PendingBatch], directed: PendingBatch, in_force: tuple[int, int | None]) -> list[PendingBatch]:
    """The pending batches once `directed` arrives: it joins those due before it. A newer directive replaces only the
    pending ones due at or after its own iteration: one due earlier still places this worker's batch in the rounds
    up to it. (A straggler cut twice in a row used to lose its first placement when the second directive came before
    the iteration the others switched at: in that round it took the next samples of its own shard while the others
    already tiled the round with its first placement, so the round left some samples out and took some of the
    round before.) `in_force`: the (size, offset) of the worker's place in the round now (not a cut's size); a directive
    that changes nothing is dropped. A directive that replaces a cut at once and still cuts is started at once too: every
    decision re-sends every worker's size, marked at once only for the workers whose reports woke it, and the straggler
    would otherwise go back to its whole place until the common iteration."""
    kept = [p for p in pending if p.from_iteration < directed.from_iteration]
    before = (kept[-1].size, kept[-1].offset) if kept else in_force
    replaced = pending[len(kept):]
    if any(p.at_once for p in replaced) and not directed.at_once and directed.size < before[0]:
        directed = replace(directed, at_once=True)  # a cut already running at once keeps running: see the docstring
    return kept + ([directed] if (directed.size, directed.offset) != before else [])


@dataclass(frozen=True)
class IterationBatch:
    """The batch one iteration runs with, and what stays pending after it started."""

    size: int
    offset: int | None
    pending: list[PendingBatch]
    placed_size: int  # the size in force at `offset` before a cut: what that placement was directed with
    cut: bool  # `size` is the newest directive's cut at once, ahead of its iteration (PendingBatch.shrinks)


def batch_for_iteration(pending: list[PendingBatch], iteration: int, in_force: tuple[int, int | None]) -> IterationBatch:
    """Switch to the latest pending batch that is due at `iteration`; then start the newest directive's cut at once if
    it is marked so, at the place in force (the offset moves only when that directive is due)."""
    due = [p for p in pending if p.due(iteration)]
    remaining = [p for p in pending if not p.due(iteration)]
    size, offset = (due[-1].size, due[-1].offset) if due else in_force
    if remaining and remaining[-1].shrinks(size):
        return IterationBatch(remaining[-1].size, offset, remaining, size, cut=True)
    return IterationBatch(size, offset, remaining, size, cut=False)
