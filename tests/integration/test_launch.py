"""Whole jobs through `star launch`: 2 PSs x 4 workers reach the digits target in every mode,
a live plan switch loses no update, bad configs fail before anything starts, and no
process outlives the launcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from star.config import from_dict, JobConfig
from star.launch import launch
from star.plan import asgd, kofn, ssgd
from star.rpc.ps_client import PSClient
from star.tta import EvalConfig

pytestmark = pytest.mark.integration

MAX_TIME_S = 90.0
TARGET = 0.85  # digits' default target is 0.95; every mode training to 0.85 end to end proves the same, sooner
# Asynchronous modes too: their PSs lower SGD's momentum by the momentum asynchrony adds (optimizer.async_momentum).
# At a fixed 0.9 they overshot and fell back to chance again and again (benchmarks/results/ssp_collapses_29nov).
MODE_TARGETS = {mode: TARGET for mode in ("ssgd", "kofn", "grouped", "asgd", "ssp")}


def _assert_every_gradient_accounted_for(result: dict) -> None:
    for ps in result["ps_stats"]:
        assert ps["accepted"] == ps["applied"] + ps["dropped"] + ps["pending"], ps


def _assert_rounds_came_in_tree_pushes(result: dict) -> None:
    """With trees of 2, parents 0 and 2 push for themselves and children 1 and 3: two pushes a round.
    A child that missed its parent's wait pushes alone, so most rounds, not necessarily all, take two."""
    assert "tree=2" in result["final_plan"]
    for ps in result["ps_stats"]:
        counters = ps["counters"]
        assert counters["tree_pushes"] >= 0.8 * counters["pushes"], counters
        assert counters["pushes"] <= 0.6 * ps["accepted"], ps


# SSGD runs with tree aggregation on: flat SSGD jobs run in the coordinator, fault and security tests.
TREE_FANOUT = {"ssgd": 2}
CURVE_ROUNDING = 1e-6  # curve.csv's metric column has 6 decimals


@pytest.mark.parametrize("mode", list(MODE_TARGETS))
def test_two_ps_four_workers_reach_the_digits_target(tmp_path, mode):
    config = from_dict(JobConfig, {"task": "digits", "workers": 4, "ps": 2, "out": str(tmp_path), "max_time_s": MAX_TIME_S,
                                   "target": MODE_TARGETS[mode],
                                   "plan": {"mode": mode, "tree_fanout": TREE_FANOUT.get(mode)}})
    result = launch(config)
    if mode in TREE_FANOUT:
        _assert_rounds_came_in_tree_pushes(result)
    assert result["reached"], f"{mode}: final {result['final_metric']} after {result['train_s']} s"
    assert result["iterations"] > 0 and result["updates"] > 0
    assert (result["transport"], result["wire"]) == ("shm", "float32")  # transport=auto, every PS on this host
    _assert_every_gradient_accounted_for(result)
    curve = (tmp_path / "curve.csv").read_text().splitlines()
    assert curve[0] == "time_s,version,metric" and len(curve) > 1
    last = [float(line.split(",")[2]) for line in curve[-EvalConfig().smoothing:]]  # the target is on their mean
    # curve.csv rounds each metric to 6 decimals, so a mean that sat exactly on the target may read a hair under it
    assert sum(last) / len(last) >= MODE_TARGETS[mode] - CURVE_ROUNDING
    assert result["updates_to_target"] == int(curve[-1].split(",")[1]) and result["s_per_update"] > 0
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert "plan" in kinds and "target_reached" in kinds


def _ps_addresses(out: Path) -> list[str]:
    addresses = []
    for ready in sorted((out / "logs").glob("ps*.ready")):
        addresses.append(f"127.0.0.1:{json.loads(ready.read_text())['port']}")
    return addresses


def _job_credentials(out: Path):
    """A launched job requires its token; the launcher leaves a generated one in OUT/job.token."""
    from star.config import SecurityConfig
    from star.rpc.security import Credentials

    return Credentials.load(SecurityConfig(token_file=str(out / "job.token")))


def test_live_plan_switches_mid_run_lose_no_update(tmp_path):
    config = from_dict(JobConfig, {"task": "digits", "workers": 4, "ps": 2, "out": str(tmp_path), "max_time_s": MAX_TIME_S,
                                   "target": 0.96})  # not reached before the third switch (version 24)
    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.setdefault("result", launch(config)))
    runner.start()
    try:
        switches = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(switches) < 3:
            addresses = _ps_addresses(tmp_path)
            if len(addresses) == 2:
                with PSClient(addresses, credentials=_job_credentials(tmp_path)) as client:
                    stats = client.stats()
                    version = max(s.version for s in stats)
                    if version >= 8 * (len(switches) + 1):
                        plans = (kofn(range(4), 3, epoch=2), asgd(range(4), epoch=3), ssgd(range(4), epoch=4))
                        switches.append([r.flushed for r in client.configure(plans[len(switches)])])
            time.sleep(0.2)
    finally:
        runner.join(timeout=300)
    result = outcome["result"]
    assert len(switches) == 3, "the run ended before all three switches"
    assert result["reached"]
    _assert_every_gradient_accounted_for(result)
    for ps in result["ps_stats"]:
        assert ps["counters"].get("plan_switches") == 4  # initial plan + three live switches
        assert ps["dropped"] == 0  # late k-of-N gradients are applied, never silently lost


