"""One real job with a straggler, observed every way at once: /metrics scraped while it runs
(names, labels, counters that only grow), TensorBoard files read back, the straggler summary's
waiting checked against the workers' own clocks, `star report` on the recorded run; a
metrics port in use refused before anything starts; the own-model example (a Dataset task)
trained to its target."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from star.config import from_dict, JobConfig
from star.launch import launch
from star.metrics import METRICS_FILE

pytestmark = pytest.mark.integration

WORKERS, PS = 4, 2


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


class Scraper(threading.Thread):
    """Scrapes the coordinator and PS 0 twice, a few seconds apart, once every worker has reported and
    the first evaluation is in."""

    def __init__(self, out: Path):
        super().__init__(daemon=True)
        self.out, self.scrapes, self.error, self.urls = out, [], None, {}
        self.done = threading.Event()  # set when the job is over

    def run(self) -> None:
        try:
            while not (self.out / METRICS_FILE).exists() and not self.done.wait(0.2):
                pass
            self.urls = json.loads((self.out / METRICS_FILE).read_text())
            while len(self.scrapes) < 2 and not self.done.is_set():
                job = _scrape(self.urls["coordinator"])
                reported = all(f'star_worker_iterations_total{{worker="{w}"}}' in job for w in range(WORKERS))
                if reported and 'star_job_metric{metric="accuracy"}' in job:  # every worker reported, one evaluation done
                    self.scrapes.append((job, _scrape(self.urls["ps"][0])))
                    self.done.wait(3.0)
                else:
                    self.done.wait(0.3)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_a_straggled_run_is_visible_in_metrics_tensorboard_the_straggler_summary_and_its_report(tmp_path):
    trace = tmp_path / "trace.csv"
    # Run worker i replays trace worker i: worker 3 three times slower from iteration 3 on (the last row
    # keeps the trace from wrapping around), the others never.
    trace.write_text("iteration,worker,factor\n" + "".join(f"0,{w},1\n" for w in range(WORKERS)) + "3,3,3\n100000,3,3\n")
    out = tmp_path / "run"
    config = from_dict(JobConfig, {"task": "digits", "workers": WORKERS, "ps": PS, "out": str(out), "max_time_s": 20.0,
                                   "target": 0.85, "metrics_port": 0, "plan": {"mode": "amp"}, "trace": {"path": str(trace)}})
    scraper = Scraper(out)
    scraper.start()
    try:
        result = launch(config)
    finally:
        scraper.done.set()
        scraper.join(timeout=30)
    assert scraper.error is None, scraper.error
    assert len(scraper.scrapes) == 2, "the run ended before /metrics was scraped twice"

    # /metrics: every metric, with worker / ps labels; counters never go down.
    (job1, ps1), (job2, ps2) = scraper.scrapes
    for w in range(WORKERS):
        for name in ("compute_seconds", "push_seconds", "pull_wait_seconds", "straggler", "amp", "batch_size",
                     "iterations_total", "flagged_slow_seconds_total"):
            assert f'star_worker_{name}{{worker="{w}"}}' in job2, (name, w)
        assert job2[f'star_worker_iterations_total{{worker="{w}"}}'] >= job1[f'star_worker_iterations_total{{worker="{w}"}}']
    assert job2['star_job_mode{mode="ssgd"}'] == 1.0
    assert 'star_job_metric{metric="accuracy"}' in job2 and "star_job_seconds_since_last_update" in job2
    for name in ("updates_total", "gradients_applied_total", "received_bytes_total", "pushes_total"):
        key = f'star_ps_{name}{{ps="0"}}'
        assert ps2[key] >= ps1[key] > 0, name
    # Bytes streamed over gRPC only: on one host the workers and the evaluator read the pull board instead.
    assert ps2['star_ps_sent_bytes_total{ps="0"}'] >= ps1['star_ps_sent_bytes_total{ps="0"}'] >= 0
    assert ps2['star_ps_plan_epoch{ps="0"}'] >= 1
    assert len(scraper.urls["ps"]) == PS and all(url.endswith("/metrics") for url in scraper.urls["ps"])

    # Straggler summary: the seconds others waited on each worker, by the PSs' clocks, add up to the
    # waiting the workers measured on their own clocks (within 10%).
    summary = result["straggler_summary"]
    assert set(summary) == {str(w) for w in range(WORKERS)}
    by_ps = sum(s["others_waited_s"] for s in summary.values())
    by_workers = sum(s["waited_s"] for s in summary.values())
    assert by_workers > 2.0, summary
    assert abs(by_ps - by_workers) <= 0.1 * by_workers, (by_ps, by_workers)
    assert summary["3"]["others_waited_s"] == max(s["others_waited_s"] for s in summary.values())
    assert {"flagged_slow_s", "amp_decisions", "batch_decisions"} <= set(summary["3"])  # filled from events: unit-tested

    # TensorBoard: the event files load with TensorBoard's own reader.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"metric/accuracy", "decisions/mode", "decisions/excluded_workers", "train/loss_worker0"} <= tags
    assert {f"iteration_s/worker{w}" for w in range(WORKERS)} <= tags
    assert [s.step for s in events.Scalars("metric/accuracy")] == sorted(s.step for s in events.Scalars("metric/accuracy"))

    # star report on the recorded run.
    report = subprocess.run([sys.executable, "-m", "star.cli", "report", str(out)], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert (out / "report.png").stat().st_size > 10_000
    assert "| 3 |" in (out / "report.md").read_text()


def test_launch_refuses_a_metrics_port_in_use_naming_the_field(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        run = subprocess.run([sys.executable, "-m", "star.cli", "launch", "--workers", "1", "--ps", "1", "--metrics-port", str(port),
                              "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert f"metrics_port={port}" in run.stderr and "already in use" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "logs" / "coordinator.log").exists()  # refused before anything started


def test_the_own_model_example_trains_to_its_target_with_its_data_served_through_a_dataloader(tmp_path, monkeypatch):
    example = Path(__file__).resolve().parents[2] / "examples" / "own_model"
    monkeypatch.setenv("PYTHONPATH", str(example))  # the user's module, importable by every process
    monkeypatch.syspath_prepend(str(example))
    out = tmp_path / "own"
    config = from_dict(JobConfig, {"task": "own_task:build_task", "workers": 2, "ps": 1, "out": str(out),
                                   "max_time_s": 60.0, "tensorboard": False})
    result = launch(config)
    assert result["reached"], result
    assert result["target"] == 0.85  # the example's documented default target
    assert "data=DatasetStream" in (out / "logs" / "worker0.log").read_text()
    assert not (out / "tensorboard").exists()
