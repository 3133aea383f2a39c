"""The coordinator's view of its parameter servers: down, restored (with updates lost), behind on the plan."""

from __future__ import annotations

from dataclasses import dataclass

from star.ps_watch import PsWatch


@dataclass
class Stats:
    version: int
    plan_epoch: int
    restores: int = 0
    lost: int = 0

    @property
    def counters(self):
        return {"restores": self.restores, "updates_lost_in_restart": self.lost}


class Down(Exception):
    def code(self):
        return "UNAVAILABLE"


def test_a_restored_ps_is_reported_with_the_updates_its_checkpoint_lacked():
    watch = PsWatch()
    watch.observe([Stats(40, 2), Stats(40, 2)], 2)
    events, resend = watch.observe([Stats(52, 2), Down()], 2)
    assert [e["kind"] for e in events] == ["ps_unreachable"] and resend == set()
    events, resend = watch.observe([Stats(55, 2), Stats(30, 1, restores=1, lost=10)], 2)
    kinds = [e["kind"] for e in events]
    assert kinds == ["ps_reachable", "ps_restored"]
    restored = events[1]
    assert restored["ps"] == 1 and restored["version_before"] == 40 and restored["updates_lost"] == 10
    assert resend == {1} and watch.updates_lost == 10
    events, _ = watch.observe([Stats(56, 2), Stats(31, 2, restores=2, lost=13)], 2)
    assert events[0]["updates_lost"] == 3 and watch.updates_lost == 13


def test_restores_before_the_coordinator_started_are_not_new_events():
    watch = PsWatch()
    assert watch.observe([Stats(100, 4, restores=2, lost=7)], 4) == ([], set())
    assert watch.updates_lost == 0


def test_a_ps_that_stays_down_is_reported_once():
    watch = PsWatch()
    assert len(watch.observe([Down()], 1)[0]) == 1
    assert watch.observe([Down()], 1)[0] == []


def test_healthy_ps_on_the_current_plan_needs_nothing():
    watch = PsWatch()
    for version in (1, 5, 9):
        assert watch.observe([Stats(version, 3)], 3) == ([], set())


def test_restart_budget_covers_workers_and_ps_but_not_children_without_restart_args():
    from star.launch import should_restart
    from star.processes import Child

    worker = Child("worker0", process=None, log_path=None, restart_args=["worker"], restarts=2)
    assert should_restart(worker, 3) and not should_restart(worker, 2)
    coordinator = Child("coordinator", process=None, log_path=None)
    assert not should_restart(coordinator, 10)
