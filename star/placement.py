"""Where parameter-server shards go: by CPU and NIC headroom, never onto a saturated host.

Why (STAR): a PS shard is a traffic hub. Every worker pushes and pulls it every
iteration, so a shard on a host whose NIC or CPU is already busy (a slow link, a heavy
co-located job) slows *every* worker, a straggler no synchronisation mode can hide.

All of this module is pure: host states in, an assignment with its reasons out.

- `host_state` turns a `HostSample` into utilisations (0..1): CPU now, CPU of
  co-located (non-job) processes, and the job NIC's busier direction over its link.
- `place` assigns shards greedily, biggest first, each to the eligible host whose
  *predicted* bottleneck utilisation after taking the shard is lowest (a shard adds
  its traffic to the host's NIC and its handling cost to the host's CPU); hosts within
  `tie_util` of the lowest count as equal, and among them the one holding the fewest
  shard bytes wins, so comparable hosts share the shards evenly. Hosts that are
  saturated now or run heavy co-located jobs are skipped, with the reason; if every
  host is, all are used.
- `round_robin` is the naive baseline (shard i on host i mod H).
- `ReplacementPolicy` proposes moving a shard when its host stays saturated for
  `persist_n` consecutive decisions and another host would be clearly less loaded.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from star.errors import ConfigError
from star.resources import HostSample

STRATEGIES = ("headroom", "round_robin")


@dataclass(frozen=True)
class PlacementConfig:
    """PS placement and re-placement settings."""

    strategy: str = "headroom"  # headroom | round_robin (the naive baseline)
    saturated_util: float = 0.9  # CPU or NIC utilisation (0..1) at which a host counts as saturated
    heavy_colocated_cpu: float = 0.5  # share of a host's CPU used by other jobs that makes it unfit for a PS
    expected_iterations_per_s: float = 4.0  # per worker: predicts a shard's traffic before anything is measured
    unknown_link_bytes_per_s: float = 1.25e9  # links of unknown speed count as 10 Gbit/s
    ps_cpu_s_per_gb: float = 2.0  # core-seconds a PS spends per GB it receives and sends (receive, sum, step, serve)
    tie_util: float = 0.1  # hosts whose predicted utilisation is within this of the best count as equal: fewest shard bytes wins
    cpu_aware: bool = True  # False: place by NIC alone (hosts that share one CPU, e.g. network namespaces of one machine)
    replace: bool = True  # move a shard off a host that stays saturated
    persist_n: int = 3  # consecutive saturated decisions before a move
    move_margin: float = 0.2  # the new host's predicted utilisation must be this much (absolute) lower
    move_cooldown_s: float = 60.0  # at most one move per this many seconds

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError("placement.strategy", self.strategy, f"one of {', '.join(STRATEGIES)}")
        for name in ("saturated_util", "heavy_colocated_cpu", "move_margin", "tie_util"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ConfigError(f"placement.{name}", value, "must be in (0, 1]")
        for name in ("expected_iterations_per_s", "unknown_link_bytes_per_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"placement.{name}", value, "must be > 0")
        if self.ps_cpu_s_per_gb < 0:
            raise ConfigError("placement.ps_cpu_s_per_gb", self.ps_cpu_s_per_gb, "must be >= 0")
        if self.persist_n < 1:
            raise ConfigError("placement.persist_n", self.persist_n, "must be >= 1")
        if self.move_cooldown_s < 0:
            raise ConfigError("placement.move_cooldown_s", self.move_cooldown_s, "must be >= 0")


@dataclass(frozen=True)
class HostState:
    """One host as placement sees it: utilisations in 0..1."""

    host: str
    cpu_util: float  # whole host, now
    foreign_cpu_util: float  # processes that are not this job's
    cpu_count: int
    nic_used_bytes_per_s: float  # the job NIC's busier direction, now
    link_bytes_per_s: float
    can_host_ps: bool = True  # the operator may rule a host out
    nic_busy_share: float = 0.0  # share of the time the job NIC was busy in either direction (0: not measured)

    @property
    def nic_util(self) -> float:
        """Bytes: the busier direction's average over the link (what a new shard's traffic adds to)."""
        return self.nic_used_bytes_per_s / self.link_bytes_per_s

    @property
    def nic_saturation(self) -> float:
        """Time: how close the link is to setting the pace. A push phase then a pull phase keep each
        direction's average low on a link that is never idle, so the busy share counts too."""
        return max(self.nic_util, self.nic_busy_share)


