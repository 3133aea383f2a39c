"""Frozen, documented dataclass configs, loadable from TOML and mapped onto CLI flags.

Every field is checked at start (`__post_init__`), and a bad value fails with the
field's dotted name (`plan.k`, `optimizer.lr`), before any process is spawned.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from star.ddp_rules import DDP_MODE, ddp_refusal
from star.devices import DEVICE_KINDS
from star.errors import ConfigError
from star.flat import WIRE_ELEMENT_BYTES
from star.limits import MAX_BATCH_SIZE, MAX_WORKER_IDS
from star.placement import PlacementConfig
from star.plan import PlanError, SyncPlan, parse_groups, plan_for_mode
from star.policy.controller import STRATEGIES, ControlConfig, initial_mode
from star.tta import EvalConfig

OPTIMIZERS = ("sgd", "adam", "adamw")
ASYNC_MOMENTUM_RULES = ("matched", "fixed")
NONFINITE_POLICIES = ("reject", "skip")
TRANSPORTS = ("auto", "shm", "socket", "grpc")  # how worker<->PS payloads move (star/shm.py, star/rpc/socket_channel.py, star/rpc/ps_client.py)
WIRES = tuple(WIRE_ELEMENT_BYTES)  # payload dtypes on the gRPC wire


def check_transport_fields(transport: str, wire: str) -> None:
    """The `transport` and `wire` fields of a job or worker config."""
    _require(transport in TRANSPORTS, "transport", transport, f"one of {TRANSPORTS}")
    _require(wire in WIRES, "wire", wire, f"one of {WIRES}")


def check_worker_count(workers: int, worker_id: int | None = None) -> None:
    """A job's worker count (and, for one worker, its id in 0..workers-1): one rule for every config that holds them."""
    _require(workers >= 1, "workers", workers, "must be >= 1")
    if worker_id is not None:
        _require(0 <= worker_id < workers, "worker_id", worker_id, f"must be in 0..{workers - 1} (workers={workers})")


def _require(condition: bool, field_name: str, value: Any, reason: str) -> None:
    if not condition:
        raise ConfigError(field_name, value, reason)


@dataclass(frozen=True)
class OptimizerConfig:
    """The torch.optim optimizer each PS runs over its shard. None = the task's default."""

    name: str | None = None  # sgd | adam | adamw; default the task's
    lr: float | None = None  # learning rate; default the task's
    momentum: float | None = None  # SGD momentum; default the task's
    nesterov: bool = False  # SGD Nesterov momentum (needs momentum > 0)
    weight_decay: float = 0.0  # L2 (SGD, Adam) or decoupled (AdamW) weight decay
    beta1: float = 0.9  # Adam/AdamW first-moment decay
    beta2: float = 0.999  # Adam/AdamW second-moment decay
    eps: float = 1e-8  # Adam/AdamW denominator epsilon
    # SGD momentum while a plan's groups update on their own (asgd, ssp, grouped, exclude): matched (lowered so
    # that with the momentum asynchrony adds the horizon stays the configured one; star.optim.matched_momentum)
    # | fixed (the configured momentum under every plan)
    async_momentum: str = "matched"

    def __post_init__(self) -> None:
        _require(self.name is None or self.name in OPTIMIZERS, "optimizer.name", self.name, f"one of {OPTIMIZERS}")
        _require(self.lr is None or (math.isfinite(self.lr) and self.lr > 0), "optimizer.lr", self.lr, "must be > 0")
        _require(self.momentum is None or 0 <= self.momentum < 1, "optimizer.momentum", self.momentum, "in [0, 1)")
        _require(self.weight_decay >= 0, "optimizer.weight_decay", self.weight_decay, "must be >= 0")
        _require(0 <= self.beta1 < 1, "optimizer.beta1", self.beta1, "in [0, 1)")
        _require(0 <= self.beta2 < 1, "optimizer.beta2", self.beta2, "in [0, 1)")
        _require(self.eps > 0, "optimizer.eps", self.eps, "must be > 0")
        _require(self.async_momentum in ASYNC_MOMENTUM_RULES, "optimizer.async_momentum", self.async_momentum,
                 f"one of {ASYNC_MOMENTUM_RULES}")

    def resolved(self, name: str, lr: float, momentum: float) -> "OptimizerConfig":
        """Fill unset fields with a task's defaults."""
        resolved = dataclasses.replace(
            self,
            name=self.name or name,
            lr=self.lr if self.lr is not None else lr,
            momentum=self.momentum if self.momentum is not None else momentum,
        )
        _require(
            not resolved.nesterov or (resolved.name == "sgd" and (resolved.momentum or 0) > 0),
            "optimizer.nesterov",
            True,
            "needs optimizer.name='sgd' and momentum > 0",
        )
        return resolved


