"""Faults during a real job: a killed worker or PS, a frozen worker, a stop and resume.

Each test runs a whole `star launch` job (in a thread of this process, so its daemons
are this process's children and are cleaned up by the launcher even when an assertion
fails) and injects the fault from outside, as an operator's `kill` would.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from star.config import ConfigError, JobConfig, from_dict
from star.launch import launch

pytestmark = pytest.mark.integration

TIMEOUT_S = 240.0


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def _curve(out: Path) -> list[tuple[float, int]]:
    """curve.csv's (time_s, version) rows."""
    rows = (out / "curve.csv").read_text().splitlines()[1:]
    return [(float(r.split(",")[0]), int(r.split(",")[1])) for r in rows]


def _child(role: str, index: int) -> psutil.Process:
    """This process's `star <role>` daemon with the given index (python -m star.cli <role> --<role>-index N ...)."""
    flag = "--worker-id" if role == "worker" else "--ps-index"
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        if cmd[3:4] == [role] and flag in cmd and cmd[cmd.index(flag) + 1] == str(index):
            return child
    raise AssertionError(f"no {role} {index} among this process's children")


def _version(out: Path) -> int:
    curve = out / "curve.csv"
    lines = curve.read_text().splitlines() if curve.exists() else []
    return int(lines[-1].split(",")[1]) if len(lines) > 1 else 0


