"""Wait attribution, the straggler ledger, metric families, the metrics port check, TensorBoard
scalars read back, and `star report` on a small recorded run."""

from __future__ import annotations

import csv
import json
import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from star.aggregate import Apply, Drop, Effects
from star.config import ConfigError
from star.child_configs import ps_metrics_port
from star.metrics import (JobMetrics, PsMetrics, SnapshotCollector, WorkerMetrics, check_metrics_ports, job_families,
                          ps_families, serve_metrics)
from star.observe import ITERATION_COLUMNS, ITERATIONS_FILE
from star.straggler import StragglerLedger, format_summary, mean_over_ps
from star.waits import CAUSED_PREFIX, WAITED_PREFIX, WaitLedger, per_worker_seconds


def _round(ids, version=1, late=False) -> Effects:
    return Effects(applies=[Apply(tuple(ids), 0.25, (0,) * len(ids), version, late)])


def test_a_closed_round_charges_every_other_members_wait_to_the_gradient_that_closed_it():
    ledger = WaitLedger()
    for gid, (worker, t) in enumerate([(0, 1.0), (1, 1.5), (2, 2.0), (3, 4.0)]):
        ledger.arrived(gid, worker, t)
    ledger.settled(_round([0, 1, 2, 3]), closer=3, now_s=4.0)
    assert ledger.caused_s == {3: pytest.approx(3.0 + 2.5 + 2.0)}
    assert ledger.waited_s == {0: pytest.approx(3.0), 1: pytest.approx(2.5), 2: pytest.approx(2.0)}
    counters = ledger.counters()
    assert per_worker_seconds(counters, CAUSED_PREFIX) == {3: 7.5}
    assert per_worker_seconds(counters, WAITED_PREFIX) == {0: 3.0, 1: 2.5, 2: 2.0}


def test_flushed_rounds_late_gradients_and_drops_charge_nobody_and_are_forgotten():
    ledger = WaitLedger()
    for gid in range(4):
        ledger.arrived(gid, gid, 1.0)
    ledger.settled(_round([0, 1]), closer=None, now_s=5.0)  # a plan switch flushed the round
    ledger.settled(_round([2], late=True), closer=2, now_s=5.0)
    ledger.settled(Effects(drops=[Drop(3, "late")]), closer=3, now_s=5.0)
    assert ledger.caused_s == {} and ledger.waited_s == {}
    assert ledger._arrivals == {}


def test_straggler_ledger_counts_flagged_seconds_and_keeps_each_amp_and_batch_decision_once():
    ledger = StragglerLedger()
    for event in [{"t": 2.0, "kind": "straggler_detected", "worker": 3},
                  {"t": 2.5, "kind": "amp", "worker": 3, "amp": True, "reason": "straggler"},
                  {"t": 3.0, "kind": "batch_sizes", "sizes": {"0": 40, "3": 24}},
                  {"t": 4.0, "kind": "batch_sizes", "sizes": {"0": 40, "3": 20}},
                  {"t": 6.0, "kind": "straggler_recovered", "worker": 3},
                  {"t": 6.5, "kind": "amp", "worker": 3, "amp": False, "reason": "recovered"},
                  {"t": 8.0, "kind": "straggler_detected", "worker": 3}]:
        ledger.on_event(event)
    ledger.on_report(0, 1, 0.1, 0.01, 9.0)  # the first pull waits for the job to start: not counted
    ledger.on_report(0, 2, 0.1, 0.01, 0.51)
    summary = ledger.summary(now_t=9.0, caused_s={3: 12.5})
    assert summary["3"]["flagged_slow_s"] == pytest.approx(4.0 + 1.0)
    assert ledger.flagged(3) and not ledger.flagged(0)
    assert [d["amp"] for d in summary["3"]["amp_decisions"]] == [True, False]
    assert [d["batch_size"] for d in summary["3"]["batch_decisions"]] == [24, 20]
    assert [d["batch_size"] for d in summary["0"]["batch_decisions"]] == [40]
    assert summary["3"]["others_waited_s"] == 12.5
    assert summary["0"]["waited_s"] == pytest.approx(0.5)
    assert "flagged slow" in format_summary(summary)