@dataclass(frozen=True)
class PlanConfig:
    """The synchronisation mode a job starts in (see star.plan)."""

    mode: str = "ssgd"  # strategy: ssgd | asgd | kofn | grouped | ssp (fixed plans) | exclude | amp | batch | auto | ddp (PyTorch DDP baseline, no PSs)
    k: int | None = None  # k-of-N quorum; default N-1
    groups: str | None = None  # grouped mode: "0,1;2,3"; default two halves
    staleness: int = 2  # SSP staleness bound (pushes ahead of the slowest)
    late_policy: str = "apply"  # k-of-N late gradients: apply (staleness recorded) | drop
    tree_fanout: int | None = None  # tree aggregation from the start: parents sum this many workers' gradients (full-sync groups)

    def __post_init__(self) -> None:
        _require(self.mode in STRATEGIES + (DDP_MODE,), "plan.mode", self.mode, f"one of {', '.join(STRATEGIES + (DDP_MODE,))}")
        _require(self.k is None or self.k >= 1, "plan.k", self.k, "must be >= 1")
        _require(self.staleness >= 0, "plan.staleness", self.staleness, "must be >= 0")
        _require(self.late_policy in ("apply", "drop"), "plan.late_policy", self.late_policy, "apply | drop")
        _require(self.tree_fanout is None or self.tree_fanout >= 2, "plan.tree_fanout", self.tree_fanout, "must be >= 2")
        # Each shape option belongs to the one fixed mode that reads it (`build`); elsewhere it would be ignored.
        for name, value, default, owner in (("k", self.k, None, "kofn"), ("groups", self.groups, None, "grouped"),
                                            ("staleness", self.staleness, 2, "ssp")):
            _require(value == default or self.mode in (owner, DDP_MODE), f"plan.{name}", value,
                     f"only --mode {owner} uses it (this job's mode is {self.mode!r})")
        if self.groups is not None:
            try:
                parse_groups(self.groups)
            except PlanError as exc:
                raise ConfigError("plan.groups", self.groups, str(exc)) from None

    def build(self, num_workers: int, epoch: int = 1) -> SyncPlan:
        from star.plan import LatePolicy

        _require(self.mode != DDP_MODE, "plan.mode", self.mode, "the DDP baseline has no sync plan; only `star launch` runs it")
        try:
            plan = plan_for_mode(
                initial_mode(self.mode), num_workers, k=self.k, groups=self.groups, staleness=self.staleness, epoch=epoch
            )
        except PlanError as exc:
            raise ConfigError(f"plan.{_plan_field(str(exc))}", getattr(self, _plan_field(str(exc)), None), str(exc))
        if self.late_policy != plan.late_policy.value:
            plan = dataclasses.replace(plan, late_policy=LatePolicy(self.late_policy))
        return dataclasses.replace(plan, tree_fanout=self.tree_fanout) if self.tree_fanout else plan


def _plan_field(message: str) -> str:
    for name in ("k", "groups", "staleness", "mode"):
        if message.startswith(name):
            return name
    return "mode"


