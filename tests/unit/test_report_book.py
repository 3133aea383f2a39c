"""The report book: the one rule that turns workers' iteration reports into the summaries the
Controller reads, run by the coordinator's ClusterView and by the simulator."""

from __future__ import annotations

import statistics
from collections import deque

import numpy as np
import pytest

from star.cluster import ClusterView
from star.coordinator import CoordinatorConfig
from star.report_book import KEEP, SIZING_WINDOW, WINDOW, ReportBook
from star.rpc import star_pb2 as pb


def plain_summary(history: deque, amp_on: bool, window: int = WINDOW):
    """The rule written plainly: the latest `window` reports under the current AMP setting among
    the kept ones; (per-sample median, 2 x push median, latest batch, reports, sizing median, its relative
    error)."""
    recent = [r for r in history if r["amp"] == amp_on and r["batch"] > 0][-window:]
    if not recent:
        return (1.0, 0.0, 1, 0, 1.0, 0.0)
    per_sample = [r["compute"] / r["batch"] for r in recent]
    median = statistics.median(per_sample)
    spread = 1.4826 * statistics.median(abs(x - median) for x in per_sample) / median if len(recent) >= 2 else 0.0
    sizing = per_sample[-SIZING_WINDOW:]
    return (median, 2 * statistics.median(r["push"] for r in recent), recent[-1]["batch"], len(recent),
            statistics.median(sizing), spread / len(sizing) ** 0.5)


def test_the_book_keeps_as_many_reports_as_the_coordinator_does_by_default():
    assert KEEP == CoordinatorConfig.__dataclass_fields__["report_window"].default


@pytest.mark.parametrize("seed", range(4))
def test_the_book_and_the_cluster_view_summarise_like_the_plain_rule(seed):
    """Random reports, AMP toggles (sometimes for long stretches), reports without a batch, heartbeats
    and restarts; asked under each worker's setting and under the one it does not run."""
    rng = np.random.default_rng(seed)
    n = 5
    view, book = ClusterView(n, KEEP), ReportBook(n)
    plain = {w: deque(maxlen=KEEP) for w in range(n)}
    heard: dict[int, float] = {}
    iteration = np.zeros(n, dtype=np.int64)
    amp_now = np.zeros(n, dtype=bool)
    for step in range(600):
        w = int(rng.integers(n))
        t = step * 0.01
        roll = rng.random()
        if roll < 0.05 and plain[w]:  # a heartbeat from a blocked worker
            view.accept(pb.IterationReport(worker_id=w, iteration=int(iteration[w]), heartbeat=True), t)
            book.heard(w, t)
            heard[w] = t
            continue
        if roll < 0.07:  # the worker restarted
            view.forget(w)
            book.forget(w)
            plain[w].clear()
            heard.pop(w, None)
            iteration[w] = 0
            continue
        if rng.random() < 0.08:
            amp_now[w] = not amp_now[w]
        compute, push = float(rng.uniform(0.01, 0.2)), float(rng.uniform(0.001, 0.01))
        batch = 0 if rng.random() < 0.03 else int(rng.integers(8, 128))
        iteration[w] += 1
        view.accept(pb.IterationReport(worker_id=w, iteration=int(iteration[w]), compute_s=compute, push_s=push,
                                       batch_size=batch, amp=bool(amp_now[w])), t)
        if batch:
            book.record(np.array([w]), t, np.array([compute]), push, np.array([batch]), amp_now[[w]])
        else:
            book.record_without_speed(w, t)
        plain[w].append({"compute": compute, "push": push, "batch": batch, "amp": bool(amp_now[w])})
        heard[w] = t
        if step % 7 == 0:
            state = amp_now ^ (rng.random(n) < 0.3)
            from_view = view.summaries(t, {i: bool(state[i]) for i in range(n)})
            from_book = book.summaries(t, state)
            assert set(from_view) == set(from_book) == {i for i in range(n) if plain[i]}
            for i, expected in ((i, plain_summary(plain[i], bool(state[i]))) for i in from_view):
                for got in (from_view[i], from_book[i]):
                    assert (got.batch_size, got.reports) == expected[2:4]
                    assert got.recent_per_sample_s == pytest.approx(expected[4])
                    assert got.sizing_rel_error == pytest.approx(expected[5])
                    assert got.amp_reports == (got.reports if state[i] else 0)
                    assert got.per_sample_s == pytest.approx(expected[0]) and got.comm_s == pytest.approx(expected[1])
                    assert got.silent_s == pytest.approx(t - heard[i])


def test_a_book_refuses_a_window_longer_than_what_it_keeps():
    with pytest.raises(ValueError, match="window"):
        ReportBook(2, window=5, keep=4)


