"""The pull board's slot rule (star/ps_server/board.py): a version is never written over a slot that a
worker may still be reading or that a snapshot still serves from."""

from __future__ import annotations

import gc

import torch

from star.ps_server.board import BoardSlots, Placement


def _place(slots: BoardSlots, version: int) -> Placement:
    slot = slots.free_slot()
    assert slot is not None
    placement = Placement(slot, version, version, torch.empty(0))
    slots.place(placement)
    return placement


def test_a_slot_read_by_a_worker_is_not_reused_until_that_worker_calls_again():
    slots = BoardSlots(2)
    first = _place(slots, 1)
    slots.read_by(first.slot, worker=0)
    del first
    gc.collect()
    second = _place(slots, 2)
    assert second.slot == 1  # slot 0 is still being read by worker 0
    slots.read_by(second.slot, worker=1)
    assert slots.free_slot() is None  # every slot taken: the PS writes into the puller's mailbox instead
    slots.release(0)
    assert slots.free_slot() == 0


def test_a_slot_is_kept_while_its_snapshot_lives_and_freed_when_it_is_gone():
    slots = BoardSlots(1)
    placement = _place(slots, 1)
    assert slots.free_slot() is None  # the current version's snapshot still serves from it
    del placement
    gc.collect()
    assert slots.free_slot() == 0


def test_a_synchronous_round_alternates_between_two_slots():
    slots = BoardSlots(3)
    current = _place(slots, 0)
    used = []
    for version in range(1, 7):
        for worker in range(4):
            slots.read_by(current.slot, worker)
        for worker in range(4):
            slots.release(worker)  # each worker's next push
        current = _place(slots, version)  # made while the previous snapshot is still the current one
        used.append(current.slot)
    assert set(used) == {0, 1}