@dataclass(frozen=True)
class TraceConfig:
    """A slowdown trace replayed by the workers (see star.traces)."""

    path: str | None = None  # Alibaba PAI CSV or the project's iteration,worker,factor CSV
    workers: str | None = None  # trace workers for run workers 0..N-1, e.g. "3,4,5,6"; default the first N
    stretch: float = 1.0  # multiplies trace iteration numbers (0.1 plays 3,000 iterations over 300)

    def __post_init__(self) -> None:
        _require(self.stretch > 0 and math.isfinite(self.stretch), "trace.stretch", self.stretch, "must be > 0")
        if self.path is not None:
            _require(not Path(self.path).is_dir(), "trace.path", self.path, "is a directory, not a trace file")
            _require(Path(self.path).is_file(), "trace.path", self.path, "no such file")
        else:  # a mapping or stretch with nothing to replay is a forgotten --trace, not a wish
            _require(self.workers is None, "trace.workers", self.workers, "needs trace.path (--trace FILE)")
            _require(self.stretch == 1.0, "trace.stretch", self.stretch, "needs trace.path (--trace FILE)")


@dataclass(frozen=True)
class SecurityConfig:
    """Who may talk to a job's daemons. The job token itself never appears in a config or a flag."""

    token_file: str | None = None  # file holding the job token; else the STAR_JOB_TOKEN environment variable
    tls_cert_file: str | None = None  # PEM certificate this process serves, and presents to servers that want client certs
    tls_key_file: str | None = None  # PEM private key of tls_cert_file
    tls_ca_file: str | None = None  # PEM CA bundle: clients verify servers with it (TLS on when set); mTLS servers verify clients
    tls_require_client_cert: bool = False  # mutual TLS: servers refuse clients without a certificate signed by tls_ca_file
    tls_server_name: str | None = None  # name to check in servers' certificates instead of the dialled host

    def __post_init__(self) -> None:
        for name in ("token_file", "tls_cert_file", "tls_key_file", "tls_ca_file"):
            path = getattr(self, name)
            if path is not None:
                _require(Path(path).is_file(), f"security.{name}", path, "no such file")
        _require(
            (self.tls_cert_file is None) == (self.tls_key_file is None),
            "security.tls_key_file",
            self.tls_key_file,
            "tls_cert_file and tls_key_file go together",
        )
        if self.tls_require_client_cert:
            _require(self.tls_ca_file is not None, "security.tls_ca_file", None, "tls_require_client_cert needs a CA to verify clients")
            _require(self.tls_cert_file is not None, "security.tls_cert_file", None, "tls_require_client_cert needs a server certificate")


@dataclass(frozen=True)
class FaultConfig:
    """Checkpoints and restarts: what a job does when one of its processes dies."""

    checkpoint_every_s: float = 10.0  # each PS checkpoints its shard this often (0 = not by time); always at shutdown
    checkpoint_every_updates: int = 0  # ... and/or every this many updates (0 = not by count)
    checkpoint_max_write_share: float = 0.1  # ... but spaced so that writing takes at most this share of the time (1: no floor)
    checkpoint_dir: str | None = None  # default OUT/checkpoints
    max_restarts: int = 3  # a crashed worker, PS or coordinator is restarted (a PS from its last checkpoint, the coordinator from the PSs) this many times per job

    def __post_init__(self) -> None:
        _require(self.checkpoint_every_s >= 0, "faults.checkpoint_every_s", self.checkpoint_every_s, "must be >= 0")
        _require(self.checkpoint_every_updates >= 0, "faults.checkpoint_every_updates", self.checkpoint_every_updates, "must be >= 0")
        _require(0 < self.checkpoint_max_write_share <= 1, "faults.checkpoint_max_write_share", self.checkpoint_max_write_share,
                 "must be in (0, 1]")
        _require(self.max_restarts >= 0, "faults.max_restarts", self.max_restarts, "must be >= 0")


