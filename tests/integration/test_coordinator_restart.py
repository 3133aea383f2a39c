"""The coordinator is no single point of failure: kill -9 it (alone, then with a PS) and the job goes on.

One job, two faults (to spend the suite's time once): the coordinator alone is killed mid-run,
then the coordinator and PS 1 together. Workers train on under the plan in force while the
coordinator is down; each restarted coordinator takes the plan over from the PSs.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from star.traces import Trace, write_simple_csv
from tests.integration.test_faults import Job, _accounted, _child, _events, _version, _wait_version

pytestmark = pytest.mark.integration

SLOW_START_S = 600.0  # daemons (and restarted ones) import torch: minutes on a loaded shared machine


def _coordinator() -> psutil.Process:
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if child.cmdline()[3:4] == ["coordinator"]:
                return child
        except psutil.NoSuchProcess:
            continue
    raise AssertionError("no coordinator among this process's children")


def _wait_event(out, kind: str, count: int, timeout_s: float = 150.0) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(1 for e in _events(out) if e["kind"] == kind) < count:
        assert time.monotonic() < deadline, f"no {count} {kind} event(s)"
        time.sleep(0.5)


@pytest.mark.timeout(1800)
def test_the_job_reaches_its_target_after_the_coordinator_is_killed_alone_and_then_with_a_ps(tmp_path):
    # Every worker 8x slower (~1 s an update here): the job must still be training when the second fault
    # comes, after the first restart (seconds); at full speed, a fast machine reached the target before it.
    trace = tmp_path / "slow_all.csv"
    write_simple_csv(Trace.from_rows([(0, w, 8.0) for w in range(4)] + [(10_000, 0, 8.0)]), trace)
    out = tmp_path / "run"
    job = Job(out, target=0.95, max_time_s=600.0, trace={"path": str(trace)},
              faults={"checkpoint_every_updates": 5, "checkpoint_every_s": 0.0})
    _wait_version(out, 8, timeout_s=SLOW_START_S)
    _coordinator().send_signal(signal.SIGKILL)
    _wait_event(out, "coordinator_restored", 1, timeout_s=SLOW_START_S)
    _wait_version(out, _version(out) + 3, timeout_s=SLOW_START_S)
    coordinator, ps = _coordinator(), _child("ps", 1)
    coordinator.send_signal(signal.SIGKILL)
    ps.send_signal(signal.SIGKILL)
    job.thread.join(SLOW_START_S * 2)  # two restarts on a loaded machine: beyond test_faults' wait
    result = job.result()
    assert result["reached"], result
    # Workers may restart too: one gives up on a PS that takes longer than its retries to come back (a loaded machine).
    assert result["restarts"]["coordinator"] == 2 and result["restarts"]["ps1"] == 1, result["restarts"]
    assert result["faults"]["ps_restored"] == 1  # seen by the coordinator that came back with it
    assert result["faults"]["coordinator_restarts"] == 2 and result["faults"]["coordinator_down_s"] > 0
    restored = [e for e in _events(out) if e["kind"] == "coordinator_restored"]
    assert len(restored) == 2 and all(e["state_file"] == "restored" and e["plan_from_ps"] for e in restored)
    assert restored[0]["epoch"] >= 1 and restored[0]["curve_points"] > 0
    # Only the PS kill loses updates (back to its checkpoint): at most one interval plus those applied while it was written.
    assert 0 <= result["faults"]["updates_lost"] <= 5 + 2
    _accounted(result)
