"""PS hosts in simulation: their NICs, what saturates them, and shard moves, for the real traffic policies.

Why: a PS host whose NIC is busy slows every worker, and the coordinator prevents and
cures that (`star.policy.traffic`: guard, pacing; `star.placement`: re-placement). The
simulator feeds those policies what a daemon would measure and carries out what they
decide, so their effect on time-to-accuracy can be studied at any scale.

Model, once per decision period of `period_s` seconds (`PsHosts.observe`):
- the job's traffic on host h, per direction, is the pushes of the period (refused and
  late ones too: they crossed the link) x the bytes of h's shards / period_s; a push is
  followed by a pull of the same bytes, so both directions carry as much;
- h's NIC utilisation is (background averaged over the period + job traffic) / link,
  at most 1 (a NIC carries no more than its link): the `HostState` the coordinator gets;
- h's transfer slowdown s_h (>= 1) for the next period follows the measured demand:
  s_h <- max(1, s_h x job traffic / what the link leaves the job), where it leaves
  max(1 - background now, min_link_share) of the link. Iterated each period this
  settles where the job's traffic fills what is left (the job's rate falls as s_h
  grows), as flows sharing a saturated link do, and decays to 1 once the demand fits.
A push sends every shard at once, sharing the worker's bandwidth; the stream to a
shard on host h runs s_h times slower (move_slowdown times more while the shard
moves), so a push or pull takes latency_s + model_bytes / bandwidth x max over shards
of that factor. A move (`ShardMove`) keeps the shard on its source until it completes
at the first decision at or after move_s, when its traffic moves to the target.
Pacing (`SyncPlan.push_pace_bytes_per_s`) is the worker's `PushPacer`: a push starts
no sooner than model_bytes / pace after the worker's previous one (`paced`). Not
modelled: PS CPU, tree aggregation (a plan's tree_fanout changes no traffic here),
and a push that spans periods counts in the period it arrives.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from star.control_loop import NO_HOSTS, HostsInput, PsInput, ShardMove
from star.placement import HostState, PlacementConfig, place
from star.sim.config import CostConfig, PsHostsConfig, Schedule


def at(schedule: Schedule, t: float) -> float:
    """A step schedule's value at time t (0 before its first step)."""
    i = bisect.bisect_right([s for s, _ in schedule], t) - 1
    return schedule[i][1] if i >= 0 else 0.0


def mean_over(schedule: Schedule, t0: float, t1: float) -> float:
    """A step schedule's mean over [t0, t1] (what a sampler averaging over the period reads)."""
    if t1 <= t0:
        return at(schedule, t1)
    edges = [t0] + [s for s, _ in schedule if t0 < s < t1] + [t1]
    return sum(at(schedule, a) * (b - a) for a, b in zip(edges, edges[1:])) / (t1 - t0)


def next_slowdown(slowdown: float, job_bytes_per_s: float, link_bytes_per_s: float, background_util: float,
                  min_share: float) -> float:
    """A host's transfer slowdown for the next period, from the job's measured traffic in this one."""
    left = link_bytes_per_s * max(1.0 - background_util, min_share)
    return max(1.0, slowdown * job_bytes_per_s / left)


def paced(arrive: np.ndarray, previous: np.ndarray, interval_s: float) -> np.ndarray:
    """Arrivals of pushes each started no sooner than interval_s after the worker's previous one
    (none before a worker's first push, or after a pull SSP held)."""
    return np.maximum(arrive, np.where(np.isfinite(previous), previous + interval_s, -np.inf))


def coordinator_view(now_s: float, b_noise: float, hosts: PsHosts | None, pushes: int) -> tuple[PsInput, HostsInput]:
    """What the coordinator reads from the PSs and hosts at a decision (no layout without PS hosts);
    `pushes`: all pushes so far."""
    if hosts is None:
        return PsInput(b_noise), NO_HOSTS
    shard_hosts, shard_bytes, states = hosts.observe(now_s, pushes)
    return PsInput(b_noise, shard_hosts, shard_bytes), states