@dataclass(frozen=True)
class NodeConfig:
    """One host of a multi-host job (`star node`, started by torchrun or srun); `star launch` ignores it."""

    rank: int | None = None  # this node, 0..nodes-1 (0 runs the coordinator); default torchrun's GROUP_RANK or Slurm's SLURM_NODEID
    nodes: int | None = None  # how many nodes; default GROUP_WORLD_SIZE or SLURM_NNODES
    store: str | None = None  # rendezvous store host:port; default MASTER_ADDR:MASTER_PORT (torchrun's own store)
    advertise: str | None = None  # address this node's daemons bind and announce; default the one that routes to the store
    ps_ranks: str | None = None  # nodes that may host PS shards, e.g. "0,2"; default every node
    sample_s: float = 2.0  # seconds every node samples its resources before placement
    rendezvous_timeout_s: float = 300.0  # how long nodes wait for each other at start

    def __post_init__(self) -> None:
        _require(self.rank is None or self.rank >= 0, "node.rank", self.rank, "must be >= 0")
        _require(self.nodes is None or self.nodes >= 1, "node.nodes", self.nodes, "must be >= 1")
        _require(self.rank is None or self.nodes is None or self.rank < self.nodes, "node.rank", self.rank,
                 f"must be in 0..node.nodes-1 (node.nodes={self.nodes})")
        _require(self.sample_s > 0, "node.sample_s", self.sample_s, "must be > 0")
        _require(self.rendezvous_timeout_s > 0, "node.rendezvous_timeout_s", self.rendezvous_timeout_s, "must be > 0")
        if self.ps_ranks is not None:
            try:
                ranks = [int(r) for r in self.ps_ranks.split(",") if r.strip()]
            except ValueError:
                ranks = []
            _require(bool(ranks) and min(ranks) >= 0, "node.ps_ranks", self.ps_ranks, "a comma-separated list of node ranks")

    def ps_rank_set(self, nodes: int) -> list[int]:
        """The nodes that may host PS shards, checked against the node count."""
        if self.ps_ranks is None:
            return list(range(nodes))
        ranks = sorted({int(r) for r in self.ps_ranks.split(",") if r.strip()})
        _require(max(ranks) < nodes, "node.ps_ranks", self.ps_ranks, f"ranks must be < nodes ({nodes})")
        return ranks


