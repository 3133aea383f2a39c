"""Proactive straggler prevention: keep plan changes from saturating a parameter server's host.

Why (STAR): a switch to a mode with more updates per second (ASGD, k-of-N, excluding a
straggler) multiplies the pushes and pulls every PS serves; on a host whose NIC is
already busy, that extra traffic turns the PS into a straggler for *every* worker. So:

- `TrafficGuard.check` predicts each PS host's NIC utilisation under the proposed plan
  — the host's measured traffic, with this job's share scaled by the ratio of the
  plans' gradient rates (`star.policy.selector.estimate`) — and refuses (defers) a
  change that raises traffic past `max_util`. A change that lowers traffic always passes.
- `TrafficGuard.pace` turns on push pacing (a plan option,
  `SyncPlan.push_pace_bytes_per_s`) when a PS host's NIC is measured above
  `pace_above_util` for `pace_enter_n` decisions, sized so that all workers' pushes fill
  at most `pace_target_util` of that link; and turns it off once demand has fallen well
  under the budget (every PS NIC below `pace_release_util` for `pace_exit_n` decisions).
  Deciding from measured demand, with hysteresis, keeps pacing from flapping: a model
  of "what unpaced traffic would be" is least reliable exactly when a link is the
  bottleneck. Hosts that made pacing necessary stay `pressured` while it lasts, so
  re-placement still sees them as saturated though pacing hides it.

Pure: host states, shard layout and rate estimates in; verdicts with reasons out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from star.placement import HostState


@dataclass(frozen=True)
class TrafficConfig:
    """Traffic guard and push pacing settings."""

    guard: bool = True  # defer plan changes that would push a PS host's NIC past max_util
    max_util: float = 0.85  # predicted NIC utilisation (0..1) a plan change may not exceed
    pace: bool = True  # pace pushes when a PS host's NIC runs above pace_above_util
    pace_above_util: float = 0.9  # measured NIC utilisation that turns pacing on
    pace_target_util: float = 0.75  # paced pushes fill at most this share of the busiest PS host's link
    pace_release_util: float = 0.45  # pacing ends when every PS NIC stays below this (demand fell under the budget)
    pace_enter_n: int = 2  # consecutive hot decisions before pacing starts
    pace_exit_n: int = 5  # consecutive calm decisions before pacing ends

    def __post_init__(self) -> None:
        from star.config import ConfigError  # star.config imports the controller, which imports this module

        for name in ("max_util", "pace_above_util", "pace_target_util", "pace_release_util"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ConfigError(f"control.traffic.{name}", value, "must be in (0, 1]")
        for name in ("pace_enter_n", "pace_exit_n"):
            if getattr(self, name) < 1:
                raise ConfigError(f"control.traffic.{name}", getattr(self, name), "must be >= 1")


@dataclass(frozen=True)
class PsLayout:
    """Where the job's PS shards are and what their hosts look like now."""

    shard_hosts: tuple[str, ...]  # per shard: its host's label
    shard_bytes: tuple[float, ...]  # per shard: bytes of one push (= one pull)
    hosts: Mapping[str, HostState] = field(default_factory=dict)  # latest state of each host (may lack some)

    def bytes_by_host(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for host, size in zip(self.shard_hosts, self.shard_bytes):
            out[host] = out.get(host, 0.0) + size
        return out

    @property
    def total_bytes(self) -> float:
        return float(sum(self.shard_bytes))


@dataclass(frozen=True)
class Verdict:
    allow: bool
    reason: str
    predicted_util: dict[str, float]  # PS host -> predicted NIC utilisation under the proposed plan


def predicted_util(host: HostState, host_bytes: float, current_gradients_per_s: float, proposed_gradients_per_s: float) -> float:
    """The host's NIC utilisation if the job's gradient rate went from current to proposed.

    The job's part of the measured traffic (at most rate x bytes per direction) scales
    with the rate; the rest (other jobs, other shards' pulls) stays as measured.
    """
    job_now = min(host.nic_used_bytes_per_s, current_gradients_per_s * host_bytes)
    other = host.nic_used_bytes_per_s - job_now
    if current_gradients_per_s > 0 and job_now > 0:
        job_then = job_now * proposed_gradients_per_s / current_gradients_per_s
    else:
        job_then = proposed_gradients_per_s * host_bytes
    return (other + job_then) / host.link_bytes_per_s


@dataclass
class TrafficGuard:
    config: TrafficConfig = field(default_factory=TrafficConfig)
    pressured: frozenset[str] = frozenset()  # PS hosts whose NIC made pacing necessary (while it lasts)
    _hot_streak: int = 0
    _calm_streak: int = 0

    def check(self, current_gradients_per_s: float, proposed_gradients_per_s: float, layout: PsLayout) -> Verdict:
        """May the job go from the current to the proposed gradient rate without saturating a PS host?"""
        by_host = layout.bytes_by_host()
        util = {h: predicted_util(layout.hosts[h], b, current_gradients_per_s, proposed_gradients_per_s)
                for h, b in by_host.items() if h in layout.hosts}
        if not self.config.guard or proposed_gradients_per_s <= current_gradients_per_s:
            return Verdict(True, "traffic does not rise" if self.config.guard else "guard off", util)
        over = {h: u for h, u in util.items() if u > self.config.max_util}
        if over:
            host, worst = max(over.items(), key=lambda kv: kv[1])
            return Verdict(False, f"would raise PS host {host}'s NIC to {worst:.0%} (max {self.config.max_util:.0%}): "
                                  f"{current_gradients_per_s:.1f} -> {proposed_gradients_per_s:.1f} gradients/s", util)
        return Verdict(True, f"PS hosts stay within {self.config.max_util:.0%}", util)

    def pace(self, current_pace: float | None, layout: PsLayout, num_workers: int) -> tuple[float | None, str]:
        """The push pace the plan should carry (None: unpaced), and why."""
        c = self.config
        if not c.pace or num_workers < 1:
            self.pressured = frozenset()
            return None, "pacing off"
        by_host = {h: b for h, b in layout.bytes_by_host().items() if h in layout.hosts and b > 0}
        if not by_host:
            return current_pace, "no PS host measured yet"
        util = {h: layout.hosts[h].nic_util for h in by_host}
        if current_pace is None:
            hot = {h: u for h, u in util.items() if u > c.pace_above_util}
            self._hot_streak = self._hot_streak + 1 if hot else 0
            if self._hot_streak < c.pace_enter_n:
                return None, "no PS host's NIC has stayed near saturation"
            self._hot_streak, self._calm_streak = 0, 0
            self.pressured = frozenset(hot)
            budget = min(c.pace_target_util * layout.hosts[h].link_bytes_per_s * layout.total_bytes / by_host[h] for h in by_host)
            host = max(hot, key=hot.get)
            return budget / num_workers, (f"PS host {host}'s NIC at {hot[host]:.0%} for {c.pace_enter_n} decisions: "
                                          f"each worker pushes at most {budget / num_workers / 1e6:.2f} MB/s")
        busiest = max(util.values())
        self._calm_streak = self._calm_streak + 1 if busiest < c.pace_release_util else 0
        if self._calm_streak >= c.pace_exit_n:
            self._calm_streak = 0
            self.pressured = frozenset()
            return None, f"every PS NIC below {c.pace_release_util:.0%} for {c.pace_exit_n} decisions: demand fits, pacing off"
        return current_pace, f"busiest PS NIC at {busiest:.0%}: keep pacing"
