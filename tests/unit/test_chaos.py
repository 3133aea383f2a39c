"""The chaos benchmark's kill schedule: N kills in all, one coordinator+PS pair, the same for a seed."""

from __future__ import annotations

from benchmarks.chaos import chaos_schedule


def test_the_schedule_kills_n_processes_with_the_coordinator_and_a_ps_together_once():
    schedule = chaos_schedule(10, ("worker", "ps", "coordinator"), seed=3)
    assert sum(len(step) for step in schedule) == 10
    assert schedule.count(("coordinator", "ps")) == 1
    assert all(len(step) == 1 for step in schedule if step != ("coordinator", "ps"))


def test_the_schedule_is_the_same_for_a_seed_and_uses_only_the_given_roles():
    assert chaos_schedule(8, ("worker", "ps"), seed=1) == chaos_schedule(8, ("worker", "ps"), seed=1)
    assert {role for step in chaos_schedule(8, ("worker",), seed=1) for role in step} == {"worker"}
    assert ("coordinator", "ps") not in chaos_schedule(8, ("worker", "ps"), seed=1)
