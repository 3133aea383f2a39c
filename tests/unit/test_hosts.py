"""The coordinator's host book: orders reach the right node once, a move completes when the target
reports the shard at a new address, the old PS is stopped after the grace, a stuck move fails."""

from __future__ import annotations

from star.hosts import HostBook, MoveState
from star.placement import PlacementConfig
from star.resources import HostSample


def sample(host: str, cpu: float = 10.0) -> HostSample:
    return HostSample(host, 0.0, 2.0, 4, cpu, 5.0, 10.0, 1, (), None)


def test_a_move_is_ordered_to_the_target_node_once_and_completes_when_it_reports_the_new_address():
    book = HostBook(stop_grace_s=20.0)
    book.report(sample("a"), 0, {0: "a:1"}, 0.0)
    book.report(sample("b"), 1, {}, 0.0)
    assert book.start_move(0, "a:1", "a", "b", "test", 1.0) is None
    assert book.report(sample("a"), 0, {0: "a:1"}, 2.0).start_ps == []  # not for a
    assert book.report(sample("b"), 1, {}, 2.0).start_ps == [(0, "a:1")]
    assert book.report(sample("b"), 1, {}, 4.0).start_ps == []  # delivered once
    assert book.finished(4.0) == []
    book.report(sample("b"), 1, {0: "b:7"}, 6.0)
    [move] = book.finished(6.0)
    assert (move.state, move.new_address, move.finished_s) == (MoveState.DONE, "b:7", 6.0)
    assert book.report(sample("a"), 0, {0: "a:1"}, 10.0).stop_ps == []  # the old PS still redirects
    assert book.report(sample("a"), 0, {0: "a:1"}, 27.0).stop_ps == ["a:1"]
    assert book.report(sample("a"), 0, {}, 30.0).stop_ps == []


def test_a_move_to_an_unknown_host_or_during_another_move_is_refused():
    book = HostBook()
    book.report(sample("a"), 0, {0: "a:1", 1: "a:2"}, 0.0)
    book.report(sample("b"), 1, {}, 0.0)
    assert "no node" in book.start_move(0, "a:1", "a", "zzz", "test", 0.0)
    assert book.start_move(0, "a:1", "a", "b", "test", 0.0) is None
    assert "still moving" in book.start_move(1, "a:2", "a", "b", "test", 0.0)


def test_a_move_within_one_host_completes_on_a_new_address():
    book = HostBook()
    book.report(sample("h"), 0, {0: "h:1"}, 0.0)
    book.start_move(0, "h:1", "h", "h", "test", 0.0)
    book.report(sample("h"), 0, {0: "h:1"}, 2.0)
    assert book.finished(2.0) == []
    book.report(sample("h"), 0, {0: "h:9"}, 4.0)
    assert [m.new_address for m in book.finished(4.0)] == ["h:9"]


def test_a_move_with_no_successor_in_time_fails_and_frees_the_book():
    book = HostBook(move_timeout_s=60.0)
    book.report(sample("a"), 0, {0: "a:1"}, 0.0)
    book.report(sample("b"), 1, {}, 0.0)
    book.start_move(0, "a:1", "a", "b", "test", 0.0)
    [move] = book.finished(61.0)
    assert move.state is MoveState.FAILED and book.in_flight() is None


def test_only_fresh_samples_feed_decisions():
    book = HostBook(stale_after_s=15.0)
    book.report(sample("a", cpu=50.0), 0, {}, 0.0)
    book.report(sample("b"), 1, {}, 10.0)
    assert set(book.states(12.0, PlacementConfig())) == {"a", "b"}
    assert set(book.states(20.0, PlacementConfig())) == {"b"}
    assert book.states(12.0, PlacementConfig())["a"].cpu_util == 0.5
