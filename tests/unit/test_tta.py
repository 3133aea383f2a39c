"""The TTA measurement: fixed-version grid, smoothed target, bootstrap intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from star.config import ConfigError
from star.tta import (
    bootstrap_median,
    bootstrap_ratio,
    coefficient_of_variation,
    EvalConfig,
    EvalPoint,
    first_reaching,
    median_or_none,
    next_version,
    reached,
)


def curve(metrics: list[float], every: int = 2) -> list[EvalPoint]:
    return [EvalPoint(0.5 * (i + 1), every * (i + 1), m) for i, m in enumerate(metrics)]


def test_one_lucky_evaluation_does_not_reach_a_smoothed_target():
    points = curve([0.80, 0.96, 0.85, 0.95, 0.96, 0.97])
    assert first_reaching(points, 0.95, True, smoothing=1).version == 4  # the lucky one
    assert first_reaching(points, 0.95, True, smoothing=3).version == 12  # mean of 0.95, 0.96, 0.97


def test_smoothed_target_on_a_loss_reaches_when_the_mean_falls_to_it():
    points = curve([1.0, 0.3, 0.25, 0.2, 0.15])
    assert first_reaching(points, 0.25, False, smoothing=2).version == 8
    assert reached(points, 0.25, False, smoothing=2)
    assert not reached(points[:3], 0.25, False, smoothing=2)


def test_a_nan_evaluation_in_the_window_never_reaches():
    points = curve([0.99, math.nan, 0.99, 0.99, 0.99])
    assert first_reaching(points, 0.95, True, smoothing=2).version == 8


def test_the_version_grid_skips_to_the_next_multiple_after_an_overshoot():
    assert next_version(4, 2) == 6
    assert next_version(5, 2) == 6
    assert next_version(0, 5) == 5


@pytest.mark.parametrize("field,value", [("every_updates", -1), ("poll_s", 0.0), ("smoothing", 0), ("wait_s", -0.1),
                                         ("wait_s", 61.0)])
def test_bad_eval_config_names_the_field(field, value):
    with pytest.raises(ConfigError, match=f"evaluation.{field}"):
        EvalConfig(**{field: value})


def test_bootstrap_interval_covers_a_known_median_at_about_the_stated_rate():
    rng = np.random.default_rng(7)
    true_median = 10.0  # lognormal(log 10, 0.3): median exactly 10
    trials, covered = 300, 0
    for t in range(trials):
        sample = rng.lognormal(math.log(true_median), 0.3, size=15)
        interval = bootstrap_median(sample.tolist(), level=0.9, resamples=1000, seed=t)
        covered += interval.lo <= true_median <= interval.hi
    assert 0.84 <= covered / trials <= 0.97


def test_bootstrap_median_treats_misses_as_infinite():
    interval = bootstrap_median([10.0, None, None], seed=1)
    assert interval.median is None and interval.hi is None and interval.lo == 10.0
    assert bootstrap_median([10.0, 12.0, None], seed=1).median == 12.0


def test_paired_ratio_interval_is_tight_when_pairs_move_together():
    base = [20.0, 30.0, 40.0, 25.0, 35.0]
    paired = bootstrap_ratio([0.5 * b for b in base], base, seed=3)
    assert paired.median == pytest.approx(0.5)
    assert paired.lo == pytest.approx(0.5) and paired.hi == pytest.approx(0.5)


def test_paired_ratio_refuses_unpaired_lists():
    with pytest.raises(ValueError, match="paired"):
        bootstrap_ratio([1.0, 2.0], [1.0])


def test_coefficient_of_variation():
    assert coefficient_of_variation([10.0, 10.0, 10.0]) == 0.0
    assert coefficient_of_variation([9.0, 11.0]) == pytest.approx(math.sqrt(2) / 10)
    assert coefficient_of_variation([5.0]) is None


def test_median_counts_misses_as_infinite():
    assert median_or_none([3.0, None, 1.0]) == 3.0
    assert median_or_none([3.0, None, None, 1.0]) is None
    assert median_or_none([]) is None
