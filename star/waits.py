"""Who made whom wait, by a PS's own clock (pure: times are passed in).

A gradient that joins an open round waits there until the round closes; the gradient that
closed it (the last one the quorum needed) is the one everybody waited on. So for each
closed round: every other member's wait = close time - its arrival time, charged to the
closer's worker. Late gradients applied alone, drops, and rounds a plan switch flushed
charge nobody (nobody closed them).
"""

from __future__ import annotations

from star.aggregate import Effects

CAUSED_PREFIX = "wait_caused_ms."  # PsStats counter per worker: milliseconds others waited on it at this PS
WAITED_PREFIX = "waited_ms."  # PsStats counter per worker: milliseconds its gradients waited at this PS


class WaitLedger:
    def __init__(self) -> None:
        self._arrivals: dict[int, tuple[int, float]] = {}  # gradient id -> (worker, arrival time)
        self.caused_s: dict[int, float] = {}
        self.waited_s: dict[int, float] = {}

    def arrived(self, gradient_id: int, worker: int, now_s: float) -> None:
        self._arrivals[gradient_id] = (worker, now_s)

    def settled(self, effects: Effects, closer: int | None, now_s: float) -> None:
        """Rounds these effects applied; `closer` is the gradient whose arrival closed them (None: a flush)."""
        for apply in effects.applies:
            members = [self._arrivals.pop(gid, None) for gid in apply.gradient_ids]
            if closer is None or apply.late or closer not in apply.gradient_ids:
                continue
            closer_worker = next((m[0] for gid, m in zip(apply.gradient_ids, members) if gid == closer and m), None)
            if closer_worker is None:
                continue
            for gid, member in zip(apply.gradient_ids, members):
                if gid == closer or member is None:
                    continue
                wait = max(0.0, now_s - member[1])
                self.caused_s[closer_worker] = self.caused_s.get(closer_worker, 0.0) + wait
                self.waited_s[member[0]] = self.waited_s.get(member[0], 0.0) + wait
        for drop in effects.drops:
            self._arrivals.pop(drop.gradient_id, None)

    def counters(self) -> dict[str, int]:
        """Integer milliseconds for PsStats.counters."""
        out = {f"{CAUSED_PREFIX}{w}": round(s * 1e3) for w, s in self.caused_s.items()}
        out.update({f"{WAITED_PREFIX}{w}": round(s * 1e3) for w, s in self.waited_s.items()})
        return out


def per_worker_seconds(counters: dict[str, int], prefix: str) -> dict[int, float]:
    """Read one per-worker family back out of PsStats.counters."""
    return {int(k[len(prefix):]): v / 1e3 for k, v in counters.items() if k.startswith(prefix)}