@dataclass(frozen=True)
class RunSettings:
    """What a job and its coordinator both are: declared once, here, and inherited by JobConfig and
    by the coordinator's config (star.coordinator_config), which a coordinator started by hand
    takes as its own flags and a launched one gets from the job (star.child_configs)."""

    task: str = "digits"  # built-in task name or "module:function"
    workers: int = 4  # number of worker processes (a coordinator: workers expected to join)
    max_workers: int = 0  # elastic: workers with ids up to max_workers-1 may join mid-run and are admitted into the plan (0: none)
    out: str = "runs/latest"  # output directory (result.json, curve.csv, events.jsonl, logs/)
    seed: int = 0  # model init and data shuffling
    batch_size: int | None = None  # per worker per iteration; default the task's
    target: float | None = None  # metric target; default the task's
    max_time_s: float = 120.0  # stop training after this many seconds even if the target is not reached
    eval_period_s: float = 0.5  # evaluator period when evaluation.every_updates is 0
    evaluation: EvalConfig = field(default_factory=EvalConfig)  # evaluate at fixed versions; target on a smoothed metric
    stop_at_target: bool = True  # end the job as soon as the target is reached
    host: str = "127.0.0.1"  # address every daemon binds to
    plan: PlanConfig = field(default_factory=PlanConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)  # job token file and TLS (a token is generated when none is given)
    placement: PlacementConfig = field(default_factory=PlacementConfig)  # where PS shards go across hosts (star node), re-placement
    metrics_port: int | None = None  # Prometheus /metrics: coordinator at P, PS i at P+1+i (0: free ports; URLs in OUT/metrics.json)
    tensorboard: bool = True  # write TensorBoard scalars to OUT/tensorboard/
    device: str = "cpu"  # where workers, DDP ranks and the evaluator compute: cpu | cuda (GPUs shared round-robin by worker id)

    def __post_init__(self) -> None:
        check_worker_count(self.workers)
        # A PS accepts worker ids below MAX_WORKER_IDS: more would fail only once the coordinator sets its first plan.
        _require(self.workers <= MAX_WORKER_IDS, "workers", self.workers, f"must be <= {MAX_WORKER_IDS}")
        _require(self.max_workers == 0 or self.workers <= self.max_workers <= MAX_WORKER_IDS, "max_workers",
                 self.max_workers, f"must be 0 (not elastic) or in workers..{MAX_WORKER_IDS} (workers={self.workers})")
        _require(self.batch_size is None or 1 <= self.batch_size <= MAX_BATCH_SIZE, "batch_size", self.batch_size,
                 f"must be in 1..{MAX_BATCH_SIZE}")
        _require(self.target is None or math.isfinite(self.target), "target", self.target, "must be a finite number")
        _require(self.max_time_s > 0, "max_time_s", self.max_time_s, "must be > 0")
        _require(self.eval_period_s > 0, "eval_period_s", self.eval_period_s, "must be > 0")
        _require(self.device in DEVICE_KINDS, "device", self.device, f"one of {', '.join(DEVICE_KINDS)}")


@dataclass(frozen=True)
class JobConfig(RunSettings):
    """One training job as `star launch` runs it."""

    ps: int = 2  # number of parameter-server processes (shards)
    threads_per_process: int = 1  # torch intra-op threads in each worker / PS
    nonfinite: str = "reject"  # PS policy for NaN/Inf gradients: reject | skip
    transport: str = "auto"  # worker<->PS payloads: auto (shared memory where co-located, else the PS's socket channel, else gRPC) | shm | socket | grpc
    wire: str = "float32"  # gRPC payload dtype for gradients and parameters: float32 | bfloat16 (PS master stays fp32)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    node: NodeConfig = field(default_factory=NodeConfig)  # multi-host jobs: this node's rank, the rendezvous store
    resume: str | None = None  # continue a stopped job from its last complete checkpoint set (its OUT or checkpoint dir)
    overwrite: bool = False  # `star launch` into an OUT that holds an earlier run's result or checkpoints replaces them (else refused)

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.ps >= 1, "ps", self.ps, "must be >= 1")
        _require(self.threads_per_process >= 1, "threads_per_process", self.threads_per_process, "must be >= 1")
        _require(self.nonfinite in NONFINITE_POLICIES, "nonfinite", self.nonfinite, f"one of {NONFINITE_POLICIES}")
        check_transport_fields(self.transport, self.wire)
        if self.plan.mode == DDP_MODE:
            refusal = ddp_refusal(non_defaults(self))
            if refusal is not None:
                raise ConfigError(*refusal)
        else:
            if self.plan.k is not None:
                _require(self.plan.k <= self.workers, "plan.k", self.plan.k, f"must be <= workers ({self.workers})")
            self.plan.build(self.workers)  # fails early on groups that do not match the workers
        _require(self.metrics_port is None or 0 <= self.metrics_port <= 65535 - self.ps - 1, "metrics_port",
                 self.metrics_port, f"must be 0 (free ports) or a port with room for {self.ps} PS ports above it")
        if self.resume is not None:
            _require(Path(self.resume).is_dir(), "resume", self.resume, "no such directory")
        # The job's own daemons are each other's TLS clients: they need the CA that signed the certificate.
        _require(self.security.tls_cert_file is None or self.security.tls_ca_file is not None, "security.tls_ca_file", None,
                 "a job serving TLS (security.tls_cert_file) needs the CA its daemons verify each other with")


