"""The coordinator daemon's configuration: its own module, so that configs can be built and tested without the daemon.

Most fields mirror the job's (star.config.JobConfig) because `star coordinator` is also run by hand
with its own flags; star.child_configs.coordinator_config is the one place that maps a job onto it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from star.config import PlanConfig, SecurityConfig
from star.placement import PlacementConfig
from star.policy.controller import ControlConfig
from star.tta import EvalConfig


@dataclass(frozen=True)
class CoordinatorConfig:
    """One coordinator process."""

    ps_addresses: tuple[str, ...] = ()  # every PS, in ps_index order
    num_workers: int = 1  # workers expected to join
    task: str = "digits"  # built-in task name or module:function
    seed: int = 0  # the job's seed (model init)
    target: float | None = None  # default the task's
    plan: PlanConfig = field(default_factory=PlanConfig)
    max_time_s: float = 120.0  # training seconds (from the first update) before the job stops
    startup_timeout_s: float = 180.0  # the first update must happen within this
    eval_period_s: float = 0.5  # evaluation period when evaluation.every_updates is 0
    evaluation: EvalConfig = field(default_factory=EvalConfig)  # fixed-version evaluation, smoothed target
    stop_at_target: bool = True  # end the job as soon as the target is reached
    out: str = "runs/latest"  # output directory (result.json, curve.csv, events.jsonl)
    host: str = "127.0.0.1"  # bind address
    port: int = 0  # 0 = an ephemeral port (written to the ready file)
    report_window: int = 20  # per-worker reports kept for statistics
    batch_size: int | None = None  # the workers' even per-worker batch; default the task's
    control: ControlConfig = field(default_factory=ControlConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)  # job token file and TLS (server and PS channels)
    placement: PlacementConfig = field(default_factory=PlacementConfig)  # PS re-placement when a PS host stays saturated
    placement_file: str | None = None  # JSON of the start-up placement decision (star node writes it): logged as an event
    metrics_port: int | None = None  # serve Prometheus /metrics on this port (0: a free one; None: not at all)
    tensorboard: bool = True  # write TensorBoard scalars to OUT/tensorboard/
    max_workers: int = 0  # elastic: ids num_workers..max_workers-1 may join mid-run and are admitted into the plan (0: none)
    restore: bool = False  # restarted after a crash: plan from the PSs, policy state from OUT/coordinator_state.json, curve from OUT/curve.csv
