"""`star launch`: run a whole job on this host — PSs, coordinator (with evaluator), workers.

Every child is a real process talking gRPC on loopback, with its log in OUT/logs/.
The launcher shows progress, and shuts every child down on success, on Ctrl-C, and
when any child crashes; children also die with the launcher (PR_SET_PDEATHSIG, set by each child), so
no process outlives a job.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import grpc

from star.config import JobConfig, to_toml
from star.ddp_rules import DDP_MODE
from star.node_agent import NodeAgent
from star.processes import (Child, InterruptedBeforeResult, LaunchError, ProcessGroup, _tail, _wait_ready,
                            signals_stop_the_job)
from star.metrics import METRICS_FILE, check_metrics_ports, ps_metrics_port, ready_metrics_port, write_metrics_file
from star.straggler import format_summary
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CONTROL_CHANNEL_OPTIONS, address
from star.rpc.security import TOKEN_ENV, Credentials
from star.shm import sweep as sweep_mailboxes


def _flag_args(prefix: str, values: dict) -> list[str]:
    """Flags for a (nested) config dict: {'k': 3, 'detector': {'rule': 'mad'}} -> --p.k 3 --p.detector.rule mad."""
    args: list[str] = []
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, dict):
            args += _flag_args(f"{prefix}{key}.", value)
            continue
        if isinstance(value, (tuple, list)):
            args += [f"--{prefix}{key}", ",".join(map(str, value))]
        elif isinstance(value, bool):
            args.append(f"--{prefix}{key}" if value else f"--no-{prefix}{key}")
        else:
            args += [f"--{prefix}{key}", str(value)]
    return args


TOKEN_FILE_NAME = "job.token"  # in OUT, owner-only: lets an operator's tools reach a job whose token was generated


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


def _security_flags(config: JobConfig) -> list[str]:
    """TLS settings for a child; the token goes through the environment instead (token_file is not passed)."""
    tls = {k: v for k, v in dataclasses.asdict(config.security).items() if k != "token_file"}
    return _flag_args("security.", tls)


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
    task = get_task(config.task)
    optimizer = config.optimizer.resolved(task.default_optimizer, task.default_lr, task.default_momentum)
    out = Path(config.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    for stale in ("result.json", "curve.csv", "events.jsonl", "iterations.csv", "coordinator_state.json"):
        (out / stale).unlink(missing_ok=True)
    (out / "config.toml").write_text(to_toml(config))
    checkpoints = Path(config.faults.checkpoint_dir or out / "checkpoints")
    job_id, restore_dir = _job_identity(config, checkpoints)
    credentials = job_credentials(config, out)
    check_metrics_ports(config.host, config.metrics_port, config.ps)
    (out / METRICS_FILE).unlink(missing_ok=True)
    group = ProcessGroup(out / "logs", env={TOKEN_ENV: credentials.token or ""})
    started = time.monotonic()
    interrupted = False
    outages = CoordinatorOutages()
    agent: NodeAgent | None = None

    def ps_args(i: int, ready: Path) -> list[str]:
        return ps_command(config, optimizer, config.host, i, ready, checkpoints, job_id)

    with signals_stop_the_job() as stop_requested:  # Ctrl-C and SIGTERM to the launcher shut the job down
        try:
            served = start_ps_daemons(group, ps_args, range(config.ps), config.host, startup_timeout_s, checkpoints, restore_dir)
            addresses = [served[i][1] for i in range(config.ps)]
            coordinator_address = start_coordinator(group, config, config.host, addresses, out, startup_timeout_s)
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
            start_workers(group, config, range(config.workers), coordinator_address)
            _monitor(group, coordinator_address, progress, credentials, config.faults.max_restarts, stop=stop_requested,
                     outages=outages)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if agent is not None:
                agent.stop()
            group.shutdown()
            sweep_mailboxes()  # shared memory of any PS that did not exit cleanly
    result_path = out / "result.json"
    if not result_path.exists():
        if interrupted:
            raise InterruptedBeforeResult("interrupted before a result was written")
        raise LaunchError(f"no result written to {result_path}")
    result = json.loads(result_path.read_text())
    result.setdefault("faults", {}).update(coordinator_restarts=outages.restarts,
                                           coordinator_down_s=round(outages.seconds, 3))
    result.update(wall_s=round(time.monotonic() - started, 3), interrupted=interrupted, out=str(out),
                  restarts={c.name: c.restarts for c in group.children if c.restarts}, job_id=job_id,
                  resumed_from=str(restore_dir) if restore_dir else None)
    result_path.write_text(json.dumps(result, indent=2))
    if progress and result.get("straggler_summary"):
        progress("straggler summary (seconds; others waited: by the PSs' clocks):\n" + format_summary(result["straggler_summary"]))
    return result


def ps_command(config: JobConfig, optimizer, host: str, shard: int, ready: Path, checkpoints: Path, job_id: str) -> list[str]:
    """`star ps` arguments for one shard (no --restore-dir / --migrate-from: callers add them)."""
    return ["ps", "--ps-index", str(shard), "--num-ps", str(config.ps), "--host", host, "--port", "0",
            "--nonfinite", config.nonfinite, "--threads", str(config.threads_per_process),
            "--ready-file", str(ready), *_flag_args("optimizer.", vars(optimizer)), *_security_flags(config),
            "--checkpoint-dir", str(checkpoints), "--job-id", job_id,
            "--checkpoint-every-s", str(config.faults.checkpoint_every_s),
            "--checkpoint-every-updates", str(config.faults.checkpoint_every_updates),
            *(["--metrics-port", str(ps_metrics_port(config.metrics_port, shard))] if config.metrics_port is not None else [])]


def start_ps_daemons(group: ProcessGroup, ps_args: Callable[[int, Path], list[str]], shards, host: str,
                     startup_timeout_s: float, checkpoints: Path, restore_dir: Path | None = None) -> dict[int, tuple[Child, str]]:
    """Start a PS per shard (all at once), wait until each serves; shard -> (child, address)."""
    started = {}
    for i in shards:
        ready = group.log_dir / f"ps{i}.ready"
        ready.unlink(missing_ok=True)
        args = ps_args(i, ready)
        started[i] = (group.spawn(f"ps{i}", args + (["--restore-dir", str(restore_dir)] if restore_dir else [])), ready, args)
    served = {}
    for i, (child, ready, args) in started.items():
        port = _wait_ready(group, child, ready, startup_timeout_s)
        # A crashed PS comes back on the same port from its own newest checkpoint.
        child.restart_args = _with_flag(args, "--port", str(port)) + ["--restore-dir", str(checkpoints)]
        if (metrics_port := ready_metrics_port(ready)) is not None:  # a restarted PS serves /metrics where it did
            child.restart_args = _with_flag(child.restart_args, "--metrics-port", str(metrics_port))
        served[i] = (child, address(host, port))
    return served


def start_coordinator(group: ProcessGroup, config: JobConfig, host: str, ps_addresses: list[str], out: Path,
                      startup_timeout_s: float, extra: tuple[str, ...] = ()) -> str:
    """Start the coordinator (it sends the initial plan to every PS); returns its address once it serves.
    It is restarted after a crash like a PS, within the restart budget."""
    ready = group.log_dir / "coordinator.ready"
    ready.unlink(missing_ok=True)
    args = ["coordinator", "--ps-addresses", ",".join(ps_addresses), "--num-workers", str(config.workers),
            "--task", config.task, "--seed", str(config.seed), "--max-time-s", str(config.max_time_s),
            "--eval-period-s", str(config.eval_period_s), "--out", str(out), "--host", host,
            "--port", "0", "--ready-file", str(ready),
            *(["--target", str(config.target)] if config.target is not None else []),
            *(["--batch-size", str(config.batch_size)] if config.batch_size else []),
            *(["--metrics-port", str(config.metrics_port)] if config.metrics_port is not None else []),
            *([] if config.tensorboard else ["--no-tensorboard"]),
            *(["--max-workers", str(config.max_workers)] if config.max_workers else []),
            *_flag_args("control.", dataclasses.asdict(config.control)),
            *_flag_args("evaluation.", dataclasses.asdict(config.evaluation)),
            *_flag_args("placement.", dataclasses.asdict(config.placement)),
            *([] if config.stop_at_target else ["--no-stop-at-target"]),
            *_flag_args("plan.", vars(config.plan)), *_security_flags(config), *extra]
    child = group.spawn("coordinator", args)
    port = _wait_ready(group, child, ready, startup_timeout_s)
    # A crashed coordinator comes back on the same port and takes the job over (plan from the PSs).
    child.restart_args = _with_flag(args, "--port", str(port)) + ["--restore"]
    return address(host, port)


def uses_trees(config: JobConfig) -> bool:
    """Whether the job may aggregate in trees (configured, or as the traffic guard's relief): workers then serve relays."""
    traffic = config.control.traffic
    return config.plan.tree_fanout is not None or (traffic.relief == "tree" and traffic.pace)


def start_workers(group: ProcessGroup, config: JobConfig, worker_ids, coordinator_address: str,
                  relay_host: str | None = None) -> None:
    """Start these workers; each joins the coordinator (which tells it the PS addresses). With trees
    possible, each serves a relay on `relay_host` (default config.host) for tree children to reach it."""
    trace = config.trace
    relay = ["--relay-host", relay_host or config.host] if uses_trees(config) else []
    for w in worker_ids:
        args = ["worker", "--worker-id", str(w), "--num-workers", str(config.workers), "--task", config.task,
                "--seed", str(config.seed), "--coordinator", coordinator_address,
                "--threads", str(config.threads_per_process), "--transport", config.transport, "--wire", config.wire,
                *(["--batch-size", str(config.batch_size)] if config.batch_size else []),
                *(["--trace-path", str(trace.path), "--trace-stretch", str(trace.stretch)] if trace.path else []),
                *(["--trace-workers", trace.workers] if trace.path and trace.workers else []), *relay,
                *_security_flags(config)]
        group.spawn(f"worker{w}", args).restart_args = args  # a restarted worker rejoins with current parameters


def _with_flag(args: list[str], flag: str, value: str) -> list[str]:
    args = list(args)
    args[args.index(flag) + 1] = value
    return args


def resolve_checkpoint_dir(path: str | Path) -> Path:
    """`--resume` takes a job's OUT directory or its checkpoint directory."""
    path = Path(path)
    return path / "checkpoints" if (path / "checkpoints" / "manifest.json").exists() else path


def _job_identity(config: JobConfig, checkpoints: Path) -> tuple[str, Path | None]:
    """(job id, directory to restore from): a fresh id, or the resumed job's, after checking its checkpoint set."""
    from star.checkpoint import CheckpointError, JobManifest, latest_complete, write_manifest

    restore_dir = None
    job_id = secrets.token_hex(8)
    if config.resume:
        restore_dir = resolve_checkpoint_dir(config.resume)
        try:
            manifest, shards = latest_complete(restore_dir)
        except CheckpointError as exc:
            raise LaunchError(f"cannot resume: {exc}") from None
        if manifest.num_ps != config.ps:
            raise LaunchError(f"cannot resume: the checkpoint has {manifest.num_ps} PS shards, ps={config.ps}")
        if manifest.task and manifest.task != config.task:
            raise LaunchError(f"cannot resume: the checkpoint is of task {manifest.task!r}, task={config.task!r}")
        job_id = manifest.job_id
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
    outages: CoordinatorOutages | None = None,
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
                time.sleep(0.5)  # a crashed child explains more than a dead channel does
                crashed = group.crashed()
                if crashed is not None or outages.waiting(time.monotonic()):
                    continue
                raise LaunchError(f"coordinator stopped answering: {exc.code()}") from None
            outages.answered(time.monotonic())
            if progress and (time.monotonic() - last_print >= 1.0 or status.state == "finished"):
                progress(format_status(status))
                last_print = time.monotonic()
            if status.state == "finished":
                return
            time.sleep(0.25)
    finally:
        channel.close()


def format_status(status: pb.JobStatusReply) -> str:
    metric = f"{status.metric_name}={status.metric:.4f}" if status.has_metric else f"{status.metric_name}=—"
    reached = f" reached in {status.tta_s:.1f}s" if status.reached else ""
    return (
        f"[{status.elapsed_s:6.1f}s] {status.state:<8} mode={status.mode:<7} iter={status.max_iteration:<5} "
        f"{status.iterations_per_s:6.1f} it/s  version={status.version:<5} {metric}{reached}"
        + (f"  transport={status.transport}/{status.wire}" if status.transport else "")
    )
