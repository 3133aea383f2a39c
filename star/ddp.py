"""`star launch --mode ddp`: the PyTorch DDP baseline of a job, on this host.

Starts `workers` rank processes (star.ddp_rank) with torchrun's rendezvous variables
(MASTER_ADDR = the job's host, a free MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE): gloo on CPU; on CUDA (`device`), NCCL when each rank has a GPU of
its own, else gloo, which lets several ranks share one GPU (star.ddp_rules.ddp_backend). Same task, seed,
sharding, trace replay, evaluator rule, target and output files as a STAR run; no PSs
and no coordinator. Every rank dies with the launcher; a crashed rank ends the job.
"""

from __future__ import annotations

import csv
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from star.cli_checks import check_task
from star.devices import check_device_available
from star.config import JobConfig, to_toml
from star.processes import JOB_FILE, PARENT_PID_ENV, LaunchError, finish_result, signals_stop_the_job

RANK_GRACE_S = 10.0
REPEAT_STATUS_S = 10.0  # an unchanged progress line is printed again this often, so a slow start still shows life


def free_port(host: str) -> int:
    """A port that was free on `host` a moment ago (the rendezvous store binds it next)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def rank_env(host: str, port: int, rank: int, world: int) -> dict[str, str]:
    """torchrun's variables for one rank of a single-node job."""
    env = {"MASTER_ADDR": host, "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world),
           "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0"}
    if host in ("127.0.0.1", "localhost", "::1"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo's pairs on loopback, whatever the host name resolves to
    return env


def launch_ddp(config: JobConfig, progress: Callable[[str], None] | None = None, amp: bool = False) -> dict:
    """Run the job as DDP to its end and return result.json's content (plus wall_s, out, interrupted)."""
    check_task("task", config.task)  # an unknown task or preset fails here, before any process starts
    check_device_available("device", config.device)
    out = Path(config.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    for stale in ("result.json", "curve.csv", "events.jsonl"):
        (out / stale).unlink(missing_ok=True)
    config_path = out / JOB_FILE
    config_path.write_text(to_toml(config))
    port = free_port(config.host)
    started = time.monotonic()
    ranks: list[tuple[int, subprocess.Popen, Path]] = []
    interrupted = False
    with signals_stop_the_job():  # Ctrl-C and SIGTERM stop the ranks, as they stop a STAR job
        try:
            for rank in range(config.workers):
                log_path = out / "logs" / f"worker{rank}.log"
                with open(log_path, "w") as log:
                    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                               **{PARENT_PID_ENV: str(os.getpid())}, **rank_env(config.host, port, rank, config.workers))
                    command = [sys.executable, "-m", "star.ddp_rank", "--config", str(config_path),
                               *(["--amp"] if amp else [])]
                    ranks.append((rank, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                                         stdin=subprocess.DEVNULL, env=env,
                                                         start_new_session=True), log_path))  # as ProcessGroup's
            _wait(ranks, out, progress, config.max_time_s + 300.0)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            _stop(ranks)
    return finish_result(out, interrupted, started, restarts={})


def _wait(ranks: list[tuple[int, subprocess.Popen, Path]], out: Path, progress, timeout_s: float) -> None:
    """Until every rank exits 0; a rank that fails (or a job past `timeout_s`) ends the job with its log's tail.
    Except once rank 0 has written this job's result.json (stale ones are removed at start): the job's outcome is
    complete, and a rank that then dies in the process group's teardown (gloo, rarely: "terminate called without an
    active exception", exit -6, seen in CI even after the ranks' closing barrier) is reported, not made a failure."""
    started = time.monotonic()
    deadline = started + timeout_s
    last_print, last_line = 0.0, ""
    while True:
        codes = [process.poll() for _, process, _ in ranks]
        for (rank, _, log_path), code in zip(ranks, codes):
            if code not in (None, 0):
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
                if (out / "result.json").is_file():
                    print(f"star ddp: rank {rank} exited with code {code} after the result was written (teardown); "
                          f"last lines of {log_path}:\n{tail}", file=sys.stderr)
                    return
                raise LaunchError(f"ddp rank {rank} exited with code {code}; last lines of {log_path}:\n{tail}")
        if all(code == 0 for code in codes):
            return
        if time.monotonic() > deadline:
            raise LaunchError(f"ddp ranks still running {timeout_s:.0f} s after start; see {out / 'logs'}")
        if progress and time.monotonic() - last_print >= 1.0:
            line = _status_line(out)
            if line != last_line or time.monotonic() - last_print >= REPEAT_STATUS_S:  # news, or a sign of life
                progress(line if line != last_line else f"{line} (still running, {time.monotonic() - started:.0f} s)")
                last_print, last_line = time.monotonic(), line
        time.sleep(0.2)


def _status_line(out: Path) -> str:
    """The newest curve.csv point, as a progress line."""
    try:
        with open(out / "curve.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError:
        rows = []
    if not rows:
        return "ddp: starting (ranks meet at the rendezvous, build the task, then train; the first evaluation follows)"
    last = rows[-1]
    return f"[{float(last['time_s']):6.1f}s] ddp      iter={last['version']:<5} metric={float(last['metric']):.4f}"


def _stop(ranks: list[tuple[int, subprocess.Popen, Path]]) -> None:
    """SIGTERM every rank still running, then SIGKILL what is left after RANK_GRACE_S."""
    for _, process, _ in ranks:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + RANK_GRACE_S
    for _, process, _ in ranks:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
