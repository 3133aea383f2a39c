"""`star launch`: run a whole job on this host — PSs, coordinator (with evaluator), workers.

Every child is a real process talking gRPC on loopback, with its log in OUT/logs/.
The launcher shows progress, and shuts every child down on success, on Ctrl-C, and
when any child crashes; children also die with the launcher (PR_SET_PDEATHSIG, set by each child), so
no process outlives a job.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import grpc

from star.child_configs import job_as_run
from star.config import ConfigError, JobConfig, to_toml
from star.ddp_rules import DDP_MODE
from star.devices import check_device_available
from star.node_agent import NodeAgent
from star.processes import (JOB_FILE, Child, InterruptedBeforeResult, LaunchError, ProcessGroup, _tail, _wait_ready,
                            child_args, finish_result, signals_stop_the_job, with_flag)
from star.metrics import METRICS_FILE, check_metrics_ports, ready_metrics_port, write_metrics_file
from star.straggler import format_summary
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CONTROL_CHANNEL_OPTIONS, address
from star.rpc.security import TOKEN_ENV, Credentials
from star.shm import sweep as sweep_mailboxes


TOKEN_FILE_NAME = "job.token"  # in OUT, owner-only: lets an operator's tools reach a job whose token was generated
CRASH_EXPLAINS_S = 5.0  # after the coordinator stops answering, how long to wait for a child to have exited (and explain why)


def job_credentials(config: JobConfig, out: Path) -> Credentials:
    """The job's credentials: its token file or STAR_JOB_TOKEN if given, else a fresh random token.

    A generated token is also written to OUT/job.token (mode 0600), so that tools run by the
    same user (`--security.token_file OUT/job.token`) can talk to the job while it runs.
    """
    credentials = Credentials.load(config.security)
    if credentials.token is None:
        credentials = dataclasses.replace(credentials, token=secrets.token_hex(32))
        path = out / TOKEN_FILE_NAME
        path.unlink(missing_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(credentials.token + "\n")
    return credentials


def launch_or_stop(config: JobConfig) -> dict:
    """launch() for a benchmark that runs many jobs: a Ctrl-C or SIGTERM that interrupted this job
    stops the whole benchmark (KeyboardInterrupt), instead of being taken as one short run."""
    try:
        result = launch(config)
    except InterruptedBeforeResult:
        raise KeyboardInterrupt from None
    if result.get("interrupted"):
        raise KeyboardInterrupt
    return result


def launch(config: JobConfig, progress: Callable[[str], None] | None = None, startup_timeout_s: float = 120.0) -> dict:
    """Run the job to its end and return result.json's content."""
    from star.tasks import get_task

    if config.plan.mode == DDP_MODE:
        from star.ddp import launch_ddp

        return launch_ddp(config, progress)
    job = job_as_run(config, get_task(config.task))  # the optimizer as the task fills it in: refused before any child starts
    check_device_available("device", config.device)
    out = Path(config.out)
    checkpoints = Path(config.faults.checkpoint_dir or out / "checkpoints")
    job_id, restore_dir = _job_identity(config, checkpoints)  # a resume that does not fit fails before OUT is touched
    (out / "logs").mkdir(parents=True, exist_ok=True)
    same_run = restore_dir is not None and restore_dir.resolve() == checkpoints.resolve()  # resumed into its own OUT
    clear_run_files(out, keep_as=earlier_part(out) if same_run else None)
    job_file = out / JOB_FILE  # every child derives its own config from it (star.child_configs)
    job_file.write_text(to_toml(job))
    credentials = job_credentials(config, out)
    check_metrics_ports(config.host, config.metrics_port, config.ps)
    (out / METRICS_FILE).unlink(missing_ok=True)
    group = ProcessGroup(out / "logs", env={TOKEN_ENV: credentials.token or ""})
    started = time.monotonic()
    interrupted = False
    outages = CoordinatorOutages()
    agent: NodeAgent | None = None

    def ps_args(i: int, ready: Path) -> list[str]:
        return ps_command(job_file, config.host, i, ready, checkpoints, job_id)

    with signals_stop_the_job() as stop_requested:  # Ctrl-C and SIGTERM to the launcher shut the job down
        try:
            served = start_ps_daemons(group, ps_args, range(config.ps), config.host, startup_timeout_s, checkpoints, restore_dir)
            addresses = [served[i][1] for i in range(config.ps)]
            coordinator_address = start_coordinator(group, job_file, config.host, addresses, startup_timeout_s)
            if config.metrics_port is not None:
                urls = write_metrics_file(out, config.host, ready_metrics_port(group.log_dir / "coordinator.ready"),
                                          [ready_metrics_port(group.log_dir / f"ps{i}.ready") for i in range(config.ps)])
                if progress:
                    progress(f"metrics: {urls['coordinator']} (coordinator), {', '.join(map(str, urls['ps']))} (PSs)")
            # This host's agent: resource reports to the coordinator, and the PS moves it orders.
            agent = NodeAgent(config.host, 0, group, ps_args, credentials, str(checkpoints))
            for i, (child, ps_address) in served.items():
                agent.adopt_ps(i, child, ps_address)
            agent.start(coordinator_address)
            start_workers(group, job_file, range(config.workers), coordinator_address, config.host)
            _monitor(group, coordinator_address, progress, credentials, config.faults.max_restarts, stop=stop_requested,
                     outages=outages, workers=config.workers)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if agent is not None:
                agent.stop()
            group.shutdown()
            sweep_mailboxes()  # shared memory of any PS that did not exit cleanly
    result = finish_result(out, interrupted, started,
                           faults=dict(coordinator_restarts=outages.restarts, coordinator_down_s=round(outages.seconds, 3)),
                           restarts={c.name: c.restarts for c in group.children if c.restarts}, job_id=job_id,
                           resumed_from=str(restore_dir) if restore_dir else None)
    if progress and result.get("straggler_summary"):
        progress("straggler summary (seconds; others waited: by the PSs' clocks):\n" + format_summary(result["straggler_summary"]))
    return result


