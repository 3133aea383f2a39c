"""Per-worker straggler accounting for result.json's `straggler_summary` (pure: times are passed in).

Fed with the coordinator's events (detections, AMP and batch decisions) and each worker's
reports; the seconds others spent waiting on a worker come from the PSs' own clocks
(`star.waits`), since only a PS sees which gradient closed a round.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Worker:
    iterations: int = 0
    compute_s: float = 0.0
    waited_s: float = 0.0  # its own blocked time, by its own clock: pull minus a transfer estimate
    flagged_s: float = 0.0
    flagged_since: float | None = None
    detections: int = 0
    amp: list[dict] = field(default_factory=list)
    batch: list[dict] = field(default_factory=list)
    batch_size: int | None = None


class StragglerLedger:
    def __init__(self) -> None:
        self.workers: dict[int, _Worker] = {}

    def _get(self, worker: int) -> _Worker:
        return self.workers.setdefault(worker, _Worker())

    def on_report(self, worker: int, iteration: int, compute_s: float, push_s: float, pull_s: float) -> None:
        """One iteration's times. A pull moves as many bytes as a push, so pull - push is time blocked;
        the first pull (waiting for the job to start) is not waiting on anybody."""
        w = self._get(worker)
        w.iterations = max(w.iterations, iteration)
        w.compute_s += compute_s
        if iteration > 1:
            w.waited_s += max(0.0, pull_s - push_s)

    def on_event(self, event: dict) -> None:
        kind, t, worker = event.get("kind"), float(event.get("t", 0.0)), event.get("worker")
        if kind == "straggler_detected" and worker is not None:
            w = self._get(worker)
            w.detections += 1
            if w.flagged_since is None:
                w.flagged_since = t
        elif kind == "straggler_recovered" and worker is not None:
            self._unflag(self._get(worker), t)
        elif kind in ("amp", "directives") and worker is not None and "amp" in event:
            w = self._get(worker)
            if not w.amp or w.amp[-1]["amp"] != bool(event["amp"]):
                w.amp.append({"t": round(t, 3), "amp": bool(event["amp"]), "reason": event.get("reason", "")})
        if kind in ("batch_sizes", "directives"):
            sizes = event.get("sizes") or ({str(worker): event["batch_size"]} if event.get("batch_size") else {})
            for key, size in sizes.items():
                w = self._get(int(key))
                if size and size != w.batch_size:
                    w.batch_size = int(size)
                    w.batch.append({"t": round(t, 3), "batch_size": int(size)})

    @staticmethod
    def _unflag(w: _Worker, t: float) -> None:
        if w.flagged_since is not None:
            w.flagged_s += max(0.0, t - w.flagged_since)
            w.flagged_since = None

    def flagged(self, worker: int) -> bool:
        w = self.workers.get(worker)
        return w is not None and w.flagged_since is not None

    def flagged_s(self, worker: int, now_t: float) -> float:
        w = self.workers.get(worker)
        if w is None:
            return 0.0
        return w.flagged_s + (max(0.0, now_t - w.flagged_since) if w.flagged_since is not None else 0.0)

    def summary(self, now_t: float, caused_s: dict[int, float]) -> dict[str, dict]:
        """Per worker (keys as strings, for JSON): seconds flagged slow, seconds others waited on it
        (`caused_s`, from the PSs), its own waiting, and the AMP and batch decisions taken for it."""
        out = {}
        for worker in sorted(set(self.workers) | set(caused_s)):
            w = self.workers.get(worker, _Worker())
            out[str(worker)] = {
                "flagged_slow_s": round(self.flagged_s(worker, now_t), 3),
                "detections": w.detections,
                "others_waited_s": round(caused_s.get(worker, 0.0), 3),
                "waited_s": round(w.waited_s, 3),
                "iterations": w.iterations,
                "compute_s": round(w.compute_s, 3),
                "amp_decisions": list(w.amp),
                "batch_decisions": list(w.batch),
            }
        return out


def mean_over_ps(per_ps: list[dict[int, float]]) -> dict[int, float]:
    """Each PS charges a round's wait on its own shard; a worker's pull waits on all shards at once, so
    the job's figure is their mean."""
    if not per_ps:
        return {}
    workers = set().union(*per_ps)
    return {w: sum(p.get(w, 0.0) for p in per_ps) / len(per_ps) for w in workers}


def format_summary(summary: dict[str, dict]) -> str:
    """The short table `star launch` prints at the end of a job."""
    lines = ["worker  flagged slow s  others waited on it s  own wait s  AMP toggles  batch changes"]
    for worker, s in summary.items():
        lines.append(f"{worker:>6}  {s['flagged_slow_s']:>14.1f}  {s['others_waited_s']:>21.1f}  {s['waited_s']:>10.1f}  "
                     f"{len(s['amp_decisions']):>11}  {len(s['batch_decisions']):>13}")
    return "\n".join(lines)