def test_bad_config_fails_at_start_naming_the_field(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "star.cli", "launch", "--task", "digits", "--workers", "4", "--mode", "kofn", "--k", "9", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 2
    assert "plan.k" in completed.stderr
    assert not (tmp_path / "logs").exists()


def _wait_for_training(out: Path, process: subprocess.Popen, timeout_s: float = 120.0) -> None:
    """Until the evaluator has recorded a first point (so every daemon is up and training)."""
    curve = out / "curve.csv"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if curve.exists() and len(curve.read_text().splitlines()) >= 2:
            return
        if process.poll() is not None:
            raise AssertionError(f"star launch exited with code {process.returncode} before training:\n{process.stdout.read()}")
        time.sleep(0.5)
    raise AssertionError(f"no training within {timeout_s} s")


def _descendants_alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def _start_endless_job(out: Path, *extra: str, ddp: bool = False, own_group: bool = False) -> subprocess.Popen:
    """A `star launch` (`ddp`: of the DDP baseline) that would train for minutes (unreachable target),
    once it is training. `own_group`: the launcher leads a process group of its own, as a shell's foreground
    job does, so a signal can be sent to the whole group as a terminal's Ctrl-C is."""
    servers = ["--mode", "ddp"] if ddp else ["--ps", "1"]
    process = subprocess.Popen(
        [sys.executable, "-m", "star.cli", "launch", "--task", "digits", "--workers", "2", *servers, "--max-time-s", "300",
         "--target", "1.01", "--out", str(out), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=own_group,
    )
    try:
        _wait_for_training(out, process)
    except AssertionError:
        process.kill()
        raise
    return process


def _stop_with(process: subprocess.Popen, signum: int) -> tuple[int, str, list[int]]:
    """Send `signum` to a training launcher and wait for it: (its exit code, its output, the pids of its
    children before the signal)."""
    try:
        children = [c.pid for c in psutil.Process(process.pid).children(recursive=True)]
        process.send_signal(signum)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, output, children


def test_ctrl_c_stops_every_child_and_still_writes_a_result(tmp_path):
    code, output, children = _stop_with(_start_endless_job(tmp_path), signal.SIGINT)
    assert len(children) >= 4
    assert code == 130, output
    time.sleep(0.5)
    assert _descendants_alive(children) == []
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["interrupted"] is True and result["reached"] is False


def test_ctrl_c_to_the_terminal_s_process_group_still_writes_the_ps_accounting(tmp_path):
    """A terminal's Ctrl-C signals the whole foreground process group. Children run in sessions of their own,
    so only the launcher gets it and stops them in order: the coordinator reads the PSs' counters before the
    PSs go (6 Dec: they got the signal too, shut down first, and result.json had no updates, no ps_stats)."""
    process = _start_endless_job(tmp_path, own_group=True)
    try:
        children = [c.pid for c in psutil.Process(process.pid).children(recursive=True)]
        os.killpg(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, output
    time.sleep(0.5)
    assert _descendants_alive(children) == []
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["interrupted"] is True and result["updates"] > 0
    assert len(result["ps_stats"]) == 1 and result["ps_stats"][0]["applied"] > 0 and result["transport"]


def test_a_killed_launcher_s_workers_exit_within_seconds_and_leave_no_shared_memory(tmp_path):
    """SIGKILL to the launcher: every child gets SIGTERM (PR_SET_PDEATHSIG). The PS goes; its workers, whose
    pushes then fail, must end at once rather than retry for ~20 s holding their /dev/shm segments."""
    shm_before = set(os.listdir("/dev/shm"))
    process = _start_endless_job(tmp_path)
    children = [c.pid for c in psutil.Process(process.pid).children(recursive=True)]
    process.kill()
    process.communicate(timeout=30)
    deadline = time.monotonic() + 10.0
    while _descendants_alive(children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _descendants_alive(children) == []
    assert {name for name in set(os.listdir("/dev/shm")) - shm_before if name.startswith("star")} == set()


BROKEN_MODEL_TASK = """
import dataclasses

from star.tasks import get_task


def build_model(seed):
    raise ValueError("model factory exploded")


def build_task():
    return dataclasses.replace(get_task("digits"), build_model=build_model)
"""


def test_a_task_whose_model_cannot_be_built_fails_the_launch_with_the_child_s_own_error(tmp_path):
    """The coordinator builds the model for its evaluator; when that raised, the launcher said only "coordinator
    stopped answering: UNAVAILABLE" (it gave the dying process 0.5 s to be seen as crashed)."""
    (tmp_path / "star_broken_model_task.py").write_text(BROKEN_MODEL_TASK)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p))
    completed = subprocess.run(
        [sys.executable, "-m", "star.cli", "launch", "--task", "star_broken_model_task:build_task", "--workers", "2",
         "--ps", "1", "--max-time-s", "60", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=180, env=env,
    )
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert "model factory exploded" in completed.stderr and "stopped answering" not in completed.stderr, completed.stderr


def test_sigterm_to_a_ddp_launch_stops_every_rank_with_exit_130(tmp_path):
    """The DDP baseline's launcher treats SIGTERM (and Ctrl-C) as a STAR launch does: it stops its ranks,
    leaves none running and exits 130."""
    code, output, ranks = _stop_with(_start_endless_job(tmp_path, ddp=True), signal.SIGTERM)
    assert len(ranks) >= 2
    assert code == 130, output
    time.sleep(0.5)
    assert _descendants_alive(ranks) == []


def test_a_crashed_ps_with_no_restarts_left_fails_the_launch_and_stops_the_rest(tmp_path):
    process = _start_endless_job(tmp_path, "--faults.max_restarts", "0")
    try:
        children = psutil.Process(process.pid).children(recursive=True)
        ps = next(c for c in children if c.cmdline()[3:4] == ["ps"])  # python -m star.cli ps ...
        os.kill(ps.pid, signal.SIGKILL)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1
    assert "exited with code -9" in output
    time.sleep(0.5)
    assert _descendants_alive([c.pid for c in children]) == []