# ------------------------------------------------------------------ dict / TOML / CLI mapping


def from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Build a (nested) config dataclass from plain data, naming unknown or mistyped fields."""
    if not isinstance(data, dict):
        raise ConfigError(prefix.rstrip(".") or cls.__name__, data, "expected a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in fields:
            raise ConfigError(prefix + key, value, f"unknown field; known: {', '.join(fields)}")
        kwargs[name] = _coerce(hints[name], value, prefix + name)
    return cls(**kwargs)


def field_value(cls: type, name: str, value: Any) -> Any:
    """`value` (a flag's text, say) as top-level field `name` of `cls` holds it: from_dict's coercion for one field."""
    return _coerce(typing.get_type_hints(cls)[name], value, name)


def _coerce(hint: Any, value: Any, dotted: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, dotted + ".")
    if typing.get_origin(hint) is tuple:
        items = value.split(",") if isinstance(value, str) else list(value)
        return tuple(str(item).strip() for item in items if str(item).strip())
    allowed = _base_types(hint)
    if value is None:
        if type(None) in allowed:
            return None
        raise ConfigError(dotted, value, "must be set")
    if bool in allowed:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(dotted, value, "expected true or false")
    for kind in (int, float, str):
        if kind in allowed:
            try:
                if kind is int and isinstance(value, float) and not value.is_integer():
                    raise ValueError
                return kind(value)
            except (TypeError, ValueError):
                raise ConfigError(dotted, value, f"expected {kind.__name__}") from None
    return value


def _base_types(hint: Any) -> tuple[type, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(typing.get_args(hint))
    return (hint,)


def non_defaults(config: Any) -> dict[str, Any]:
    """The fields of a (nested) config dataclass that differ from their defaults, as a nested dict."""
    changed: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            inner = non_defaults(value)
            if inner:
                changed[f.name] = inner
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if value != default:
            changed[f.name] = value
    return changed


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def load_toml(path: str | Path, field_name: str = "config") -> dict[str, Any]:
    """A TOML file's tables; a missing or malformed file fails naming `field_name`, the flag that gave it."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(field_name, str(path), "no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(field_name, str(path), f"not valid TOML: {exc}") from None


def to_toml(config: Any) -> str:
    """Write a config back as TOML: scalars first, then one [table] per nested config (dotted names)."""
    lines: list[str] = []
    _toml_table(to_dict(config), "", lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_table(table: dict[str, Any], name: str, lines: list[str]) -> None:
    if name:
        lines.append(f"\n[{name}]")
    lines.extend(f"{k} = {_toml_value(v)}" for k, v in table.items() if v is not None and not isinstance(v, dict))
    for key, value in table.items():
        if isinstance(value, dict):
            _toml_table(value, f"{name}.{key}" if name else key, lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge two plain dicts (CLI flags over a TOML file)."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def dotted_to_nested(flat: dict[str, Any]) -> dict[str, Any]:
    """{'plan.mode': 'kofn'} -> {'plan': {'mode': 'kofn'}}."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the trailing comment that documents it in this file (for --help)."""
    return dict(_field_docs(cls))


@functools.lru_cache(maxsize=None)
def _field_docs(cls: type) -> dict[str, str]:
    """Read once per class: parsing the source is most of what building the `star` parser costs."""
    import inspect

    docs: dict[str, str] = {}
    bases = [base for base in reversed(cls.__mro__) if dataclasses.is_dataclass(base)]  # a subclass's comment wins
    for line in (line for base in bases for line in inspect.getsource(base).splitlines()):
        stripped = line.strip()
        if ":" in stripped and "#" in stripped and not stripped.startswith(("#", "def", '"')):
            name = stripped.split(":", 1)[0].strip()
            docs[name] = stripped.split("#", 1)[1].strip()
    return docs
