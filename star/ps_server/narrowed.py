"""Board slots rounded to bfloat16 once per version, for every remote worker that pulls on the bf16 wire.

Why: every worker on another host pulls the same version from the same board slot. Rounding the slot's
float32 parameters to bfloat16 for each of them repeated one full pass over the shard per worker per round
on the PS (4 workers: 4 passes where 1 is enough), on hosts where the PS's CPU is what the round waits on.

Ownership follows the board's own rule (star/ps_server/board.py): a slot is rewritten only after every worker
it was served to has made another call, and a worker on the socket channel makes its next call only after it
has received the whole payload. So when a slot's stamp changes, nobody is still sending from its narrowed
copy, and the copy can be rewritten in place. A copy made while the slot was being rewritten (its stamp
changed during the rounding) is never kept, and `holds` then says so: the caller sends the stamp 0, refused
as a torn read, as it does for a float32 slot rewritten while it was sent.
"""

from __future__ import annotations

import threading
from typing import Callable

import torch


class NarrowedSlots:
    """One bfloat16 copy per board slot, made by the first puller of each version; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held while rounding: a second puller of the version waits for the copy
        self._copies: dict[int, tuple[int, torch.Tensor]] = {}  # slot -> (seq it was rounded from, copy)
        self.rounded = 0  # copies made (a pull served from an existing copy adds nothing)

    def copy_of(self, slot: int, seq: int, area: torch.Tensor, intact: Callable[[], bool]) -> torch.Tensor:
        """The bfloat16 copy of `area` (slot `slot`, stamped `seq`): the one kept, else rounded now and kept
        if the slot still holds `seq` afterwards. Check `holds(slot, seq)` after sending it."""
        with self._lock:
            held = self._copies.pop(slot, None)
            if held is not None and held[0] == seq:
                self._copies[slot] = held
                return held[1]
            copy = held[1] if held is not None and held[1].numel() == area.numel() else torch.empty(
                area.numel(), dtype=torch.bfloat16)
            copy.copy_(area)
            self.rounded += 1
            if intact():
                self._copies[slot] = (seq, copy)
            return copy

    def holds(self, slot: int, seq: int) -> bool:
        """Whether the copy of `seq` in `slot` is kept and was not rewritten: the seqlock's second check for a
        payload sent from it (False for a copy rounded while its slot was rewritten)."""
        with self._lock:
            held = self._copies.get(slot)
            return held is not None and held[0] == seq
