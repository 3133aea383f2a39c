"""Each child's config, derived from the job's by a pure function: `ps_config`, `worker_config`, `coordinator_config`.

A launcher hands every child the job's config file and its role and index (`star ps --job
OUT/config.toml --ps-index 1 ...`); the child loads the job and calls the function here. So
the mapping from a job to its daemons is written once, and, being pure (no I/O), is tested
without processes. The keyword-only arguments are the runtime facts a job file cannot hold
(addresses, ports, the job id, where checkpoints go); `star ps|worker|coordinator --job` takes
them as the flags of the same names. The job token is never one of them: a child reads it
from the environment its launcher sets.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

from star.config import ConfigError, JobConfig, RunSettings, SecurityConfig
from star.coordinator_config import CoordinatorConfig
from star.ps_server.config import PSConfig
from star.worker.config import WorkerConfig

if TYPE_CHECKING:
    from star.tasks.base import Task


def child_security(job: JobConfig) -> SecurityConfig:
    """The job's TLS settings without its token file: children get the token through the environment
    (STAR_JOB_TOKEN, set by the launcher), the one channel that also carries a generated token."""
    return dataclasses.replace(job.security, token_file=None)


def job_as_run(job: JobConfig, task: Task) -> JobConfig:
    """The job with what it leaves to its task filled in (the optimizer), as a launcher writes the job
    file: the task is loaded once, by the launcher, and no PS loads it (its data) for its defaults."""
    return dataclasses.replace(job, optimizer=job.optimizer.resolved(task.default_optimizer, task.default_lr,
                                                                     task.default_momentum))


def ps_metrics_port(port: int | None, ps_index: int) -> int | None:
    """PS i serves /metrics at P+1+i (0 stays 0: a free port)."""
    if port is None:
        return None
    return 0 if port == 0 else port + 1 + ps_index


def uses_trees(job: JobConfig) -> bool:
    """Whether the job may aggregate in trees (configured, or as the traffic guard's relief): workers then serve relays."""
    traffic = job.control.traffic
    return job.plan.tree_fanout is not None or (traffic.relief == "tree" and traffic.pace)


def ps_config(job: JobConfig, *, ps_index: int, host: str, job_id: str, checkpoint_dir: str, port: int = 0,
              metrics_port: int | None = None, restore_dir: str | None = None, resumed: bool = False,
              migrate_from: str | None = None) -> PSConfig:
    """PS `ps_index` of the job (shard `ps_index` of `job.ps`), which runs `job.optimizer`: it must
    be complete (`job_as_run` fills it from the task's defaults; only the task knows them).

    Runtime facts: `host`, the address it binds (on many hosts, its node's); `job_id`, stamped
    into its checkpoints so that jobs never mix; `checkpoint_dir`, where they go (one per node);
    `port` (0: a free one; a restart passes the one it served at); `metrics_port` (None: the
    job's P+1+i; a restart passes the one it served at); `restore_dir` (a restart or a resumed
    job starts from its newest checkpoint there); `resumed` (that job was stopped and is started
    again: its clock waits for the first update); `migrate_from` (a live move takes the shard
    over from the PS at this address).
    """
    for name in ("name", "lr"):
        if getattr(job.optimizer, name) is None:
            raise ConfigError(f"optimizer.{name}", None, "a PS needs it in the job; job_as_run fills it from the task's defaults")
    return PSConfig(
        ps_index=ps_index, num_ps=job.ps, host=host, port=port, optimizer=job.optimizer, nonfinite=job.nonfinite,
        threads=job.threads_per_process, security=child_security(job), checkpoint_dir=checkpoint_dir,
        checkpoint_every_updates=job.faults.checkpoint_every_updates, checkpoint_every_s=job.faults.checkpoint_every_s,
        checkpoint_max_write_share=job.faults.checkpoint_max_write_share,
        job_id=job_id, restore_dir=restore_dir, resumed=resumed, migrate_from=migrate_from,
        metrics_port=ps_metrics_port(job.metrics_port, ps_index) if metrics_port is None else metrics_port)


def worker_config(job: JobConfig, *, worker_id: int, coordinator: str, relay_host: str) -> WorkerConfig:
    """Worker `worker_id` of the job: the job's task, seed, batch size, trace, data path and TLS.

    Runtime facts: `coordinator`, the address it joins (the coordinator tells it where the PSs
    are); `relay_host`, the address of the host it runs on, where it serves a tree relay when
    the job may aggregate in trees (and only then).
    """
    if not 0 <= worker_id < job.workers:
        raise ConfigError("worker_id", worker_id, f"must be in 0..workers-1 (workers={job.workers}); a newcomer "
                                                  "beyond them (max_workers) is started with star worker's own flags")
    return WorkerConfig(
        worker_id=worker_id, workers=job.workers, task=job.task, seed=job.seed, batch_size=job.batch_size,
        coordinator=coordinator, trace=job.trace, threads=job.threads_per_process, security=child_security(job),
        relay_host=relay_host if uses_trees(job) else None, transport=job.transport, wire=job.wire,
        device=job.device, measure_step_cost=sizes_batches(job))


def sizes_batches(job: JobConfig) -> bool:
    """Whether the job's coordinator may size batches by speed (and so reads each worker's step cost)."""
    if job.control.batch is not None:
        return job.control.batch
    return job.plan.mode in ("batch", "auto")  # star.policy.controller.strategy_switches


def coordinator_config(job: JobConfig, *, ps_addresses: Sequence[str], host: str, port: int = 0, restore: bool = False,
                       placement_file: str | None = None) -> CoordinatorConfig:
    """The job's coordinator (and evaluator), writing to the job's OUT.

    Runtime facts: `ps_addresses`, where each shard is served, in shard order; `host`, the address
    it binds; `port` (0: a free one; a restart passes the one it served at); `restore` (a restart
    takes the job over from the PSs and its state file); `placement_file` (on many hosts, node 0's
    start-up placement, logged as an event).
    """
    if len(ps_addresses) != job.ps:
        raise ConfigError("ps_addresses", ",".join(ps_addresses), f"needs one address per PS (ps={job.ps})")
    shared = {f.name: getattr(job, f.name) for f in dataclasses.fields(RunSettings)}  # every setting the two share
    return CoordinatorConfig(
        **{**shared, "host": host, "security": child_security(job)}, ps_addresses=tuple(ps_addresses),
        port=port, placement_file=placement_file, restore=restore)
