"""The per-worker speeds batch sizing acts on: smoothed, with hysteresis.

Each decision brings every worker's recent per-sample compute time (a median over its latest reports). Fed
straight into the batch solver, the noise in those medians — and the feedback of a worker's own batch size on
its per-sample time (fixed per-iteration costs spread over fewer or more samples) — makes the sizes churn. So
the solver sees a reference speed per worker that moves only when the worker's smoothed time (an EMA) has
stayed outside a band around the reference for `confirm` decisions in a row; then the reference (and the EMA)
jump to the latest raw measurement of that streak, so a real step is followed in one move rather than chased
by the lagging EMA. (Not the streak's mean: its first measurements straddle the step, as their reports were
made partly before it, and a mean of them sizes a straggler for a speed it has already left behind.) Noisy but
stationary speeds never move it; a real change moves it after `confirm` decisions. Except a large slowdown
(`jump`: newest time over (1 + jump) x the reference), which moves it at once: the costs are not symmetric. A
worker that slows while it holds a big batch holds every round back until its batch is cut (in the simulator
at 1,000 workers, `contention` with unshared cores, a host-wide 2x burst on workers sized up to 1.6x made 6-8
rounds in a row 1.4-1.9x longer); one that speeds up only forgoes a gain meanwhile. A false jump costs one
resize. And a shift most workers share (`shared`): when a worker's reference moves, and with the others whose EMA
is already outside the band on the same side they are at least half the workers, those others move with it,
each to its own latest time. Confirmed one worker at a time, a shift of the whole machine (cores freed, a job's
start-up over) showed as a spread for a decision: in a real 4-worker run on job_1, two workers' references moved
from 7.8 to 4.0-4.8 ms a decision before the other two's, and sizing resized to 43-90 on that false spread, then
back. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Mapping


@dataclass(frozen=True)
class SpeedChange:
    worker: int
    old_s: float | None  # the reference it had (None: first measurement)
    new_s: float


@dataclass
class _Track:
    ema_s: float
    reference_s: float
    side: int = 0  # +1 slower than the reference, -1 faster
    streak: list[float] = field(default_factory=list)  # raw measurements while the EMA stayed outside on `side`
    jumped: bool = False  # whether its latest observation was followed as a jump


@dataclass
class SpeedTracker:
    """EMA + hysteresis band per worker. `alpha`: weight of a new measurement in the EMA
    (1: none); `band`: relative distance from the reference that counts as a change;
    `confirm`: decisions in a row outside the band before the reference moves; `jump`: a slowdown by more
    than this fraction moves it at once (None: never); `shared`: a move also moves the workers already outside
    the band on its side, where together they are at least half the workers."""

    alpha: float = 0.3
    band: float = 0.15
    confirm: int = 2
    jump: float | None = None
    shared: bool = True
    tracks: dict[int, _Track] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)  # workers ever tracked (forget() keeps them here)

    def observe(self, per_sample_s: Mapping[int, float], first: Mapping[int, float] | None = None) -> list[SpeedChange]:
        """Fold in one decision's measurements; returns the references that moved. `first`: a steadier
        measurement to start a worker's reference from when it is seen for the first time (the newest
        reports alone would size the whole job on their noise); after forget(), a known change of speed,
        the next measurement is taken as is."""
        changes = []
        for w, s in sorted(per_sample_s.items()):
            track = self.tracks.get(w)
            if track is None:
                start = s if w in self.seen or first is None else first.get(w, s)
                self.tracks[w] = _Track(start, start)
                self.seen.add(w)
                changes.append(SpeedChange(w, None, start))
                continue
            track.jumped = self._is_jump(track, s)
            if track.jumped:
                # A large slowdown is followed at once: a worker holding a big batch holds the whole round back
                changes.append(self._move(w, track, s))
                continue
            track.ema_s = self.alpha * s + (1 - self.alpha) * track.ema_s
            ratio = track.ema_s / track.reference_s
            side = 1 if ratio > 1 + self.band else -1 if ratio < 1 / (1 + self.band) else 0
            track.streak = (track.streak + [s] if side == track.side else [s]) if side else []
            track.side = side
            if len(track.streak) >= self.confirm:
                changes.append(self._move(w, track, track.streak[-1]))
        if self.shared:
            changes += self._shared_moves(changes, per_sample_s)
        return changes

    def _shared_moves(self, changes: list[SpeedChange], observed: Mapping[int, float]) -> list[SpeedChange]:
        """The workers outside the band on the side of this decision's moves, moved with them where, together,
        they are at least half the workers observed: a shift they share. (Among many workers some move on each
        side in every decision; carrying every worker outside the band with them would, in effect, follow every
        worker on one decision's evidence: simulated at 1,000 workers on `contention`, 4% slower.)"""
        moved = {c.worker for c in changes}
        carried = []
        for side in (1, -1):
            movers = [c.worker for c in changes if c.old_s is not None and (c.new_s > c.old_s) == (side > 0)]
            pending = [w for w in sorted(observed) if w not in moved and self.tracks[w].streak and self.tracks[w].side == side]
            if movers and pending and 2 * (len(movers) + len(pending)) >= len(observed):
                carried += [self._move(w, self.tracks[w], self.tracks[w].streak[-1]) for w in pending]
        return carried

    @staticmethod
    def _move(worker: int, track: _Track, new_s: float) -> SpeedChange:
        """The reference (and the EMA) to `new_s` (a jump's time, or a streak's latest), the streak cleared."""
        change = SpeedChange(worker, track.reference_s, new_s)
        track.reference_s = track.ema_s = new_s
        track.side, track.streak = 0, []
        return change

    def jumped(self, per_sample_s: Mapping[int, float]) -> list[int]:
        """The tracked workers whose newest time is a large slowdown (what `observe` follows at once)."""
        return sorted(w for w, s in per_sample_s.items() if w in self.tracks and self._is_jump(self.tracks[w], s))

    def jumped_again(self, per_sample_s: Mapping[int, float]) -> list[int]:
        """The tracked workers that jump now right after a jump: a step whose first jump was read on a median that
        straddled it, confirmed. (A single jump may be a spike; at 1,000 simulated workers some are, every decision.)"""
        return sorted(w for w in self.jumped(per_sample_s) if self.tracks[w].jumped)

    def jump_thresholds(self) -> dict[int, float]:
        """Per tracked worker, the per-sample time above which `observe` would follow it at once (empty without
        `jump`): what the coordinator watches reports for, to decide without waiting for the next period."""
        if self.jump is None:
            return {}
        return {w: track.reference_s * (1 + self.jump) for w, track in self.tracks.items()}

    def _is_jump(self, track: _Track, s: float) -> bool:
        return self.jump is not None and s > track.reference_s * (1 + self.jump)

    def reference(self, workers: Mapping[int, float] | list[int]) -> dict[int, float]:
        """The reference per-sample time of each of `workers` (all observed before)."""
        return {w: self.tracks[w].reference_s for w in workers}

    def forget(self, worker: int) -> None:
        """A known regime change (AMP toggled, worker lost or rejoined): its next measurement is taken as is."""
        self.tracks.pop(worker, None)


def resolvable_speeds(per_sample_s: Mapping[int, float], rel_error: Mapping[int, float], z: float) -> dict[int, float]:
    """The per-sample times with each worker's difference from the median shrunk by `z` standard errors
    of its measurement (soft thresholding): the part of the differences the measurements can resolve.

    Batch sizing judges whether a change pays off on these. On speeds that differ only by noise (on a
    2-core host, one report's per-sample time spreads about 10%, and a median of two about 7%), the solver
    still finds sizes that look 10-15% faster; those sizes are in truth slower, and a straggler-to-be
    may hold the biggest batch. A worker's error is taken as at least the median worker's: a spread over
    a few reports can be near zero by chance. z = 0 gives the times unchanged."""
    if z <= 0 or not per_sample_s:
        return dict(per_sample_s)
    median = statistics.median(per_sample_s.values())
    pooled = statistics.median(rel_error.get(w, 0.0) for w in per_sample_s)
    resolvable = {}
    for w, s in per_sample_s.items():
        deviation = s / median - 1
        margin = z * max(rel_error.get(w, 0.0), pooled)
        resolvable[w] = median * (1 + math.copysign(max(0.0, abs(deviation) - margin), deviation))
    return resolvable


def noise_z_for(workers: int, z: float) -> float:
    """How many standard errors a speed difference must exceed to count when `workers` are sized together: at least
    `z`, and at least the normal quantile at 1 - 1/(workers + 1), about where the largest of that many deviations
    of pure noise lands. A predicted iteration is the slowest worker's, so among 1,000 workers it is set by a
    3-standard-error fluke that one standard error (right for 4 workers) leaves standing: simulated on job_1 (speeds
    within noise of each other), batch sizing resized on such flukes and ran 4-6% slower than even batches at 100
    and 1,000 workers. 4 workers: 1.0 (z); 100: 2.33; 1,000: 3.09."""
    return max(z, NormalDist().inv_cdf(1 - 1 / (workers + 1))) if z > 0 and workers >= 1 else z
