"""Simulator configuration: frozen dataclasses, one documented field per line, units in names.

`SimConfig` nests the cost model, the convergence model and the real coordinator's
`ControlConfig`, so `star sim --control.decision_period_s 5` and a TOML `[cost]` table
work exactly like `star launch` flags do. A calibration file (written by `star
calibrate`) holds `[cost]` and `[convergence]` tables and is merged under the config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from star.config import ConfigError, PlanConfig, TraceConfig, check_worker_count, from_dict, load_toml, merge
from star.placement import PlacementConfig
from star.policy.controller import ControlConfig


def _require(condition: bool, name: str, value: object, reason: str) -> None:
    if not condition:
        raise ConfigError(name, value, reason)


@dataclass(frozen=True)
class CostConfig:
    """Seconds per worker iteration: compute x trace factor x AMP x batch share, plus transfers."""

    base_compute_s: float = 0.05  # forward+backward seconds of one iteration at base_batch, AMP off, factor 1
    base_batch: int = 64  # per-worker batch the base compute time was measured at
    amp_time_factor: float = 0.6  # compute time multiplier while AMP is on (0.6 = 1.67x faster)
    model_bytes: float = 500_000.0  # bytes pushed (and again pulled) per iteration
    bandwidth_bytes_per_s: float = 1.0e9  # per-host network bandwidth of a worker
    latency_s: float = 0.0  # fixed seconds per transfer (RPC latency), paid once by push and once by pull
    ps_update_s: float = 0.0  # PS CPU seconds to apply one update; a sync group's release waits for it
    overhead_s: float = 0.0  # other seconds per iteration (framework, reporting): neither compute nor transfer
    compute_noise_cv: float = 0.0  # coefficient of variation of lognormal per-iteration compute noise
    host_cores: float = 0.0  # CPU cores a host's workers share (0: each worker has its own, no contention)
    workers_per_host: int = 1  # workers 0..k-1 share host 0, k..2k-1 host 1, ... (with host_cores > 0)
    resize_s: float = 0.0  # extra seconds of a worker's first iteration at a new batch size
    fixed_compute_share: float = 0.0  # share of base_compute_s a step costs at any batch (a GPU's launches; 0: in proportion)
    report_step_cost: bool = True  # workers report that fixed part, as real ones measure it (False: the rule before 28 Nov)
    warmup_factor: float = 1.0  # compute multiplier of each worker's first iteration (real digits on 2 cores: 1.72-1.89)

    def __post_init__(self) -> None:
        for name in ("base_compute_s", "amp_time_factor", "model_bytes", "bandwidth_bytes_per_s", "warmup_factor"):
            value = getattr(self, name)
            _require(math.isfinite(value) and value > 0, f"cost.{name}", value, "must be > 0")
        for name in ("latency_s", "ps_update_s", "overhead_s", "compute_noise_cv", "host_cores", "resize_s"):
            value = getattr(self, name)
            _require(math.isfinite(value) and value >= 0, f"cost.{name}", value, "must be >= 0")
        _require(self.base_batch >= 1, "cost.base_batch", self.base_batch, "must be >= 1")
        _require(0 <= self.fixed_compute_share < 1, "cost.fixed_compute_share", self.fixed_compute_share, "must be in [0, 1)")
        _require(self.workers_per_host >= 1, "cost.workers_per_host", self.workers_per_host, "must be >= 1")

    @property
    def transfer_s(self) -> float:
        """Seconds of one push (a pull moves the same bytes)."""
        return self.latency_s + self.model_bytes / self.bandwidth_bytes_per_s


@dataclass(frozen=True)
class ConvergenceConfig:
    """Progress per applied update, and the metric curve it maps to."""

    updates_to_target: float = 100.0  # SSGD updates (N gradients of base_batch) the real task needs to reach target
    b_noise: float = 0.0  # gradient noise scale B_noise, in samples (0: every batch is equally efficient)
    staleness_penalty: float = 0.15  # an update s versions stale is worth 1/(1 + penalty x s)
    amp_update_worth: float = 1.0  # progress of a gradient computed under AMP, relative to one without (1: AMP costs nothing)
    initial_metric: float = 0.1  # metric before any update
    target_metric: float = 0.95  # metric reached exactly when progress == updates_to_target
    final_metric: float = 1.0  # metric approached as progress grows without bound
    eval_period_s: float = 0.5  # simulated evaluator period: TTA is the first evaluation at or past target (0: exact)
    noise_norm_dof: float = 20.0  # b_noise > 0: chi-square degrees of freedom of drawn gradient norms (lower: noisier PS estimate)

    def __post_init__(self) -> None:
        _require(self.updates_to_target > 0, "convergence.updates_to_target", self.updates_to_target, "must be > 0")
        _require(self.b_noise >= 0, "convergence.b_noise", self.b_noise, "must be >= 0")
        _require(math.isfinite(self.noise_norm_dof) and self.noise_norm_dof > 0, "convergence.noise_norm_dof",
                 self.noise_norm_dof, "must be > 0")
        _require(self.staleness_penalty >= 0, "convergence.staleness_penalty", self.staleness_penalty, "must be >= 0")
        _require(0 < self.amp_update_worth <= 1, "convergence.amp_update_worth", self.amp_update_worth, "must be in (0, 1]")
        _require(self.eval_period_s >= 0, "convergence.eval_period_s", self.eval_period_s, "must be >= 0")
        lo, hi = sorted((self.initial_metric, self.final_metric))
        _require(lo < self.target_metric < hi, "convergence.target_metric", self.target_metric,
                 f"must lie strictly between initial_metric and final_metric ({self.initial_metric}, {self.final_metric})")


Schedule = tuple[tuple[float, float], ...]  # (from this many seconds on, value), by time


def _numbers(text: str, name: str, count: int, low: float, what: str) -> tuple[float, ...]:
    """One number for all `count` items, or one per item ("a;b;c"), each > `low`."""
    try:
        values = tuple(float(v) for v in str(text).split(";"))
    except ValueError:
        raise ConfigError(name, text, "expected numbers separated by ';'") from None
    _require(len(values) in (1, count), name, text, f"one value, or one per {what} ({count})")
    _require(all(math.isfinite(v) and v > low for v in values), name, text, f"every value must be > {low:g}")
    return values * count if len(values) == 1 else values


def _schedule(entry: str, name: str, text: str) -> Schedule:
    """A constant "U" or steps "T:U,T:U" (U from T seconds on; 0 before the first step)."""
    if ":" not in entry:
        entry = f"0:{entry}"
    try:
        steps = tuple((float(t), float(u)) for t, u in (step.split(":") for step in entry.split(",")))
    except ValueError:
        raise ConfigError(name, text, "each host's entry is a number U or steps T:U,T:U") from None
    times = [t for t, _ in steps]
    _require(all(math.isfinite(t) and t >= 0 for t in times) and times == sorted(set(times)), name, text,
             "step times must be >= 0 and increasing")
    _require(all(math.isfinite(u) and u >= 0 for _, u in steps), name, text, "utilisations must be >= 0")
    return steps


@dataclass(frozen=True)
class PsHostsConfig:
    """PS shards on PS hosts whose NICs the job's pushes and pulls share with other traffic (star.sim.ps_hosts).
    With shards = 0 (the default) no PS host is modelled: no traffic guard, pacing or re-placement runs."""

    shards: int = 0  # PS shards (0: PS hosts not modelled)
    hosts: int = 2  # PS hosts ps0, ps1, ...; shards start where star.placement.place puts them (see `placement`)
    link_bytes_per_s: str = "1.25e9"  # each PS host's NIC link, bytes/s per direction: one value for all, or "a;b;..." per host
    background_util: str = "0"  # others' traffic on a PS NIC, share of its link: "U" or steps "T:U,T:U" (U from T s on); "a;b;.." per host
    shard_bytes: str | None = None  # bytes of one push of each shard, "a;b;..." (None: cost.model_bytes split evenly)
    cpu_count: int = 32  # cores of a PS host: re-placement predicts a shard's CPU cost with it (PS CPU load is not modelled)
    min_link_share: float = 0.05  # share of its link the job keeps on a PS host however busy (flows share a saturated NIC)
    move_s: float = 5.0  # seconds a shard move takes; it completes at the first decision at or after that
    move_slowdown: float = 2.0  # transfers to a shard take this many times as long while it moves (its state streams out)

    def __post_init__(self) -> None:
        _require(self.shards >= 0, "ps_hosts.shards", self.shards, "must be >= 0 (0: PS hosts not modelled)")
        _require(self.hosts >= 1, "ps_hosts.hosts", self.hosts, "must be >= 1")
        _require(self.cpu_count >= 1, "ps_hosts.cpu_count", self.cpu_count, "must be >= 1")
        _require(0 < self.min_link_share <= 1, "ps_hosts.min_link_share", self.min_link_share, "must be in (0, 1]")
        _require(math.isfinite(self.move_s) and self.move_s >= 0, "ps_hosts.move_s", self.move_s, "must be >= 0")
        _require(math.isfinite(self.move_slowdown) and self.move_slowdown >= 1, "ps_hosts.move_slowdown",
                 self.move_slowdown, "must be >= 1")
        self.links()
        self.backgrounds()
        if self.shard_bytes is not None:
            _require(self.shards >= 1, "ps_hosts.shard_bytes", self.shard_bytes, "needs ps_hosts.shards >= 1")
            self.shard_sizes(1.0)

    def links(self) -> tuple[float, ...]:
        """Per host: its link, bytes/s per direction."""
        return _numbers(self.link_bytes_per_s, "ps_hosts.link_bytes_per_s", self.hosts, 0.0, "host")

    def backgrounds(self) -> tuple[Schedule, ...]:
        """Per host: its background utilisation schedule."""
        entries = str(self.background_util).split(";")
        _require(len(entries) in (1, self.hosts), "ps_hosts.background_util", self.background_util,
                 f"one entry, or one per host ({self.hosts})")
        schedules = tuple(_schedule(e.strip(), "ps_hosts.background_util", self.background_util) for e in entries)
        return schedules * self.hosts if len(schedules) == 1 else schedules

    def shard_sizes(self, model_bytes: float) -> tuple[float, ...]:
        """Per shard: bytes of one push."""
        if self.shard_bytes is None:
            return (model_bytes / self.shards,) * self.shards
        return _numbers(self.shard_bytes, "ps_hosts.shard_bytes", self.shards, 0.0, "shard")


@dataclass(frozen=True)
class SimConfig:
    """One simulated job: workers, strategy, trace, cost and convergence models, controller."""

    workers: int = 4  # simulated workers
    iterations: int = 10_000  # stop once some worker has done this many iterations
    max_time_s: float = 1.0e9  # stop after this many simulated seconds
    stop_at_target: bool = True  # stop at the first evaluation at or past the target (like star launch)
    seed: int = 0  # seeds the compute noise
    out: str | None = None  # directory for result.json and curve.csv (None: write nothing)
    calibration: str | None = None  # TOML with [cost] and [convergence] tables (star calibrate); this config overrides it
    trace: TraceConfig = field(default_factory=TraceConfig)  # the slowdown trace the workers replay, as in star launch
    plan: PlanConfig = field(default_factory=PlanConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    convergence: ConvergenceConfig = field(default_factory=ConvergenceConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    ps_hosts: PsHostsConfig = field(default_factory=PsHostsConfig)  # PS shards, their hosts' NICs (default: not modelled)
    placement: PlacementConfig = field(default_factory=PlacementConfig)  # with ps_hosts: where shards start, re-placement (as star launch)

    def __post_init__(self) -> None:
        check_worker_count(self.workers)
        _require(self.iterations >= 1, "iterations", self.iterations, "must be >= 1")
        _require(self.max_time_s > 0, "max_time_s", self.max_time_s, "must be > 0")
        _require(self.control.decision_period_s > 0, "control.decision_period_s", self.control.decision_period_s, "must be > 0")
        if self.plan.k is not None:
            _require(self.plan.k <= self.workers, "plan.k", self.plan.k, f"must be <= workers ({self.workers})")
        self.plan.build(self.workers)


def sim_config(data: dict | None = None, calibration: str | None = None) -> SimConfig:
    """Build a SimConfig from plain data, with a calibration file's tables merged underneath."""
    data = dict(data or {})
    path = calibration or data.get("calibration")
    if path:
        calibrated = load_toml(path)
        base = {k: calibrated[k] for k in ("cost", "convergence") if k in calibrated}
        data = merge(base, data)
        data["calibration"] = str(path)
    return from_dict(SimConfig, data)
