"""The coordinator's decision clock (star.decision_clock): timed decisions, early ones woken by a report,
and stopping. The waits here are short and no assertion depends on how long anything took."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from star.coordinator import CoordinatorConfig, CoordinatorService
from star.decision_clock import DecisionClock
from star.events import EventLog
from star.plan import ssgd
from star.policy.controller import ControlConfig
from star.rpc import star_pb2 as pb


def test_the_clock_returns_no_workers_at_the_period_end():
    clock = DecisionClock(period_s=0.01)
    assert clock.wait(threading.Event()) == ()


def test_a_wake_returns_the_waking_worker_long_before_the_period_end_and_disarms_the_watch():
    clock = DecisionClock(period_s=600.0)  # were the wake missed, wait() would return () after 10 minutes, not (3,)
    clock.arm({3: 0.002, 1: 0.002}, np.zeros(4, dtype=np.int64))
    threading.Timer(0.05, clock.wake, args=(3,)).start()
    assert clock.wait(threading.Event()) == (3,)
    assert clock.watch.get(3) is None and clock.watch == {}


def test_wakes_before_the_wait_are_not_lost():
    clock = DecisionClock(period_s=600.0)
    clock.wake(1)
    clock.wake(2)
    assert clock.wait(threading.Event()) == (1, 2)


def test_a_stopped_clock_returns_none():
    stop = threading.Event()
    stop.set()
    assert DecisionClock(period_s=600.0).wait(stop) is None


class _Context:
    def abort(self, code, details):
        raise AssertionError(f"report refused: {details}")


def _report(worker: int, iteration: int, per_sample_s: float) -> pb.IterationReport:
    return pb.IterationReport(worker_id=worker, iteration=iteration, compute_s=per_sample_s * 32, push_s=0.001,
                              batch_size=32)


@pytest.mark.parametrize("newest_ms, woken", [(3.0, (1,)), (1.1, ())])
def test_a_report_over_its_worker_s_threshold_wakes_the_coordinator_s_clock(tmp_path, newest_ms, woken):
    config = CoordinatorConfig(workers=3, control=ControlConfig(decision_period_s=0.01))
    service = CoordinatorService(config, EventLog(tmp_path / "events.jsonl"))
    service.Report(_report(1, 1, 0.001), _Context())
    service.clock.arm({1: 0.0019}, service.cluster.report_counts())
    service.Report(_report(1, 2, newest_ms * 1e-3), _Context())  # newest two: 1 and `newest_ms` ms
    assert service.clock.wait(threading.Event()) == woken
    assert service.clock.watch == ({} if woken else {1: 0.0019})  # a wake disarms the watch


def test_a_woken_decision_s_ticket_is_served_by_the_decision_after_one_already_under_way():
    clock = DecisionClock(period_s=0.01)
    stop = threading.Event()
    assert clock.wait(stop) == ()  # a timed decision starts...
    ticket = clock.wake(2)  # ...and a report wakes another while it runs
    clock.decided()  # the timed one ends: made without that report
    assert not clock.wait_decided(ticket, timeout_s=0.01)
    assert clock.wait(stop) == (2,)
    clock.decided()
    assert clock.wait_decided(ticket, timeout_s=0.0)


def test_the_report_that_wakes_a_decision_is_answered_with_its_directives(tmp_path):
    """The slowed worker reads the reply before its next iteration: it must carry the cut made for it."""
    config = CoordinatorConfig(workers=3, control=ControlConfig(decision_period_s=600.0))
    service = CoordinatorService(config, EventLog(tmp_path / "events.jsonl"))
    service.Report(_report(1, 1, 0.001), _Context())
    service.clock.arm({1: 0.0019}, service.cluster.report_counts())

    def control_thread():  # what run_control does with a woken decision: directives in place, then decided()
        if service.clock.wait(threading.Event()) == (1,):
            with service.lock:
                service.directives[1] = pb.Directives(batch_size=11)
            service.clock.decided()

    thread = threading.Thread(target=control_thread)
    thread.start()
    try:
        reply = service.Report(_report(1, 2, 0.003), _Context())
    finally:
        thread.join(timeout=5)
    assert reply.batch_size == 11
    assert service.Report(_report(1, 3, 0.003), _Context()).batch_size == 11  # a report that wakes nothing: as before


def test_only_the_worker_whose_report_woke_the_decision_is_told_to_cut_at_once(tmp_path):
    from star.control_loop import Actions, Directives
    from star.coordinator import Coordinator

    coordinator = Coordinator(CoordinatorConfig(workers=3, out=str(tmp_path), ps_addresses=("127.0.0.1:1",)))  # never dialled
    try:
        sizes = {0: 40, 1: 11, 2: 45}
        coordinator._perform(Actions(directives=Directives(batch_sizes=sizes, batch_offsets={0: 0, 1: 40, 2: 51})), woken_by=(1,))
        told = {w: d.cut_at_once for w, d in coordinator.service.directives.items()}
        assert told == {0: False, 1: True, 2: False}
        coordinator._perform(Actions(directives=Directives(batch_sizes={1: 30, 0: 30, 2: 36})))  # a timed decision
        assert not any(d.cut_at_once for d in coordinator.service.directives.values())
    finally:
        coordinator.ps.close()


def test_a_straggler_s_pending_cut_is_not_postponed_by_the_next_decision(tmp_path):
    """Sizes re-decided before the straggler reached the iteration its cut starts at keep that iteration for it
    (star.policy.batch.directed_from_iteration); a worker that reached it takes the next decision a report later."""
    from star.control_loop import Actions, Directives
    from star.coordinator import Coordinator

    coordinator = Coordinator(CoordinatorConfig(workers=2, out=str(tmp_path), ps_addresses=("127.0.0.1:1",)))  # never dialled
    service = coordinator.service
    try:
        for worker, iteration in ((0, 4), (1, 3)):  # worker 1 is a round behind
            service.Report(_report(worker, iteration, 0.001), _Context())
        coordinator._perform(Actions(directives=Directives(batch_sizes={0: 44, 1: 20}, batch_offsets={0: 0, 1: 44})))
        assert [service.directives[w].batch_from_iteration for w in (0, 1)] == [5, 5]
        service.Report(_report(0, 5, 0.001), _Context())  # worker 0 reached 5; worker 1 has not
        coordinator._perform(Actions(directives=Directives(batch_sizes={0: 45, 1: 19}, batch_offsets={0: 0, 1: 45})))
        assert [service.directives[w].batch_from_iteration for w in (0, 1)] == [6, 5]
        assert service.directives[1].batch_size == 19
    finally:
        coordinator.ps.close()


@pytest.mark.parametrize("last_worker, woken", [(2, (2,)), (1, ())])
def test_the_report_that_leaves_no_worker_unsized_wakes_the_clock(tmp_path, last_worker, woken):
    """The sizing watch (star.control_loop.ControlLoop.sizing_watch): at the start, the slowest worker is the last
    to have min_reports reports; its report wakes the decision that sizes it. A report from a worker that
    was sized already, or one that leaves another still unsized, wakes nothing."""
    config = CoordinatorConfig(workers=3, control=ControlConfig(decision_period_s=600.0, min_reports=2))
    service = CoordinatorService(config, EventLog(tmp_path / "events.jsonl"))
    service.plan = ssgd(range(3), epoch=1)
    for worker in (0, 1):
        service.Report(_report(worker, 1, 0.001), _Context())
        service.Report(_report(worker, 2, 0.001), _Context())
    service.Report(_report(2, 1, 0.003), _Context())
    unsized = service.cluster.unsized(service.plan.workers, service.amp_state(), 2)
    assert unsized == [2]
    service.clock.arm({}, service.cluster.report_counts(), unsized, 2)
    service.Report(_report(last_worker, 3 if last_worker != 2 else 2, 0.003), _Context())
    stop = threading.Event()
    if not woken:
        threading.Timer(0.2, stop.set).start()  # a missed wake would return () only after 10 minutes
    assert service.clock.wait(stop) == (woken or None)
    assert service.clock.unsized == (frozenset() if woken else frozenset({2}))  # a wake disarms it


def test_a_woken_decision_neither_asks_the_ps_for_stats_nor_writes_the_state_file_before_its_answer(tmp_path, monkeypatch):
    """The waking report's reply is held for the woken decision (EARLY_REPLY_WAIT_S): a PS stats call made during
    the PSs' update, or a file write, on that path made a straggler's cut miss its next iteration."""
    import star.coordinator as coordinator_module

    coordinator = coordinator_module.Coordinator(CoordinatorConfig(workers=2, out=str(tmp_path), ps_addresses=("127.0.0.1:1",),
                                                                   control=ControlConfig(decision_period_s=600.0)))
    clock, stats_calls, saved_after = coordinator.service.clock, [], []
    monkeypatch.setattr(coordinator, "_watch_ps", lambda: stats_calls.append(1) or [])
    monkeypatch.setattr(coordinator_module, "save_state", lambda *args: saved_after.append(clock._finished))
    thread = threading.Thread(target=coordinator.run_control)
    thread.start()
    try:
        assert clock.wait_decided(clock.wake(0), timeout_s=10)  # the first decision has no PS stats yet: it asks
        assert clock.wait_decided(clock.wake(1), timeout_s=10)
        assert len(stats_calls) == 1  # the second reused the first's
    finally:
        coordinator.stop.set()
        thread.join(timeout=5)
        coordinator.ps.close()
    assert saved_after[:2] == [1, 2]  # each written once its decision was carried out