def host_state(sample: HostSample, config: PlacementConfig, can_host_ps: bool = True) -> HostState:
    nic = sample.nic()
    link = nic.link_bytes_per_s if nic is not None and nic.link_bytes_per_s else config.unknown_link_bytes_per_s
    cpu = config.cpu_aware
    return HostState(
        host=sample.host,
        cpu_util=min(1.0, sample.cpu_percent / 100.0) if cpu else 0.0,
        foreign_cpu_util=min(1.0, sample.foreign_cpu_percent / 100.0) if cpu else 0.0,
        cpu_count=sample.cpu_count,
        nic_used_bytes_per_s=nic.busiest_bytes_per_s if nic is not None else 0.0,
        link_bytes_per_s=link,
        can_host_ps=can_host_ps,
        nic_busy_share=nic.busy_share if nic is not None and nic.busy_share is not None else 0.0,
    )


def shard_traffic_bytes_per_s(shard_bytes: float, worker_iterations_per_s: float) -> float:
    """Each worker iteration pushes the shard in and pulls it out: per direction, bytes x iterations/s."""
    return shard_bytes * worker_iterations_per_s


@dataclass(frozen=True)
class Placement:
    """Which host holds each shard, and why."""

    hosts: tuple[str, ...]  # per shard
    reasons: tuple[str, ...]  # per shard
    skipped: dict[str, str] = field(default_factory=dict)  # host -> why it got no shard
    predicted_util: dict[str, float] = field(default_factory=dict)  # host -> bottleneck utilisation with its shards
    strategy: str = "headroom"

    def describe(self) -> dict:
        """For the `placement` event."""
        return {"strategy": self.strategy, "shards": {str(i): h for i, h in enumerate(self.hosts)},
                "reasons": {str(i): r for i, r in enumerate(self.reasons)}, "skipped": dict(self.skipped),
                "predicted_util": {h: round(u, 3) for h, u in self.predicted_util.items()}}


def _added_util(host: HostState, traffic: float, config: PlacementConfig) -> tuple[float, float]:
    """(NIC, CPU) utilisation a shard with `traffic` bytes/s per direction adds to `host`."""
    nic = traffic / host.link_bytes_per_s
    cpu = 2 * traffic / 1e9 * config.ps_cpu_s_per_gb / max(1, host.cpu_count)
    return nic, cpu


def unfit_reason(host: HostState, config: PlacementConfig) -> str | None:
    """Why a host must not take a PS shard now, or None."""
    if not host.can_host_ps:
        return "ruled out by configuration"
    if host.foreign_cpu_util > config.heavy_colocated_cpu:
        return f"co-located jobs use {host.foreign_cpu_util:.0%} of its CPU (limit {config.heavy_colocated_cpu:.0%})"
    if host.cpu_util >= config.saturated_util:
        return f"CPU saturated ({host.cpu_util:.0%})"
    if host.nic_saturation >= config.saturated_util:
        return (f"NIC saturated (busier direction {host.nic_util:.0%} of {host.link_bytes_per_s / 1e6:.1f} MB/s, "
                f"busy {host.nic_busy_share:.0%} of the time)")
    return None


