"""Straggler detection: robust statistics over per-worker compute times, with hysteresis.

Input is each worker's *own* slowness — its compute seconds per sample, measured
without the time it spent blocked waiting on others and normalised for AMP (so a
straggler that AMP sped up is still recognised as the slow machine it is) — never
its iteration wall time, which under SSGD is the same for everyone.

Rules (DESIGN §5):
- MAD (Korel): slow when t_i > median + k·1.4826·MAD and t_i > (1+m)·median; and also when
  t_i > (1+f)·the median of the faster half: half the workers slowing together (a host of two of four) puts the
  median among them, and the MAD rule alone saw none (simulated, two of four workers 2x slower were never
  detected, and AMP never tried on them). Both rules, not the second as a fallback for the first: where half a
  cluster was slow and the MAD rule found one noise outlier, that one stood for the answer and the other
  ~500 stragglers of 1,000 were declared recovered, then found again (simulated `contention`, 1,000 workers: AMP
  on and off hundreds of times per decision). (It was a fallback while `exclude` took every detected straggler
  out of the sync group; since that is priced by the cost model, flagging a contended cluster is no hazard.)
- relative (STAR): slow when (t_i − t_min) / t_min > threshold.
Hysteresis: a worker enters the slow set after `enter_n` consecutive slow decisions
and leaves it after `exit_n` consecutive normal ones, so one noisy window never flaps. And in
value: a straggler's decision counts as normal only once it is within `exit_margin` of the faster
half's median, not merely under the entry lines. A 1.6x worker sits at the 1.5x line, noise took
it under twice running, it "recovered", AMP went off, and it was found again a decision later
(simulated: one 3x and one 1.6x worker of four; the 64 unseen_traces cases: worst auto / best
1.059 -> 1.039).
A worker whose iteration ends well before the median worker's (`finishes_early`) does not
enter: it holds nobody back. A straggler is let out early only where the caller says so
(`let_out`): one on AMP that runs faster per sample than the median worker, whose plain speed
is known only through a speed-up measured while it was slow (see star.policy.amp: the probe).
Under batch sizing a worker's per-sample time rises as its batch shrinks (a fixed part per iteration; on a shared host, a short iteration runs while
every other worker also computes), so a straggler that recovered while still sized down
reads slow per sample although it is the first to finish; judged per sample alone, it was
detected again (a false detection, seen on gpt-10M). With equal batches (no batch sizing)
an early finisher is never slow per sample, so nothing changes there.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Mapping

from star.errors import ConfigError

MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class DetectorConfig:
    """Straggler detector settings."""

    rule: str = "mad"  # mad | relative
    k: float = 3.0  # MAD rule: how many robust sigmas above the median
    margin: float = 0.2  # MAD rule: and at least this fraction above the median. Not 0.1: on a shared
    # host, co-located processes keep a healthy worker 10-15% off the median for minutes, and a worker that
    # batch sizing gave a smaller batch pays its fixed per-iteration cost over fewer samples (both seen as
    # false detections in no-trace runs); batch sizing, not AMP, is the remedy for imbalances that small
    relative_threshold: float = 0.2  # relative rule: (t - t_min) / t_min above this
    fast_half_margin: float | None = 0.5  # MAD rule: also slow when this fraction above the median of the faster half
    # of the workers (None: off). Well above the MAD margin: the faster half's median is lower than the median by noise
    exit_margin: float | None = 0.2  # a straggler's decision counts as normal only within this fraction of the faster
    # half's median (None: whenever no rule flags it)
    enter_n: int = 2  # consecutive slow decisions before a worker counts as a straggler
    exit_n: int = 2  # consecutive normal decisions before it counts as recovered

    def __post_init__(self) -> None:
        checks = (("rule", self.rule in ("mad", "relative"), "one of mad, relative"),
                  ("k", self.k >= 0, "must be >= 0"), ("margin", self.margin >= 0, "must be >= 0"),
                  ("relative_threshold", self.relative_threshold > 0, "must be > 0"),
                  ("fast_half_margin", self.fast_half_margin is None or self.fast_half_margin > 0,
                   "must be > 0 (or unset: off)"),
                  ("exit_margin", self.exit_margin is None or self.exit_margin >= 0, "must be >= 0 (or unset: off)"),
                  ("enter_n", self.enter_n >= 1, "must be >= 1"), ("exit_n", self.exit_n >= 1, "must be >= 1"))
        for name, ok, reason in checks:  # ConfigError: the CLI answers with one line naming the field
            if not ok:
                raise ConfigError(f"control.detector.{name}", getattr(self, name), reason)

def slow_now(times: Mapping[int, float], config: DetectorConfig) -> frozenset[int]:
    """The workers whose time is an outlier in this one window (no hysteresis)."""
    if len(times) < 2:
        return frozenset()
    values = list(times.values())
    if config.rule == "relative":
        fastest = min(values)
        if fastest <= 0:
            return frozenset()
        return frozenset(w for w, t in times.items() if (t - fastest) / fastest > config.relative_threshold)
    median = statistics.median(values)
    mad = statistics.median(abs(t - median) for t in values)
    threshold = max(median + config.k * MAD_TO_SIGMA * mad, (1 + config.margin) * median)
    slow = frozenset(w for w, t in times.items() if t > threshold)
    if config.fast_half_margin is None:
        return slow
    faster_half = faster_half_median(values)
    return slow | frozenset(w for w, t in times.items() if t > (1 + config.fast_half_margin) * faster_half)


def faster_half_median(values: list[float]) -> float:
    """The median of the faster half of the workers' times: the healthy reference where half of them are slow."""
    return statistics.median(sorted(values)[: (len(values) + 1) // 2])


def finishes_early(iteration_s: Mapping[int, float], margin: float) -> frozenset[int]:
    """The workers whose iteration (compute seconds at their own batch size) ends more than `margin`
    before the median worker's: in a synchronous round they wait for others, whatever their per-sample time."""
    if len(iteration_s) < 2:
        return frozenset()
    median = statistics.median(iteration_s.values())
    return frozenset(w for w, t in iteration_s.items() if t < (1 - margin) * median)


@dataclass(frozen=True)
class Detection:
    stragglers: frozenset[int]  # the slow set after hysteresis
    entered: frozenset[int]  # became stragglers at this decision
    exited: frozenset[int]  # recovered at this decision
    outliers: frozenset[int]  # slow in this window alone (a straggler: still over the exit line)
    excused: frozenset[int] = frozenset()  # outliers kept out of the slow set: they finish their iteration early


@dataclass
class StragglerDetector:
    """Keeps the hysteresis counters; `decide` is pure given them."""

    config: DetectorConfig = field(default_factory=DetectorConfig)
    stragglers: set[int] = field(default_factory=set)
    _slow_streak: dict[int, int] = field(default_factory=dict)
    _normal_streak: dict[int, int] = field(default_factory=dict)

    def decide(self, times: Mapping[int, float], early: frozenset[int] = frozenset(),
               let_out: frozenset[int] = frozenset(), outliers: frozenset[int] | None = None) -> Detection:
        """`times`: per-sample seconds; `early`: workers that finish their iteration early (finishes_early),
        which count as normal unless they already are stragglers; `let_out`: stragglers that count as normal
        whatever their time (a straggler's remedy working is otherwise no recovery); `outliers`: this window's
        outliers by another rule (star.policy.links), given instead of judging `times` (only the hysteresis applies)."""
        if outliers is None:
            outliers = self._outliers(times)
        excused = frozenset(w for w in outliers if (w in early and w not in self.stragglers)
                            or (w in let_out and w in self.stragglers))
        entered, exited = set(), set()
        for worker in times:
            if worker in outliers and worker not in excused:
                self._slow_streak[worker] = self._slow_streak.get(worker, 0) + 1
                self._normal_streak[worker] = 0
                if worker not in self.stragglers and self._slow_streak[worker] >= self.config.enter_n:
                    self.stragglers.add(worker)
                    entered.add(worker)
            else:
                self._normal_streak[worker] = self._normal_streak.get(worker, 0) + 1
                self._slow_streak[worker] = 0
                if worker in self.stragglers and self._normal_streak[worker] >= self.config.exit_n:
                    self.stragglers.discard(worker)
                    exited.add(worker)
        return Detection(frozenset(self.stragglers), frozenset(entered), frozenset(exited), outliers, excused)

    def _outliers(self, times: Mapping[int, float]) -> frozenset[int]:
        """The MAD (or relative) rule's outliers, and stragglers still over the exit line."""
        outliers = slow_now(times, self.config)
        if self.config.exit_margin is not None and len(times) >= 2:
            line = (1 + self.config.exit_margin) * faster_half_median(list(times.values()))
            outliers |= frozenset(w for w in self.stragglers if w in times and times[w] > line)
        return outliers

    def forget(self, worker: int) -> None:
        """A lost worker leaves every set."""
        self.stragglers.discard(worker)
        self._slow_streak.pop(worker, None)
        self._normal_streak.pop(worker, None)