def test_a_workers_wait_charged_by_several_ps_is_their_mean():
    assert mean_over_ps([{3: 4.0}, {3: 2.0, 1: 1.0}]) == {3: 3.0, 1: 0.5}


def _scrape(families_of, snapshot) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snapshot, families_of))
    return generate_latest(registry).decode()


def test_job_metrics_have_the_star_prefix_base_units_and_a_worker_label():
    worker = WorkerMetrics(iterations=7, compute_s=0.3, push_s=0.01, pull_wait_s=0.6, batch_size=32, amp=True,
                           straggler=True, flagged_slow_s=4.0)
    text = _scrape(job_families, JobMetrics({3: worker}, "kofn", 2, "accuracy", 0.9, 40, 1.5, 30.0, False))
    for line in ('star_worker_compute_seconds{worker="3"} 0.3', 'star_worker_pull_wait_seconds{worker="3"} 0.6',
                 'star_worker_straggler{worker="3"} 1.0', 'star_worker_amp{worker="3"} 1.0',
                 'star_worker_batch_size{worker="3"} 32.0', 'star_worker_iterations_total{worker="3"} 7.0',
                 'star_job_mode{mode="kofn"} 1.0', 'star_job_metric{metric="accuracy"} 0.9',
                 "star_job_seconds_since_last_update 1.5", "star_job_plan_epoch 2.0"):
        assert line in text, line
    assert all(name.startswith("star_") for name in _names(text))


def test_ps_metrics_have_a_ps_label_and_drops_by_reason():
    ps = PsMetrics(ps=1, version=9, plan_epoch=3, accepted=40, applied=36, dropped={"late": 4}, rejected={"stale_epoch": 2},
                   received_bytes=1000, sent_bytes=2000, pushes=40, waiting_pulls=3, wait_caused_s={2: 1.25})
    text = _scrape(ps_families, ps)
    for line in ('star_ps_updates_total{ps="1"} 9.0', 'star_ps_gradients_dropped_total{ps="1",reason="late"} 4.0',
                 'star_ps_received_bytes_total{ps="1"} 1000.0', 'star_ps_sent_bytes_total{ps="1"} 2000.0',
                 'star_ps_plan_epoch{ps="1"} 3.0', 'star_ps_wait_caused_seconds_total{ps="1",worker="2"} 1.25'):
        assert line in text, line


def _names(text: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_a_metrics_port_in_use_is_an_error_naming_the_field():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match="metrics_port") as error:
            serve_metrics(SnapshotCollector(lambda: None, job_families), "127.0.0.1", port)
        assert error.value.field == "metrics_port"
        with pytest.raises(ConfigError, match=f"port {port} .*already in use"):
            check_metrics_ports("127.0.0.1", port, num_ps=2)
        with pytest.raises(ConfigError, match="for ps0"):
            check_metrics_ports("127.0.0.1", port - 1, num_ps=2)
    check_metrics_ports("127.0.0.1", 0, num_ps=2)  # 0: free ports, nothing to check


def test_ps_i_serves_metrics_at_p_plus_one_plus_i_and_port_zero_picks_free_ports():
    assert [ps_metrics_port(9100, i) for i in range(3)] == [9101, 9102, 9103]
    assert ps_metrics_port(0, 5) == 0 and ps_metrics_port(None, 0) is None
    server, port = serve_metrics(SnapshotCollector(lambda: None, job_families), "127.0.0.1", 0)
    try:
        assert port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            assert reply.status == 200
    finally:
        server.shutdown()


