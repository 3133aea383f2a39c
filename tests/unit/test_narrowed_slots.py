"""The PS's bfloat16 copies of board slots (star.ps_server.narrowed): one rounding per version, shared by
every remote puller, never kept or vouched for when the slot changed while it was rounded."""

from __future__ import annotations

import torch

from star.ps_server.narrowed import NarrowedSlots


def test_every_puller_of_a_version_gets_one_shared_rounding_equal_to_the_plain_one():
    slots, area = NarrowedSlots(), torch.randn(1000)
    first = slots.copy_of(0, 7, area, lambda: True)
    again = slots.copy_of(0, 7, area, lambda: True)
    assert again is first and slots.rounded == 1
    assert torch.equal(first, area.to(torch.bfloat16))  # round to nearest even, as the per-pull rounding was
    assert slots.holds(0, 7)


def test_a_new_version_in_the_slot_is_rounded_again_and_the_old_stamp_no_longer_holds():
    slots, area = NarrowedSlots(), torch.randn(1000)
    slots.copy_of(0, 7, area, lambda: True)
    area.add_(1.0)  # the board rewrote slot 0 under a new stamp
    copy = slots.copy_of(0, 9, area, lambda: True)
    assert slots.rounded == 2 and torch.equal(copy, area.to(torch.bfloat16))
    assert slots.holds(0, 9) and not slots.holds(0, 7)


def test_slots_keep_their_own_copies():
    slots = NarrowedSlots()
    a, b = torch.full((10,), 1.0), torch.full((10,), 2.0)
    copy_a, copy_b = slots.copy_of(0, 1, a, lambda: True), slots.copy_of(1, 2, b, lambda: True)
    assert copy_a is not copy_b and slots.holds(0, 1) and slots.holds(1, 2)
    assert torch.equal(slots.copy_of(0, 1, a, lambda: True), a.to(torch.bfloat16))


def test_a_copy_rounded_while_its_slot_was_rewritten_is_not_kept_nor_vouched_for():
    slots, area = NarrowedSlots(), torch.randn(1000)
    slots.copy_of(0, 7, area, lambda: False)  # the stamp moved during the rounding: a torn copy
    assert not slots.holds(0, 7)  # the sender then sends stamp 0, refused by the worker as a torn read
    slots.copy_of(0, 7, area, lambda: True)
    assert slots.rounded == 2 and slots.holds(0, 7)