def test_sizing_above_lists_the_workers_whose_newest_reports_median_passes_their_threshold():
    book = ReportBook(3)
    off, on = np.zeros(3, dtype=bool), np.array([False, True, False])
    for compute_s in (0.10, 0.10, 0.10):  # 1 ms per sample at a batch of 100, every worker
        book.record(np.array([0, 1, 2]), 0.0, np.full(3, compute_s), 0.0, np.full(3, 100), off)
    book.record(np.array([0]), 1.0, np.array([0.30]), 0.0, np.array([100]), np.array([False]))  # newest two: 1 and 3 ms, median 2
    book.record(np.array([1]), 1.0, np.array([0.90]), 0.0, np.array([100]), np.array([True]))  # under AMP: its own setting's reports
    thresholds = {0: 0.0019, 1: 0.0019, 2: 0.0019, 7: 0.0}  # worker 7 never reported
    armed = np.array([3, 3, 3, 0, 0, 0, 0, 0])  # the counts before the last reports
    assert book.sizing_above(thresholds, off, armed) == [0]
    assert book.sizing_above(thresholds, on, armed) == [0, 1]  # one report under AMP: its median is that report
    assert book.sizing_above({0: 0.0021}, off, armed) == []  # the median of the newest two must cross, too
    assert book.sizing_above(thresholds, off, book.count.copy()) == []  # no report since the watch was armed
    assert book.sizing_above({}, off, armed) == []


def test_right_after_an_amp_toggle_only_a_new_report_over_the_threshold_crosses_the_watch():
    """A worker that was slow without AMP, then fast on AMP, goes back to no AMP: its off-setting median still
    holds its slow reports from before the switch, but its new report is fast: no crossing."""
    book = ReportBook(1)
    one, off, on = np.array([0]), np.array([False]), np.array([True])
    for compute_s, amp in ((0.3, off), (0.3, off), (0.1, on), (0.1, on)):
        book.record(one, 0.0, np.array([compute_s]), 0.0, np.array([100]), amp)
    armed = book.count.copy()
    book.record(one, 1.0, np.array([0.1]), 0.0, np.array([100]), off)  # newest two off-setting reports: 3 ms, 1 ms
    assert book.summaries(1.0, np.array([False]))[0].sizing_per_sample_s == pytest.approx(0.002)
    assert book.sizing_above({0: 0.0013}, np.array([False]), armed) == []
    summaries = book.summaries(2.0, off)
    assert summaries[0].sizing_per_sample_s == pytest.approx(0.002)  # the same number the controller reads


def test_after_an_amp_switch_a_worker_is_summarised_on_fresh_reports_only():
    """Slow without AMP (why AMP went on), fast on AMP, then AMP off: the reports from before AMP went on
    must not make the recovered worker look slow again."""
    book, one = ReportBook(1), np.array([0])
    for compute_s, amp_on in ((0.3, False),) * 3 + ((0.1, True),) * 3:
        book.record(one, 0.0, np.array([compute_s]), 0.0, np.array([100]), np.array([amp_on]))
    off = np.array([False])
    assert book.summaries(1.0, off)[0].reports == 3  # without the switch: the old slow reports count
    book.amp_switched(0, False)
    assert book.summaries(1.0, off)[0].reports == 0  # the Controller waits for fresh ones
    for _ in range(3):
        book.record(one, 2.0, np.array([0.12]), 0.0, np.array([100]), off)
    summary = book.summaries(2.0, off)[0]
    assert summary.reports == 3 and summary.per_sample_s == pytest.approx(0.0012)
    assert book.summaries(2.0, np.array([True]))[0].reports == 3  # the other setting's reports are untouched


def test_unsized_lists_the_workers_with_too_few_reports_under_their_current_amp_setting():
    """What the sizing watch waits for: the controller judges a worker on min_reports summarised reports (its
    `reports`); a worker that never reported, or whose AMP was just switched, has too few."""
    book, off = ReportBook(4), np.zeros(4, dtype=bool)
    for _ in range(3):
        book.record(np.array([0, 1, 2]), 0.0, np.full(3, 0.1), 0.0, np.full(3, 100), np.zeros(3, dtype=bool))
    assert book.unsized([0, 1, 2, 3, 9], off, 3) == [3]  # 3 never reported; 9 is no worker of this book
    assert book.unsized([0, 1, 2], off, 4) == [0, 1, 2]
    book.amp_switched(1, True)
    on = np.array([False, True, False, False])
    assert book.unsized([0, 1, 2], on, 3) == [1]
    assert [w for w in (0, 1, 2) if book.summaries(1.0, on)[w].reports < 3] == [1]  # the same count the controller reads


def test_a_confirming_worker_s_report_crosses_when_the_median_does_and_it_is_near_the_limit():
    """The real mid3x case (star.report_book.ReportBook.sizing_above): after a cut on half the step, the next report
    reads 12.5 ms against a 12.75 ms limit while the median of the newest two, 13.7 ms, is over it."""
    book, one, off = ReportBook(1), np.array([0]), np.array([False])
    for per_sample_ms in (5.4, 15.0):
        book.record(one, 0.0, np.array([per_sample_ms * 1e-3 * 100]), 0.0, np.array([100]), off)
    armed = book.count.copy()
    book.record(one, 1.0, np.array([12.5e-3 * 39]), 0.0, np.array([39]), off)
    assert book.sizing_above({0: 12.75e-3}, off, armed) == []  # anyone else's report must cross on its own
    assert book.sizing_above({0: 12.75e-3}, off, armed, confirming=frozenset({0})) == [0]
    assert book.sizing_above({0: 14.75e-3}, off, armed, confirming=frozenset({0})) == []  # the median must cross
    book.record(one, 2.0, np.array([5.4e-3 * 39]), 0.0, np.array([39]), off)  # a spike's echo: back to normal
    assert book.sizing_above({0: 12.75e-3}, off, armed, confirming=frozenset({0})) == []
