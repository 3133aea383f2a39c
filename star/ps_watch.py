"""Watching the parameter servers from the coordinator: which went down, which came back
from a checkpoint (and how many updates that lost), which missed the plan in force.

Pure: per-PS stats (or the error a PS answered with) go in, events and the PSs that
need the current plan re-sent come out. The coordinator does the RPCs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence


class PsStatsLike(Protocol):
    version: int
    plan_epoch: int
    counters: Mapping[str, int]  # "restores", "updates_lost_in_restart" (kept across restarts)


@dataclass
class PsWatch:
    last_version: dict[int, int] = field(default_factory=dict)  # latest version seen per PS
    restores: dict[int, tuple[int, int]] = field(default_factory=dict)  # per PS: (restores, updates lost) seen so far
    down: set[int] = field(default_factory=set)  # PSs whose last stats call failed
    updates_lost: int = 0  # total over every restore

    def observe(self, stats: Sequence[PsStatsLike | Exception], plan_epoch: int) -> tuple[list[dict[str, Any]], set[int]]:
        """Events for this observation, and the PS indices whose plan epoch is behind `plan_epoch`."""
        events: list[dict[str, Any]] = []
        resend: set[int] = set()
        for index, reply in enumerate(stats):
            if isinstance(reply, Exception):
                if index not in self.down:
                    self.down.add(index)
                    events.append({"kind": "ps_unreachable", "ps": index, "reason": str(getattr(reply, "code", lambda: reply)())})
                continue
            if index in self.down:
                self.down.discard(index)
                events.append({"kind": "ps_reachable", "ps": index, "version": reply.version})
            restores = (reply.counters.get("restores", 0), reply.counters.get("updates_lost_in_restart", 0))
            seen = self.restores.setdefault(index, restores)
            if restores[0] > seen[0]:
                lost = restores[1] - seen[1]
                self.updates_lost += lost
                events.append({"kind": "ps_restored", "ps": index, "version_before": self.last_version.get(index),
                               "version_restored": reply.version, "updates_lost": lost,
                               "reason": "restarted from its last checkpoint"})
                self.restores[index] = restores
            self.last_version[index] = reply.version
            if reply.plan_epoch < plan_epoch:
                resend.add(index)
        return events, resend