RUN_FILES = ("result.json", "curve.csv", "events.jsonl", "iterations.csv", "coordinator_state.json")


def earlier_part(out: Path) -> Path:
    """Where a resumed job keeps the files of the run it continues (OUT/part1, part2, ...): its curve and
    events are the job's history too."""
    return next(out / f"part{n}" for n in range(1, 10_000) if not (out / f"part{n}").exists())


def clear_run_files(out: Path, keep_as: Path | None) -> None:
    """Clear OUT for a new run's result, curve and events: moved into `keep_as` when given, else deleted."""
    present = [out / name for name in RUN_FILES if (out / name).exists()]
    if keep_as is not None and present:
        keep_as.mkdir(parents=True)
        for path in present:
            path.rename(keep_as / path.name)
    for path in present:
        path.unlink(missing_ok=True)


def ps_command(job_file: Path, host: str, shard: int, ready: Path, checkpoints: Path, job_id: str) -> list[str]:
    """`star ps` arguments for one shard (no --restore-dir / --migrate-from: callers add them)."""
    return child_args("ps", job_file, ps_index=shard, host=host, ready_file=ready, checkpoint_dir=checkpoints, job_id=job_id)


def start_ps_daemons(group: ProcessGroup, ps_args: Callable[[int, Path], list[str]], shards, host: str,
                     startup_timeout_s: float, checkpoints: Path, restore_dir: Path | None = None) -> dict[int, tuple[Child, str]]:
    """Start a PS per shard (all at once), wait until each serves; shard -> (child, address)."""
    started = {}
    for i in shards:
        ready = group.log_dir / f"ps{i}.ready"
        ready.unlink(missing_ok=True)
        args = ps_args(i, ready)
        resumed = ["--restore-dir", str(restore_dir), "--resumed"] if restore_dir else []  # a crash restart counts its outage
        started[i] = (group.spawn(f"ps{i}", args + resumed), ready, args)
    served = {}
    for i, (child, ready, args) in started.items():
        port = _wait_ready(group, child, ready, startup_timeout_s)
        # A crashed PS comes back on the same port from its own newest checkpoint.
        child.restart_args = with_flag(args, "--port", str(port)) + ["--restore-dir", str(checkpoints)]
        if (metrics_port := ready_metrics_port(ready)) is not None:  # a restarted PS serves /metrics where it did
            child.restart_args = with_flag(child.restart_args, "--metrics-port", str(metrics_port))
        served[i] = (child, address(host, port))
    return served


