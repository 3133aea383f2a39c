"""Elastic membership on real processes: a worker started by hand mid-run is admitted, a lost one is left out.

One job (to spend the suite's time once): 3 workers; a 4th is started by hand, as an
operator would, and is admitted into the plan; then worker 1 dies for good (no restarts
left) and the plan is recomputed without it. The job still reaches its target.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from star.rpc.security import TOKEN_ENV
from tests.integration.test_coordinator_restart import SLOW_START_S, _wait_event
from tests.integration.test_faults import Job, _accounted, _child, _events, _wait_version

pytestmark = pytest.mark.integration


def _start_worker_by_hand(out, worker_id: int, num_workers: int) -> subprocess.Popen:
    port = json.loads((out / "logs" / "coordinator.ready").read_text())["port"]
    env = dict(os.environ, **{TOKEN_ENV: (out / "job.token").read_text().strip()}, OMP_NUM_THREADS="1")
    env.pop("STAR_PARENT_PID", None)
    log = open(out / "logs" / f"hand-worker{worker_id}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "star.cli", "worker", "--worker-id", str(worker_id),
                             "--workers", str(num_workers), "--task", "digits", "--coordinator", f"127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)


@pytest.mark.timeout(1800)
def test_a_worker_started_mid_run_is_admitted_and_the_job_reaches_its_target_after_losing_one_for_good(tmp_path):
    # Runs its whole max_time_s: digits can reach 0.9 in ~20 updates, before the newcomer has even started.
    job = Job(tmp_path, workers=3, max_workers=4, target=0.9, max_time_s=60.0, stop_at_target=False,
              faults={"max_restarts": 0}, control={"lost_after_s": 3.0})
    _wait_version(tmp_path, 5, timeout_s=SLOW_START_S)
    newcomer = _start_worker_by_hand(tmp_path, 3, 4)
    try:
        _wait_event(tmp_path, "worker_admitted", 1, timeout_s=SLOW_START_S)
        _child("worker", 1).send_signal(signal.SIGKILL)
        job.thread.join(SLOW_START_S * 2)
        result = job.result()
    finally:  # not the launcher's child: stopped here whatever happened
        if newcomer.poll() is None:
            newcomer.kill()
            newcomer.wait()
    assert result["reached"], result
    events = _events(tmp_path)
    admitted = [e for e in events if e["kind"] == "worker_admitted"]
    assert admitted[0]["workers"] == [3] and "groups=[0,1,2,3]" in admitted[0]["plan"]
    assert [e["worker"] for e in events if e["kind"] == "worker_lost"] == [1]
    plans = [e["plan"] for e in events if e["kind"] == "plan"]
    assert "groups=[0,1,2]" in plans[0] and "groups=[0,2,3]" in plans[-1]
    assert result["faults"]["workers_lost"] == 1
    _accounted(result)
