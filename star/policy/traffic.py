"""Proactive straggler prevention: keep plan changes from saturating a parameter server's host.

Why (STAR): a switch to a mode with more updates per second (ASGD, k-of-N, excluding a
straggler) multiplies the pushes and pulls every PS serves; on a host whose NIC is
already busy, that extra traffic turns the PS into a straggler for *every* worker. So:

- `TrafficGuard.check` predicts each PS host's NIC utilisation under the proposed plan
  — the host's measured traffic, with this job's share scaled by the ratio of the
  plans' gradient rates (`star.policy.plan_scores.estimate`) — and refuses (defers) a
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
- With `relief = "tree"`, the same hysteresis turns tree aggregation on instead
  (`SyncPlan.tree_fanout`): parents sum their children's gradients, so about
  1/fanout of the pushes reach the PS hosts, at no cost in update rate — but only
  fully synchronous groups form trees (see `star.plan.tree_layout`).

Pure: host states, shard layout and rate estimates in; verdicts with reasons out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from star.errors import ConfigError
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
    relief: str = "pace"  # what a hot PS NIC turns on: pace (paced pushes) | tree (workers aggregate in trees)
    tree_fanout: int = 2  # relief = tree: workers per tree (a parent and fanout-1 children)

    def __post_init__(self) -> None:
        for name in ("max_util", "pace_above_util", "pace_target_util", "pace_release_util"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ConfigError(f"control.traffic.{name}", value, "must be in (0, 1]")
        for name in ("pace_enter_n", "pace_exit_n"):
            if getattr(self, name) < 1:
                raise ConfigError(f"control.traffic.{name}", getattr(self, name), "must be >= 1")
        if self.relief not in RELIEFS:
            raise ConfigError("control.traffic.relief", self.relief, f"one of {', '.join(RELIEFS)}")
        if self.tree_fanout < 2:
            raise ConfigError("control.traffic.tree_fanout", self.tree_fanout, "must be >= 2")


RELIEFS = ("pace", "tree")


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


@dataclass(frozen=True)
class Relief:
    """How the next plan moves gradients: its push pace and tree fanout (None: off), and why."""

    push_pace_bytes_per_s: float | None
    tree_fanout: int | None
    reason: str


@dataclass
class TrafficGuard:
    config: TrafficConfig = field(default_factory=TrafficConfig)
    pressured: frozenset[str] = frozenset()  # PS hosts whose NIC made pacing necessary (while it lasts)
    _hot_streak: int = 0
    _calm_streak: int = 0
    _tree_on: bool = False  # the guard turned trees on (a tree the job was configured with is left alone)

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

    def relieve(self, pace_now: float | None, tree_now: int | None, layout: PsLayout, num_workers: int) -> Relief:
        """The push pace and tree fanout the plan should carry, and why (config.relief picks which one acts)."""
        if self.config.relief == "pace":
            pace, reason = self.pace(pace_now, layout, num_workers)
            return Relief(pace, tree_now, reason)
        if not self.config.pace or num_workers < 1:  # `pace` switches NIC relief as a whole on and off
            self.pressured = frozenset()
            was_on, self._tree_on = self._tree_on, False
            return Relief(pace_now, None if was_on else tree_now, "NIC relief off")
        switch, reason = self._hysteresis(self._tree_on, layout)
        if switch is None:
            return Relief(pace_now, tree_now, reason)
        self._tree_on = switch
        if switch:
            return Relief(pace_now, self.config.tree_fanout, f"{reason}: workers aggregate in trees of {self.config.tree_fanout}")
        return Relief(pace_now, None, f"{reason}, trees off")

    def pace(self, current_pace: float | None, layout: PsLayout, num_workers: int) -> tuple[float | None, str]:
        """The push pace the plan should carry (None: unpaced), and why."""
        c = self.config
        if not c.pace or num_workers < 1:
            self.pressured = frozenset()
            return None, "pacing off"
        switch, reason = self._hysteresis(current_pace is not None, layout)
        if switch is None:
            return current_pace, reason
        if not switch:
            return None, f"{reason}, pacing off"
        by_host = {h: b for h, b in layout.bytes_by_host().items() if h in layout.hosts and b > 0}
        budget = min(c.pace_target_util * layout.hosts[h].link_bytes_per_s * layout.total_bytes / by_host[h] for h in by_host)
        return budget / num_workers, f"{reason}: each worker pushes at most {budget / num_workers / 1e6:.2f} MB/s"

    def _hysteresis(self, active: bool, layout: PsLayout) -> tuple[bool | None, str]:
        """(True: turn relief on, False: off, None: keep as is) from the PS hosts' measured NIC use.

        Pacing reads bytes (`nic_util`): it budgets them, and on a link busy only with this job's own rounds it
        would slow every round. Trees read time as well (`nic_saturation`, the busy share): they cost no update
        rate, and a round's push phase then pull phase keep a link that sets the pace busy while each direction
        averages far under its rate (40 Mbit/s PS link, 4 workers: about half), where bytes alone never turn them on."""
        c = self.config
        by_host = {h: b for h, b in layout.bytes_by_host().items() if h in layout.hosts and b > 0}
        if not by_host:
            return None, "no PS host measured yet"
        util = {h: layout.hosts[h].nic_saturation if c.relief == "tree" else layout.hosts[h].nic_util for h in by_host}
        if not active:
            hot = {h: u for h, u in util.items() if u > c.pace_above_util}
            self._hot_streak = self._hot_streak + 1 if hot else 0
            if self._hot_streak < c.pace_enter_n:
                return None, "no PS host's NIC has stayed near saturation"
            self._hot_streak, self._calm_streak = 0, 0
            self.pressured = frozenset(hot)
            host = max(hot, key=hot.get)
            reading = "busier direction or busy share" if c.relief == "tree" else "busier direction"
            return True, f"PS host {host}'s NIC at {hot[host]:.0%} ({reading}) for {c.pace_enter_n} decisions"
        busiest = max(util.values())
        self._calm_streak = self._calm_streak + 1 if busiest < c.pace_release_util else 0
        if self._calm_streak >= c.pace_exit_n:
            self._calm_streak = 0
            self.pressured = frozenset()
            return False, f"every PS NIC below {c.pace_release_util:.0%} for {c.pace_exit_n} decisions: demand fits"
        return None, f"busiest PS NIC at {busiest:.0%}: keep relief on"