def _wait_version(out: Path, version: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _version(out) < version:
        assert time.monotonic() < deadline, f"training did not reach version {version}"
        time.sleep(0.2)


class Job:
    """A launched job running in a thread."""

    def __init__(self, out: Path, **fields):
        data = {"task": "digits", "workers": 4, "ps": 2, "out": str(out), "max_time_s": 120.0, "target": 0.9, **fields}
        self.config = from_dict(JobConfig, data)
        self.outcome: dict = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.outcome["result"] = launch(self.config)
        except Exception as exc:  # noqa: BLE001 - re-raised in result()
            self.outcome["error"] = exc

    def result(self) -> dict:
        self.thread.join(TIMEOUT_S)
        assert not self.thread.is_alive(), "the job did not end"
        if "error" in self.outcome:
            raise self.outcome["error"]
        return self.outcome["result"]


def _accounted(result: dict) -> None:
    for ps in result["ps_stats"]:
        assert ps["accepted"] == ps["applied"] + ps["dropped"] + ps["pending"], ps


@pytest.mark.parametrize("transport", ["auto", "socket"])  # socket: the killed worker's waiting pull goes with its connection
def test_ssgd_reaches_its_target_when_a_worker_is_killed_and_restarted(tmp_path, transport):
    job = Job(tmp_path, transport=transport)
    _wait_version(tmp_path, 10)
    _child("worker", 1).send_signal(signal.SIGKILL)
    result = job.result()
    assert result["reached"], result
    assert result["restarts"] == {"worker1": 1}
    kinds = [e["kind"] for e in _events(tmp_path)]
    assert "worker_restarted" in kinds
    _accounted(result)
    if transport == "socket":
        assert result["transport"] == "socket"


def test_a_dead_worker_with_no_restarts_left_is_dropped_from_the_ssgd_plan_and_the_job_reaches_its_target(tmp_path):
    job = Job(tmp_path, faults={"max_restarts": 0}, control={"lost_after_s": 3.0})
    _wait_version(tmp_path, 10)
    _child("worker", 3).send_signal(signal.SIGKILL)
    result = job.result()
    assert result["reached"], result
    assert result["faults"]["workers_lost"] == 1 and result["restarts"] == {}
    lost = [e for e in _events(tmp_path) if e["kind"] == "worker_lost"]
    assert [e["worker"] for e in lost] == [3]
    plans = [e["plan"] for e in _events(tmp_path) if e["kind"] == "plan"]
    assert "groups=[0,1,2]" in plans[-1]
    _accounted(result)


def test_a_silent_worker_is_dropped_from_the_ssgd_plan_and_taken_back_when_it_reports_again(tmp_path):
    # With trees of 2, the frozen worker 2 is worker 3's parent: 3 must give up on it once the plan
    # drops 2, and push for itself, or SSGD would stall with it.
    job = Job(tmp_path, control={"lost_after_s": 3.0}, stop_at_target=False, max_time_s=45.0,
              plan={"mode": "ssgd", "tree_fanout": 2})
    _wait_version(tmp_path, 10)
    frozen = _child("worker", 2)
    frozen.suspend()  # SIGSTOP: alive but silent, as a hung host would be
    try:
        deadline = time.monotonic() + 60
        while not any(e["kind"] == "worker_lost" for e in _events(tmp_path)):
            assert time.monotonic() < deadline, "the silent worker was never marked lost"
            time.sleep(0.5)
        version = _version(tmp_path)
        _wait_version(tmp_path, version + 10, timeout_s=30)  # SSGD goes on without it
    finally:
        frozen.resume()
    deadline = time.monotonic() + 60
    while not any(e["kind"] == "worker_rejoined" for e in _events(tmp_path)):
        assert time.monotonic() < deadline, "the worker was never taken back"
        time.sleep(0.5)
    # ...and SSGD goes on with it: the PSs switch plans at slightly different moments, which
    # must not leave a tree child's gradient held by a parent that waits on the same round.
    _wait_version(tmp_path, _version(tmp_path) + 6, timeout_s=20)
    result = job.result()
    plans = [e for e in _events(tmp_path) if e["kind"] == "plan"]
    assert "groups=[0,1,3]" in plans[1]["plan"] and "groups=[0,1,2,3]" in plans[-1]["plan"]
    assert all("tree=2" in plan["plan"] for plan in plans)
    assert result["faults"]["workers_lost"] == 1 and result["faults"]["workers_rejoined"] == 1
    _accounted(result)


@pytest.mark.parametrize("transport", ["auto", "socket"])  # socket: the workers reconnect to the new PS's socket channel
def test_a_killed_ps_restarts_from_its_checkpoint_and_the_job_reaches_its_target(tmp_path, transport):
    job = Job(tmp_path, faults={"checkpoint_every_updates": 5, "checkpoint_every_s": 0.0}, transport=transport)
    _wait_version(tmp_path, 12)
    _child("ps", 1).send_signal(signal.SIGKILL)
    result = job.result()
    assert result["reached"], result
    assert result["restarts"] == {"ps1": 1}
    restored = [e for e in _events(tmp_path) if e["kind"] == "ps_restored"]
    assert len(restored) == 1 and restored[0]["ps"] == 1
    # At most one interval, plus the updates applied while that checkpoint was being written (exactness is
    # checked step by step in test_checkpoint_restore.py).
    assert 0 <= restored[0]["updates_lost"] <= 5 + 2
    assert result["faults"]["updates_lost"] == restored[0]["updates_lost"]
    if transport == "socket":
        assert result["transport"] in ("socket", "mixed")  # "mixed": a push retried over gRPC while ps1 was down
        restarted = next(ps for ps in result["ps_stats"] if ps["ps_index"] == 1)
        assert restarted["counters"]["socket_pushes"] > 0  # the workers came back on the restarted PS's channel


def test_a_stopped_job_resumes_from_its_checkpoints(tmp_path):
    first = tmp_path / "first"
    job = Job(first, target=1.01, max_time_s=6.0)  # stops on time, writing a final checkpoint per PS
    stopped = job.result()
    assert not stopped["reached"] and stopped["updates"] > 0
    from star.checkpoint import latest_complete

    _, shards = latest_complete(first / "checkpoints")
    saved = [s.version for s in shards]  # the final checkpoints, written after the last worker stopped
    assert saved[0] == saved[1] >= stopped["updates"]

    # A resume that does not fit its checkpoint is a bad flag (exit 2 from the CLI), found before OUT is touched.
    for fields, named in (({"ps": 3}, "ps=3"), ({"task": "gpt-1m"}, "task='gpt-1m'")):
        with pytest.raises(ConfigError, match=named):
            Job(first, resume=str(first), **fields).result()
    assert (first / "result.json").exists()

    # The training time carried over is the stopped run's up to its last update: not its shutdown, nor the pause
    # before the resume, nor the new run's start-up (before, ~3-4 s of these were counted against max_time_s).
    trained = max(s.aggregator["trained_s"] for s in shards)
    time.sleep(2.0)

    second = tmp_path / "second"
    resumed = Job(second, resume=str(first)).result()
    assert resumed["reached"] and resumed["resumed_from"].endswith("checkpoints")
    kinds = [e for e in _events(second) if e["kind"] == "resumed"]
    assert kinds and kinds[0]["versions"] == saved
    assert resumed["updates"] > saved[0]
    first_point = _curve(second)[0][0]
    assert trained - 0.01 <= first_point <= trained + 1.0, (first_point, trained)
