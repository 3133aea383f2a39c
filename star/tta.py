"""Time-to-accuracy as a measurement: when to evaluate, when the target counts as reached,
and how sure a handful of repeated runs lets us be.

TTA = updates to target x seconds per update. The evaluator evaluates the parameters at
fixed versions (every `every_updates` applied updates), never at wall-clock samples, so a
slow run is not also sampled more coarsely in updates; the target applies to the mean of
the last `smoothing` evaluations, so one lucky evaluation does not end a run. Everything
here is pure (no torch, no I/O): the coordinator, the benchmarks and the tests share it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from star.errors import ConfigError


@dataclass(frozen=True)
class EvalConfig:
    """How the held-out set is evaluated and when the target counts as reached."""

    every_updates: int = 2  # evaluate at each multiple of this many applied updates (0: every eval_period_s instead)
    poll_s: float = 0.05  # with every_updates > 0: how often the evaluator checks the PSs' version ...
    wait_s: float = 1.0  # ... where each PS holds the check up to this long for the version to come (0: polls only)
    smoothing: int = 3  # the target applies to the mean metric of the last this many evaluations (1: no smoothing)

    def __post_init__(self) -> None:
        if self.every_updates < 0:
            raise ConfigError("evaluation.every_updates", self.every_updates, "must be >= 0")
        if not self.poll_s > 0:
            raise ConfigError("evaluation.poll_s", self.poll_s, "must be > 0")
        if not 0 <= self.wait_s <= 60:
            raise ConfigError("evaluation.wait_s", self.wait_s, "must be in [0, 60]")
        if self.smoothing < 1:
            raise ConfigError("evaluation.smoothing", self.smoothing, "must be >= 1")


class EvalPoint(NamedTuple):
    time_s: float  # since the first update (max over PSs)
    version: int  # parameter versions applied (max over PSs)
    metric: float


def next_version(evaluated: int, every_updates: int) -> int:
    """The first version of the grid after an evaluation at `evaluated`."""
    return (evaluated // every_updates + 1) * every_updates


def smoothed_metric(points: Sequence[EvalPoint], smoothing: int) -> float:
    """Mean metric of the last `smoothing` points; nan while there are fewer, or when any is not finite."""
    window = [p.metric for p in points[-smoothing:]]
    return sum(window) / len(window) if len(window) == smoothing and all(math.isfinite(m) for m in window) else math.nan


def reached(points: Sequence[EvalPoint], target: float, higher_is_better: bool, smoothing: int = 1) -> bool:
    """Whether the latest point's smoothed metric (mean of it and the `smoothing` - 1 before it)
    is at or past the target."""
    m = smoothed_metric(points, smoothing)
    return math.isfinite(m) and (m >= target if higher_is_better else m <= target)


def first_reaching(points: Sequence[EvalPoint], target: float, higher_is_better: bool, smoothing: int = 1) -> EvalPoint | None:
    """The first point at which `reached` holds, or None. Its time is the TTA, its version the
    updates to target."""
    for i in range(len(points)):
        if reached(points[: i + 1], target, higher_is_better, smoothing):
            return points[i]
    return None


def time_to_target(points: Sequence[EvalPoint], target: float, higher_is_better: bool, smoothing: int = 1) -> float | None:
    """The time of `first_reaching`, or None."""
    point = first_reaching(points, target, higher_is_better, smoothing)
    return None if point is None else point.time_s


# ------------------------------------------------------------------ repeated runs: medians and intervals


class Interval(NamedTuple):
    median: float | None  # None: half or more of the runs missed (a miss counts as +inf)
    lo: float | None
    hi: float | None


def _finite_or_none(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def _as_array(values: Sequence[float | None]) -> np.ndarray:
    return np.array([math.inf if v is None else float(v) for v in values], dtype=np.float64)


def median_or_none(values: Sequence[float | None]) -> float | None:
    """The median, a miss (None) counting as +inf: None when half or more of the runs missed."""
    return _finite_or_none(float(np.median(_as_array(values)))) if len(values) else None


def bootstrap_median(values: Sequence[float | None], level: float = 0.9, resamples: int = 2000, seed: int = 0) -> Interval:
    """Median and percentile-bootstrap `level` interval of the median. None values are misses
    (+inf): a bound that is a miss is None. With n runs the interval can only be made of
    observed values, so with 3 runs it is [min, max] (true coverage 75%, not 90%)."""
    x = _as_array(values)
    if len(x) == 0:
        return Interval(None, None, None)
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, len(x), size=(resamples, len(x)))], axis=1)
    lo, hi = _quantiles(medians, level)
    return Interval(median_or_none(values), _finite_or_none(lo), _finite_or_none(hi))


def bootstrap_ratio(numerator: Sequence[float | None], denominator: Sequence[float | None], level: float = 0.9,
                    resamples: int = 2000, seed: int = 0) -> Interval:
    """median(numerator) / median(denominator) from PAIRED runs (index i of both shared a seed),
    with a bootstrap interval that resamples the pairs together. None where undefined."""
    a, b = _as_array(numerator), _as_array(denominator)
    if len(a) != len(b) or len(a) == 0:
        raise ValueError(f"paired ratio needs equal, non-empty run lists (got {len(a)} and {len(b)})")

    def ratio(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(np.isfinite(x) & np.isfinite(y) & (y > 0), x / np.where(y > 0, y, 1.0), np.inf)

    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(resamples, len(a)))
    ratios = ratio(np.median(a[idx], axis=1), np.median(b[idx], axis=1))
    lo, hi = _quantiles(ratios, level)
    point = float(ratio(np.array([np.median(a)]), np.array([np.median(b)]))[0])
    return Interval(_finite_or_none(point), _finite_or_none(lo), _finite_or_none(hi))


def _quantiles(samples: np.ndarray, level: float) -> tuple[float, float]:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    tail = (1 - level) / 2
    return float(np.quantile(samples, tail, method="lower")), float(np.quantile(samples, 1 - tail, method="higher"))


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """Sample standard deviation / mean; None for fewer than two values."""
    if len(values) < 2:
        return None
    x = np.array(values, dtype=np.float64)
    return float(x.std(ddof=1) / x.mean()) if x.mean() else None
