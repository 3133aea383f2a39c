"""Which slot of the pull board a new version may be written to: the pure rule (no memory, no clock).

A slot is free when no worker may still be reading it and no snapshot refers to it. A worker that was
served a slot reads it before its next call, so any Push or Pull from it (`release`) frees what it
held; a snapshot is alive while the PS may still serve it (the current version, or a pull released
earlier and not yet answered), and gRPC pulls build their chunks from its slot, so its slot is kept
until the snapshot is gone (a weak reference: nobody has to remember to let go). When every slot is
taken the PS writes into the puller's own mailbox instead, so the board is never a reason to wait.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch


@dataclass(eq=False)
class Placement:
    """One version written on the board: where, under which stamp, and a view of it."""

    slot: int
    seq: int
    version: int
    tensor: torch.Tensor


class BoardSlots:
    def __init__(self, slots: int):
        self._readers: list[set[int]] = [set() for _ in range(slots)]
        self._placed: list[weakref.ref | None] = [None] * slots

    def free_slot(self) -> int | None:
        for slot, (readers, placed) in enumerate(zip(self._readers, self._placed)):
            if not readers and (placed is None or placed() is None):
                return slot
        return None

    def place(self, placement: Placement) -> None:
        self._placed[placement.slot] = weakref.ref(placement)

    def read_by(self, slot: int, worker: int) -> None:
        self._readers[slot].add(worker)

    def release(self, worker: int) -> None:
        """`worker` made another call: it has finished reading whatever it was served."""
        for readers in self._readers:
            readers.discard(worker)