def place(shard_bytes: Sequence[float], hosts: Sequence[HostState], workers: int, config: PlacementConfig) -> Placement:
    """Assign every shard to a host (see the module docstring)."""
    if not hosts:
        raise ValueError("placement needs at least one host")
    if config.strategy == "round_robin":
        return round_robin(len(shard_bytes), hosts)
    skipped = {h.host: r for h in hosts if (r := unfit_reason(h, config)) is not None}
    eligible = [h for h in hosts if h.host not in skipped]
    fallback = not eligible
    if fallback:  # every host is unfit: the least bad one still has to take the shards
        eligible = [h for h in hosts if h.can_host_ps] or list(hosts)
    order = {h.host: i for i, h in enumerate(hosts)}
    nic_used = {h.host: h.nic_used_bytes_per_s for h in hosts}
    cpu_used = {h.host: h.cpu_util for h in hosts}
    assigned_bytes = {h.host: 0.0 for h in hosts}
    rate = workers * config.expected_iterations_per_s
    chosen: list[str | None] = [None] * len(shard_bytes)
    reasons: list[str] = [""] * len(shard_bytes)
    for i in sorted(range(len(shard_bytes)), key=lambda i: (-shard_bytes[i], i)):
        traffic = shard_traffic_bytes_per_s(shard_bytes[i], rate)

        def after(h: HostState) -> float:
            nic, cpu = _added_util(h, traffic, config)
            return max((nic_used[h.host] / h.link_bytes_per_s) + nic, cpu_used[h.host] + cpu)

        lowest = min(after(h) for h in eligible)
        near = [h for h in eligible if after(h) <= lowest + config.tie_util]  # headroom first, then balance bytes
        best = min(near, key=lambda h: (assigned_bytes[h.host], round(after(h), 9), order[h.host]))
        util = after(best)
        nic, cpu = _added_util(best, traffic, config)
        nic_used[best.host] += traffic
        cpu_used[best.host] += cpu
        assigned_bytes[best.host] += shard_bytes[i]
        chosen[i] = best.host
        reasons[i] = (f"lowest predicted utilisation {util:.0%} (NIC {nic_used[best.host] / best.link_bytes_per_s:.0%}, "
                      f"CPU {cpu_used[best.host]:.0%}) for {traffic / 1e6:.2f} MB/s per direction"
                      + (" — every host is unfit, so all were considered" if fallback else "")
                      + (" — saturated even so" if util >= config.saturated_util else ""))
    predicted = {h.host: max(nic_used[h.host] / h.link_bytes_per_s, cpu_used[h.host]) for h in hosts}
    return Placement(tuple(h for h in chosen if h is not None), tuple(reasons), skipped, predicted, "headroom")


def round_robin(num_shards: int, hosts: Sequence[HostState]) -> Placement:
    """The naive baseline: shard i on the i-th host (mod the host count), blind to headroom."""
    chosen = tuple(hosts[i % len(hosts)].host for i in range(num_shards))
    return Placement(chosen, tuple("round robin" for _ in chosen), {}, {}, "round_robin")


# ---- re-placement ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Move:
    """Move shard `shard` from host `source` to host `target`."""

    shard: int
    source: str
    target: str
    reason: str
    source_util: float
    target_util_after: float


@dataclass
class ReplacementPolicy:
    """Proposes one shard move at a time when a PS host stays saturated (hysteresis + cooldown)."""

    config: PlacementConfig = field(default_factory=PlacementConfig)
    _streak: dict[str, int] = field(default_factory=dict)
    _last_move_s: float = -math.inf

    def decide(self, now_s: float, shard_hosts: Sequence[str], hosts: Mapping[str, HostState],
               shard_traffic: Sequence[float], pressured: frozenset[str] = frozenset()) -> Move | None:
        """`shard_traffic`: each shard's measured bytes/s per direction (shard bytes x worker iterations/s);
        `pressured`: hosts whose NIC is saturated though pacing hides it (see star.policy.traffic)."""
        c = self.config
        for name in set(shard_hosts):
            state = hosts.get(name)
            saturated = state is not None and (name in pressured or unfit_reason(dataclasses.replace(state, can_host_ps=True), c))
            self._streak[name] = self._streak.get(name, 0) + 1 if saturated else 0
        if not c.replace or now_s - self._last_move_s < c.move_cooldown_s:
            return None
        for shard in sorted(range(len(shard_hosts)), key=lambda i: -shard_traffic[i]):
            source = hosts.get(shard_hosts[shard])
            if source is None or self._streak.get(source.host, 0) < c.persist_n:
                continue
            source_util = 1.0 if source.host in pressured else max(source.nic_saturation, source.cpu_util)
            candidates = [h for h in hosts.values() if h.host != source.host and unfit_reason(h, c) is None]
            if not candidates:
                continue

            def after(h: HostState) -> float:
                nic, cpu = _added_util(h, shard_traffic[shard], c)
                return max(h.nic_util + nic, h.cpu_util + cpu)

            target = min(candidates, key=lambda h: (round(after(h), 9), h.host))
            if after(target) <= source_util - c.move_margin:
                self._last_move_s = now_s
                self._streak[source.host] = 0
                why = unfit_reason(source, c) or "NIC saturated: pushes are paced"
                return Move(shard, source.host, target.host,
                            f"host {source.host} saturated for {c.persist_n} decisions ({why}); "
                            f"{target.host} would be at {after(target):.0%}", source_util, after(target))
        return None
