"""The coordinator's book of hosts: their latest resource samples, the PS daemons each runs,
commands waiting for each node, and shard moves in flight.

Nodes (`star node` on each host, `star launch` on one) report a `HostSample` every few
seconds and receive, in the answer, the commands queued for them: start a PS that takes
a shard over from its current address, or stop a PS whose shard moved away. A move is
done when the target host reports a PS of that shard at a new address. Bookkeeping
only, with the clock passed in: the coordinator wires it to RPCs and events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from star.placement import HostState, PlacementConfig, host_state
from star.resources import HostSample


class MoveState(str, Enum):
    PENDING = "pending"  # the target node was asked to start the successor PS
    DONE = "done"  # the successor serves the shard
    FAILED = "failed"  # no successor within the timeout: the shard stays where it was


@dataclass
class ShardMove:
    shard: int
    source: str  # address of the PS handing the shard over
    source_host: str
    target_host: str
    reason: str
    started_s: float
    state: MoveState = MoveState.PENDING
    new_address: str | None = None
    finished_s: float | None = None

    def describe(self) -> dict[str, Any]:
        return {"shard": self.shard, "from": self.source, "from_host": self.source_host, "to_host": self.target_host,
                "to": self.new_address, "state": self.state.value, "reason": self.reason,
                "seconds": None if self.finished_s is None else round(self.finished_s - self.started_s, 3)}


@dataclass
class NodeOrders:
    """What one node is asked to do at its next report."""

    start_ps: list[tuple[int, str]] = field(default_factory=list)  # (shard, migrate_from address)
    stop_ps: list[str] = field(default_factory=list)  # addresses of its PS daemons to stop


@dataclass
class _HostRecord:
    sample: HostSample
    received_s: float
    node_rank: int
    ps: dict[int, str]


class HostBook:
    def __init__(self, stale_after_s: float = 15.0, move_timeout_s: float = 120.0, stop_grace_s: float = 20.0):
        self.stale_after_s = stale_after_s  # a sample older than this is not used for decisions
        self.move_timeout_s = move_timeout_s
        self.stop_grace_s = stop_grace_s  # a moved-away PS keeps redirecting this long before it is stopped
        self.hosts: dict[str, _HostRecord] = {}
        self.moves: list[ShardMove] = []
        self._orders: dict[str, NodeOrders] = {}
        self._stops: list[tuple[float, str, str]] = []  # (due, host, address)
        self._finished: list[ShardMove] = []

    # ---- reports -------------------------------------------------------------------
    def report(self, sample: HostSample, node_rank: int, ps: dict[int, str], now_s: float) -> NodeOrders:
        """Record a node's report; returns (and forgets) the orders queued for it."""
        self.hosts[sample.host] = _HostRecord(sample, now_s, node_rank, dict(ps))
        for move in self.moves:
            address = ps.get(move.shard)
            if move.state is MoveState.PENDING and move.target_host == sample.host and address and address != move.source:
                move.state, move.new_address, move.finished_s = MoveState.DONE, address, now_s
                self._stops.append((now_s + self.stop_grace_s, move.source_host, move.source))
                self._finished.append(move)
        orders = self._orders.pop(sample.host, NodeOrders())
        due = [s for s in self._stops if s[1] == sample.host and s[0] <= now_s]
        self._stops = [s for s in self._stops if s not in due]
        orders.stop_ps.extend(address for _, _, address in due)
        return orders

    def states(self, now_s: float, config: PlacementConfig) -> dict[str, HostState]:
        """Placement's view of every host with a fresh sample."""
        return {h: host_state(r.sample, config) for h, r in self.hosts.items() if now_s - r.received_s <= self.stale_after_s}

    # ---- moves ---------------------------------------------------------------------
    def in_flight(self) -> ShardMove | None:
        return next((m for m in self.moves if m.state is MoveState.PENDING), None)

    def start_move(self, shard: int, source: str, source_host: str, target_host: str, reason: str, now_s: float) -> str | None:
        """Queue a move (the target node starts the successor); returns why it cannot start, or None."""
        if (busy := self.in_flight()) is not None:
            return f"shard {busy.shard} is still moving to {busy.target_host}"
        if target_host not in self.hosts:
            return f"host {target_host!r} has no node reporting to this coordinator"
        self.moves.append(ShardMove(shard, source, source_host, target_host, reason, now_s))
        self._orders.setdefault(target_host, NodeOrders()).start_ps.append((shard, source))
        return None

    def finished(self, now_s: float) -> list[ShardMove]:
        """Moves that completed or failed since the last call (failed: timed out)."""
        for move in self.moves:
            if move.state is MoveState.PENDING and now_s - move.started_s > self.move_timeout_s:
                move.state, move.finished_s = MoveState.FAILED, now_s
                self._finished.append(move)
        out, self._finished = self._finished, []
        return out