def start_coordinator(group: ProcessGroup, job_file: Path, host: str, ps_addresses: list[str], startup_timeout_s: float,
                      placement_file: Path | None = None) -> str:
    """Start the coordinator (it sends the initial plan to every PS); returns its address once it serves.
    It is restarted after a crash like a PS, within the restart budget."""
    ready = group.log_dir / "coordinator.ready"
    ready.unlink(missing_ok=True)
    args = child_args("coordinator", job_file, ps_addresses=ps_addresses, host=host, ready_file=ready,
                      placement_file=placement_file)
    child = group.spawn("coordinator", args)
    port = _wait_ready(group, child, ready, startup_timeout_s)
    # A crashed coordinator comes back on the same port and takes the job over (plan from the PSs).
    child.restart_args = with_flag(args, "--port", str(port)) + ["--restore"]
    return address(host, port)


def start_workers(group: ProcessGroup, job_file: Path, worker_ids, coordinator_address: str, relay_host: str) -> None:
    """Start these workers; each joins the coordinator (which tells it the PS addresses). `relay_host` is
    this host's address, where a worker serves a relay for tree children when the job may use trees."""
    for w in worker_ids:
        args = child_args("worker", job_file, worker_id=w, coordinator=coordinator_address, relay_host=relay_host)
        group.spawn(f"worker{w}", args).restart_args = args  # a restarted worker rejoins with current parameters


def _job_identity(config: JobConfig, checkpoints: Path) -> tuple[str, Path | None]:
    """(job id, directory to restore from): a fresh id, or the resumed job's, after checking its checkpoint set."""
    from star.checkpoint import (CheckpointError, JobManifest, clear_checkpoints, latest_complete, resolve_checkpoint_dir,
                                 write_manifest)

    restore_dir = None
    job_id = secrets.token_hex(8)
    if config.resume:
        restore_dir = resolve_checkpoint_dir(config.resume)
        try:
            manifest, shards = latest_complete(restore_dir)
        except CheckpointError as exc:
            raise LaunchError(f"cannot resume: {exc}") from None
        # A mismatch with the checkpoint is a bad flag (exit 2, naming it), not a failed job.
        if manifest.num_ps != config.ps:
            raise ConfigError("ps", config.ps, f"cannot resume {config.resume}: its checkpoint has {manifest.num_ps} PS shards")
        if manifest.task and manifest.task != config.task:
            raise ConfigError("task", config.task, f"cannot resume {config.resume}: its checkpoint is of task {manifest.task!r}")
        job_id = manifest.job_id
    if restore_dir is None or restore_dir.resolve() != checkpoints.resolve():
        clear_checkpoints(checkpoints)  # a new checkpoint set: an earlier job's (an --overwrite) must not mix with it
    write_manifest(checkpoints, JobManifest(job_id, config.ps, config.task))
    return job_id, restore_dir


COORDINATOR_RESTART_GRACE_S = 120.0


def should_restart(child: Child, max_restarts: int) -> bool:
    """Workers, PSs and the coordinator come back after a crash (a PS from its checkpoint, the
    coordinator from the PSs and its state file) until the budget is spent."""
    return child.restart_args is not None and child.restarts < max_restarts


@dataclass
class CoordinatorOutages:
    """Coordinator crashes seen by the monitor: restarts and seconds without an answering coordinator."""

    restarts: int = 0
    seconds: float = 0.0
    down_since: float | None = None

    def down(self, now: float) -> None:
        self.restarts += 1
        self.down_since = self.down_since if self.down_since is not None else now

    def answered(self, now: float) -> None:
        if self.down_since is not None:
            self.seconds += now - self.down_since
            self.down_since = None

    def waiting(self, now: float, grace_s: float = COORDINATOR_RESTART_GRACE_S) -> bool:
        """Whether a restarted coordinator may still be starting (it imports torch, reads the PSs)."""
        return self.down_since is not None and now - self.down_since < grace_s