class PsHosts:
    """Where each shard is, moves under way, and each host's slowdown (the state; the rules are above)."""

    def __init__(self, config: PsHostsConfig, placement: PlacementConfig, cost: CostConfig, workers: int):
        self.config = config
        self.cost = cost
        self.names = tuple(f"ps{h}" for h in range(config.hosts))
        self.links = config.links()
        self.background = config.backgrounds()
        self.shard_bytes = config.shard_sizes(cost.model_bytes)
        self.slowdown = [1.0] * config.hosts
        self.moves: dict[int, tuple[int, float, str]] = {}  # shard -> (target host, due at, reason)
        self.last_s, self.last_pushes = 0.0, 0  # at the previous decision
        idle = {name: 0.0 for name in self.names}
        start = place(self.shard_bytes, list(self._states(0.0, 0.0, idle).values()), workers, placement)
        self.shard_host = [self.names.index(h) for h in start.hosts]
        self.events: list[dict[str, Any]] = [{"t": 0.0, "kind": "placement", **start.describe()}]

    def _states(self, since_s: float, now_s: float, job_bytes_per_s: dict[str, float]) -> dict[str, HostState]:
        states = {}
        for h, name in enumerate(self.names):
            link = self.links[h]
            used = min(link, mean_over(self.background[h], since_s, now_s) * link + job_bytes_per_s[name])
            states[name] = HostState(name, 0.0, 0.0, self.config.cpu_count, used, link)
        return states

    def observe(self, now_s: float, pushes: int) -> tuple[tuple[str, ...], tuple[float, ...], HostsInput]:
        """A decision at now_s, `pushes` pushes so far: slowdowns, finished moves, and what the coordinator
        sees (shard hosts, shard bytes, host states). Events pile up in `events`."""
        since_s, self.last_s = self.last_s, now_s
        period_s = max(now_s - since_s, 1e-12)
        pushes, self.last_pushes = pushes - self.last_pushes, pushes
        job = {name: 0.0 for name in self.names}
        for shard, h in enumerate(self.shard_host):
            job[self.names[h]] += pushes * self.shard_bytes[shard] / period_s
        for h, name in enumerate(self.names):
            self.slowdown[h] = next_slowdown(self.slowdown[h], job[name], self.links[h], at(self.background[h], now_s),
                                             self.config.min_link_share)
        states = self._states(since_s, now_s, job)
        for shard, (target, due_s, reason) in sorted(self.moves.items()):
            if due_s <= now_s:
                source = self.names[self.shard_host[shard]]
                self.shard_host[shard] = target
                del self.moves[shard]
                self.events.append({"t": round(now_s, 4), "kind": "ps_moved", "shard": shard, "source": source,
                                    "target_host": self.names[target], "reason": reason})
        hosts = tuple(self.names[h] for h in self.shard_host)
        return hosts, self.shard_bytes, HostsInput(states, move_in_flight=bool(self.moves))

    def perform(self, now_s: float, move: ShardMove | None) -> tuple[float, float, list[dict[str, Any]]]:
        """After a decision: start its move, if any. The iteration's fixed seconds and a push's seconds
        from now on, and the events since the last call (placement, ps_move_started, ps_moved)."""
        if move is not None:
            self.start_move(now_s, move)
        events, self.events = self.events, []
        return self.fixed_s(), self.transfer_s(), events

    def start_move(self, now_s: float, move: ShardMove) -> None:
        """The coordinator asked to move a shard: it keeps serving from its source until the move is due."""
        source = self.names[self.shard_host[move.shard]]
        self.moves[move.shard] = (self.names.index(move.target_host), now_s + self.config.move_s, move.reason)
        self.events.append({"t": round(now_s, 4), "kind": "ps_move_started", "shard": move.shard, "source": source,
                            "target_host": move.target_host, "reason": move.reason})

    def transfer_s(self) -> float:
        """Seconds of one push (or pull) now: the slowest shard's stream sets it."""
        factor = max(self.slowdown[h] * (self.config.move_slowdown if shard in self.moves else 1.0)
                     for shard, h in enumerate(self.shard_host))
        c = self.cost
        return c.latency_s + c.model_bytes / c.bandwidth_bytes_per_s * factor

    def fixed_s(self) -> float:
        """Seconds of an iteration that are not compute now (as `CostModel.fixed_s`)."""
        return 2 * self.transfer_s() + self.cost.overhead_s
