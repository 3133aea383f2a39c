"""star.ps_server.version_watch: an evaluator's pull held until its version is applied, and never longer than the bound."""

from __future__ import annotations

import asyncio

from star.ps_server import version_watch
from star.ps_server.version_watch import VersionWatch


def test_a_waiting_observer_wakes_when_its_version_is_applied_not_on_an_earlier_one():
    async def scenario():
        watch = VersionWatch()
        waiter = asyncio.ensure_future(watch.wait_for(4, wait_s=30.0))
        await asyncio.sleep(0)
        watch.applied(3)
        await asyncio.sleep(0.01)
        early = waiter.done()
        watch.applied(4)
        await asyncio.wait_for(waiter, 1.0)  # woken by the version, far before its 30 s
        return early, watch.waiting

    assert asyncio.run(scenario()) == (False, 0)


def test_a_version_that_does_not_come_ends_the_wait_at_the_bound(monkeypatch):
    monkeypatch.setattr(version_watch, "MAX_WAIT_S", 0.05)  # the bound wins over a longer wait_s

    async def scenario():
        watch = VersionWatch()
        await asyncio.wait_for(watch.wait_for(10, wait_s=30.0), 5.0)
        watch.applied(10)  # nobody is waiting any more: nothing to wake, nothing raised
        return watch.waiting

    assert asyncio.run(scenario()) == 0


def test_observers_waiting_for_different_versions_each_wake_at_their_own():
    async def scenario():
        watch = VersionWatch()
        first = asyncio.ensure_future(watch.wait_for(2, wait_s=30.0))
        second = asyncio.ensure_future(watch.wait_for(3, wait_s=30.0))
        await asyncio.sleep(0)
        watch.applied(2)
        await asyncio.wait_for(first, 1.0)
        still = not second.done() and watch.waiting == 1
        watch.applied(5)
        await asyncio.wait_for(second, 1.0)
        return still

    assert asyncio.run(scenario())


def test_waits_that_ended_at_the_bound_are_not_kept_while_no_update_comes(monkeypatch):
    monkeypatch.setattr(version_watch, "MAX_WAIT_S", 0.01)

    async def scenario():
        watch = VersionWatch()
        for _ in range(50):  # a stalled job: the evaluator asks again and again, nothing is applied
            await watch.wait_for(7, wait_s=1.0)
        return len(watch._waiting)

    assert asyncio.run(scenario()) <= 1


def test_the_time_a_version_was_applied_is_known_only_for_the_newest_version_applied_here():
    watch = VersionWatch()
    assert watch.applied_at(0) is None  # restored or handed over: this PS did not apply it
    watch.applied(3, at=100.0)
    assert watch.applied_at(3) == 100.0
    watch.applied(4, at=101.5)
    assert (watch.applied_at(3), watch.applied_at(4)) == (None, 101.5)  # 3's parameters are gone from the shard
