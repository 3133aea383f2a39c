"""The coordinator's view of the workers: bad reports are counted and ignored, never fatal."""

from __future__ import annotations

import pytest

from star.cluster import ClusterView
from star.rpc import star_pb2 as pb


def _report(worker=0, iteration=1, compute=0.05, push=0.002, pull=0.01, batch=32, amp=False):
    return pb.IterationReport(worker_id=worker, iteration=iteration, compute_s=compute, push_s=push, pull_s=pull, batch_size=batch, amp=amp)


@pytest.mark.parametrize(
    "bad, reason",
    [
        (_report(worker=9), "unknown_worker"),
        (_report(iteration=1), "out_of_order"),
        (_report(iteration=0), "out_of_order"),
        (_report(iteration=5, compute=-1.0), "negative_time"),
        (_report(iteration=5, pull=1e9), "absurd_time"),
        (_report(iteration=5, push=float("nan")), "absurd_time"),
    ],
)
def test_bad_reports_are_counted_and_ignored(bad, reason):
    view = ClusterView(num_workers=4, window=10)
    assert view.accept(_report(iteration=1), now_s=1.0)
    assert not view.accept(bad, now_s=2.0)
    assert view.ignored == {reason: 1}
    assert [r.iteration for r in view.reports[0]] == [1]


def test_summaries_use_reports_under_the_current_amp_setting_per_sample():
    view = ClusterView(num_workers=2, window=20)
    for i in range(1, 6):
        view.accept(_report(iteration=i, compute=0.064, batch=32, amp=False), now_s=float(i))
    for i in range(6, 9):
        view.accept(_report(iteration=i, compute=0.016, batch=16, amp=True), now_s=float(i))
    off = view.summaries(now_s=10.0, amp_state={0: False})[0]
    on = view.summaries(now_s=10.0, amp_state={0: True})[0]
    assert off.per_sample_s == pytest.approx(0.002) and off.reports == 4 and off.amp_reports == 0  # the window is the latest 4
    assert on.per_sample_s == pytest.approx(0.001) and on.reports == 3 and on.amp_reports == 3 and on.batch_size == 16
    assert on.silent_s == pytest.approx(2.0)


def test_a_heartbeat_keeps_a_blocked_worker_from_looking_silent_without_adding_timings():
    view = ClusterView(num_workers=2, window=8)
    view.accept(_report(worker=0, iteration=1), now_s=0.0)
    assert not view.accept(pb.IterationReport(worker_id=0, iteration=1, heartbeat=True), now_s=9.0)
    summary = view.summaries(now_s=10.0, amp_state={})[0]
    assert summary.silent_s == pytest.approx(1.0) and summary.reports == 1


def test_a_restarted_worker_starts_a_fresh_history():
    view = ClusterView(num_workers=1, window=8)
    for iteration in (1, 2, 3):
        view.accept(_report(iteration=iteration), now_s=float(iteration))
    view.forget(0)
    assert view.accept(_report(iteration=1), now_s=5.0)  # not "out of order" any more
    assert view.summaries(now_s=5.0, amp_state={})[0].reports == 1


class _Context:
    def abort(self, code, details):
        raise AssertionError(f"refused: {details}")


def test_an_operator_switching_amp_off_leaves_the_reports_from_before_it_went_on_out(tmp_path):
    from star.coordinator import CoordinatorConfig, CoordinatorService
    from star.events import EventLog

    service = CoordinatorService(CoordinatorConfig(workers=2), EventLog(tmp_path / "events.jsonl"))
    for i in (1, 2, 3):
        service.Report(_report(worker=1, iteration=i, compute=0.3), _Context())
    for on, first in ((True, 4), (False, 7)):
        service.SetDirectives(pb.SetDirectivesRequest(worker_id=1, directives=pb.Directives(amp=on)), _Context())
        for i in range(first, first + 3):
            service.Report(_report(worker=1, iteration=i, compute=0.1, amp=on), _Context())
    summary = service.cluster.summaries(1.0, service.amp_state())[1]
    assert summary.reports == 3 and summary.per_sample_s == pytest.approx(0.1 / 32)  # the slow 0.3 s ones are out


def test_a_rejoining_worker_takes_its_batch_at_once_as_its_place_not_as_a_cut(tmp_path):
    """A restarted worker counts its iterations from 0: the stored directive's iteration (in the old count) would hold
    its place for as long, and a cut at once would run as the head of a place it never had (weighted as that place)."""
    from star.coordinator import CoordinatorConfig, CoordinatorService
    from star.events import EventLog

    service = CoordinatorService(CoordinatorConfig(workers=2), EventLog(tmp_path / "events.jsonl"))
    service.directives[1] = pb.Directives(batch_size=41, batch_offset=64, batch_from_iteration=500, cut_at_once=True)
    reply = service.Join(pb.JoinRequest(worker_id=1, host="h", batch_size=64), _Context())
    assert (reply.directives.batch_size, reply.directives.batch_offset) == (41, 64)
    assert (reply.directives.batch_from_iteration, reply.directives.cut_at_once) == (0, False)
    assert service.directives[1].cut_at_once  # the stored directive is unchanged: reports are answered as before