def test_tensorboard_scalars_read_back_with_tensorboards_own_reader(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from star.tensorboard_log import MODE_CODES, TensorBoardLog

    log = TensorBoardLog(tmp_path)
    log.metric("accuracy", 0.5, 10)
    log.iteration(3, 4, 0.3, 0.01, 0.2, 1.7)
    log.decision({"kind": "plan", "mode": "exclude", "plan": "exclude epoch=2 groups=[0,1,2;3] quorum=[3,1] late=apply"})
    log.decision({"kind": "amp", "worker": 3, "amp": True})
    log.decision({"kind": "batch_sizes", "sizes": {"3": 20}})
    log.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    scalars = {tag: [(s.step, s.value) for s in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert scalars["metric/accuracy"] == [(10, 0.5)]
    assert scalars["iteration_s/worker3"] == [(4, pytest.approx(0.51))]
    assert scalars["decisions/mode"] == [(10, MODE_CODES["exclude"])]
    assert scalars["decisions/excluded_workers"] == [(10, 1.0)]
    assert scalars["decisions/amp/worker3"] == [(10, 1.0)]
    assert scalars["decisions/batch_size/worker3"] == [(10, 20.0)]


def _recorded_run(path) -> None:
    """A small run directory as star launch leaves it."""
    path.mkdir()
    (path / "result.json").write_text(json.dumps({
        "task": "digits", "mode": "amp", "workers": 2, "ps": 1, "metric": "accuracy", "target": 0.9, "reached": True,
        "tta_s": 3.0, "final_metric": 0.91, "updates": 30, "train_s": 3.0,
        "straggler_summary": {"1": {"flagged_slow_s": 2.0, "detections": 1, "others_waited_s": 1.5, "waited_s": 0.1,
                                    "iterations": 30, "compute_s": 3.0, "batch_decisions": [],
                                    "amp_decisions": [{"t": 2.0, "amp": True, "reason": "straggler"}]}}}))
    with open(path / "curve.csv", "w") as handle:
        handle.write("time_s,version,metric\n" + "".join(f"{i * 0.5},{i * 5},{0.1 + i * 0.13}\n" for i in range(7)))
    with open(path / ITERATIONS_FILE, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(ITERATION_COLUMNS)
        for i in range(30):
            for worker in (0, 1):
                slow = 3.0 if worker == 1 and 10 <= i < 20 else 1.0
                writer.writerow((1.0 + i * 0.1, worker, i + 1, 0.05 * slow, 0.005, 0.01, 32, 0, slow))
    events = [{"t": 0.0, "kind": "plan", "mode": "ssgd"}, {"t": 1.0, "kind": "training_started"},
              {"t": 2.0, "kind": "straggler_detected", "worker": 1}, {"t": 2.1, "kind": "amp", "worker": 1, "amp": True},
              {"t": 3.0, "kind": "straggler_recovered", "worker": 1}, {"t": 3.2, "kind": "plan", "mode": "kofn"}]
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_star_report_writes_a_png_and_a_page_for_one_run_and_an_overlay_for_several(tmp_path):
    from star.cli import main

    _recorded_run(tmp_path / "a")
    _recorded_run(tmp_path / "b")
    assert main(["report", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "report.png").stat().st_size > 10_000
    page = (tmp_path / "a" / "report.md").read_text()
    assert "| 1 | 2.0 | 1.5 |" in page and "straggler_detected" in page
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert (tmp_path / "report.png").stat().st_size > 10_000
    assert str(tmp_path / "b") in (tmp_path / "report.md").read_text()


def test_star_report_reads_an_event_log_whose_last_line_a_killed_process_left_half_written(tmp_path):
    from star.report import load_run

    _recorded_run(tmp_path / "a")
    with open(tmp_path / "a" / "events.jsonl", "a") as handle:
        handle.write('{"t": 3.5, "kind": "amp", "wor')
    assert [e["kind"] for e in load_run(tmp_path / "a").events][-1] == "plan"


def test_star_report_on_a_directory_without_a_result_fails_naming_it(tmp_path, capsys):
    from star.cli import main

    assert main(["report", str(tmp_path)]) == 2
    assert "run_dir" in capsys.readouterr().err


def test_the_report_heatmap_shows_the_slow_worker_in_its_slow_time_bins():
    from star.report import heatmap, intervals

    rows = [{"t": float(i), "worker": float(w), "compute_s": 0.3 if (w == 1 and i >= 5) else 0.1, "push_s": 0.0}
            for i in range(10) for w in (0, 1)]
    grid, edges, workers = heatmap(rows, bins=10)
    assert workers == [0, 1]
    assert grid[1, -1] == pytest.approx(0.3) and grid[0, -1] == pytest.approx(0.1) and grid[1, 1] == pytest.approx(0.1)
    spans = intervals([{"t": 1.0, "kind": "straggler_detected", "worker": 1}], "straggler_detected", "straggler_recovered", 9.0)
    assert spans == {1: [(1.0, 9.0)]}