def _monitor(
    group: ProcessGroup, coordinator_address: str, progress: Callable[[str], None] | None, credentials: Credentials,
    max_restarts: int = 0, fail_without_workers: bool = True, stop: threading.Event | None = None,
    outages: CoordinatorOutages | None = None, workers: int | None = None,
) -> None:
    """Poll the coordinator until the job is finished; restart a crashed worker or PS while the
    restart budget lasts. A worker past its budget is left out (the coordinator drops it from the
    plan once it has been silent for lost_after_s); anything else that crashes fails the job, and so
    does losing every worker."""
    channel = credentials.channel(coordinator_address, CONTROL_CHANNEL_OPTIONS)
    stub = pb_grpc.CoordinatorStub(channel)
    last_print = 0.0
    outages = outages if outages is not None else CoordinatorOutages()
    try:
        while True:
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt
            crashed = group.crashed()
            if crashed is not None and should_restart(crashed, max_restarts):
                code = crashed.process.returncode
                fresh = group.restart(crashed)
                if crashed.name == "coordinator":
                    outages.down(time.monotonic())
                if progress:
                    progress(f"{crashed.name} exited with code {code}; restarted ({fresh.restarts}/{max_restarts})")
                continue
            if crashed is not None and crashed.name.startswith("worker") and (group.live_workers() > 0 or not fail_without_workers):
                crashed.critical = False
                if progress:
                    progress(f"{crashed.name} exited with code {crashed.process.returncode} and has no restarts left: "
                             f"the job goes on without it")
                continue
            if crashed is not None:
                raise LaunchError(
                    f"{crashed.name} exited with code {crashed.process.returncode}; last lines of {crashed.log_path}:\n"
                    f"{_tail(crashed.log_path)}"
                )
            try:
                status = stub.JobStatus(pb.JobStatusRequest(), timeout=5.0)
            except grpc.RpcError as exc:
                # A crashed child explains more than a dead channel does (its log's last lines, next loop): a
                # coordinator whose task failed closes its port a few seconds before its process has exited.
                crashed, deadline = group.crashed(), time.monotonic() + CRASH_EXPLAINS_S
                while crashed is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                    crashed = group.crashed()
                if crashed is not None or outages.waiting(time.monotonic()):
                    continue
                raise LaunchError(f"coordinator stopped answering: {exc.code()}") from None
            outages.answered(time.monotonic())
            if progress and (time.monotonic() - last_print >= 1.0 or status.state == "finished"):
                progress(format_status(status, workers))
                last_print = time.monotonic()
            if status.state == "finished":
                return
            time.sleep(0.25)
    finally:
        channel.close()


def format_status(status: pb.JobStatusReply, workers: int | None = None) -> str:
    """One progress line. `iter` is the furthest worker's iteration and `it/s` the iterations of all workers
    together per second; before the first update, what the job is waiting for instead (`workers`: how many)."""
    if status.state == "starting" and status.version == 0:
        expected = f"/{workers}" if workers else ""
        return (f"[{status.elapsed_s:6.1f}s] starting: {status.workers_reporting}{expected} workers reporting "
                f"(each loads the task and times a step before its first push)")
    metric = f"{status.metric_name}={status.metric:.4f}" if status.has_metric else f"{status.metric_name}=—"
    reached = f" reached in {status.tta_s:.1f}s" if status.reached else ""
    return (
        f"[{status.elapsed_s:6.1f}s] {status.state:<8} mode={status.mode:<7} iter={status.max_iteration:<5} "
        f"{status.iterations_per_s:6.1f} it/s (all workers)  version={status.version:<5} {metric}{reached}"
        + (f"  transport={status.transport}/{status.wire}" if status.transport else "")
    )
