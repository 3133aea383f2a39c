"""Slow links: workers whose communication, not their compute, holds a synchronous round back.

The straggler detector (star.detect) judges compute seconds per sample, so a worker behind a slow or
congested link computes as fast as any and is never detected. Batch sizing cannot remove its delay (the
bytes it moves do not shrink with its batch) and AMP does not touch it; what can is a plan that stops
waiting for it (k-of-N, groups, excluding it, ASGD). Seen for real: 4 hosts as network namespaces, one
worker's link capped at 10 Mbit/s, its push and pull took 0.77 s against an iteration of ~0.3 s; auto
gave it batch 1 and stayed on SSGD (35.3 s to the target), where k-of-N took 19.5 s.

A worker's link time is its own median push seconds x 2 (the pull moves the same bytes) without the
step's fixed compute (star.report_book). It is slow when that exceeds the median worker's by more than
`margin` of the median worker's iteration, as plans would price it: an excess that small a share of the
round is not worth a plan that drops gradients. The detector's hysteresis (enter_n, exit_n) applies, so
one congested moment does not move the job.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping

from star.detect import DetectorConfig, StragglerDetector


def link_outliers(link_s: Mapping[int, float], iteration_s: Mapping[int, float], margin: float) -> frozenset[int]:
    """The workers whose link seconds exceed the median worker's by more than `margin` x the median iteration."""
    if len(link_s) < 2 or not iteration_s:
        return frozenset()
    median_link = statistics.median(link_s.values())
    limit = margin * statistics.median(iteration_s.values())
    return frozenset(w for w, s in link_s.items() if s - median_link > limit)


@dataclass
class SlowLinks:
    """Keeps the slow-link set with the straggler detector's hysteresis; decisions are explained as events."""

    config: DetectorConfig = field(default_factory=DetectorConfig)
    _hysteresis: StragglerDetector = field(init=False)

    def __post_init__(self) -> None:
        self._hysteresis = StragglerDetector(self.config)

    @property
    def slow(self) -> frozenset[int]:
        return frozenset(self._hysteresis.stragglers)

    def decide(self, link_s: Mapping[int, float], iteration_s: Mapping[int, float]) -> tuple[frozenset[int], list[dict[str, Any]]]:
        """`link_s`: each worker's link seconds per iteration; `iteration_s`: its iteration as plans price it."""
        outliers = link_outliers(link_s, iteration_s, self.config.margin)
        detection = self._hysteresis.decide(iteration_s, outliers=outliers)
        median_link = statistics.median(link_s.values()) if link_s else 0.0
        median_iteration = statistics.median(iteration_s.values()) if iteration_s else 0.0
        figures = {"median_link_ms": round(median_link * 1e3, 3), "median_iteration_ms": round(median_iteration * 1e3, 3)}
        events = [{"kind": "slow_link_detected", "worker": w, "link_ms": round(link_s[w] * 1e3, 3), **figures, "reason": (
            f"its pushes and pulls take {link_s[w] * 1e3:.1f} ms an iteration against the median worker's "
            f"{median_link * 1e3:.1f}, more than {self.config.margin:.0%} of the median iteration "
            f"({median_iteration * 1e3:.1f} ms): its link holds the round back, which batch sizes and AMP cannot "
            "change, so plans that do not wait for it are weighed")} for w in sorted(detection.entered)]
        events += [{"kind": "slow_link_recovered", "worker": w, "link_ms": round(link_s.get(w, 0.0) * 1e3, 3), **figures}
                   for w in sorted(detection.exited)]
        return detection.stragglers, events

    def forget(self, worker: int) -> None:
        """A lost worker leaves the set."""
        self._hysteresis.forget(worker)
