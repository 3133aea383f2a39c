"""The async-momentum benchmark's pure parts: what counts as a collapse, and the paired summary."""

from __future__ import annotations

import pytest

from benchmarks.async_momentum import collapses, main, summarise


@pytest.mark.parametrize("metrics, expected", [
    ([0.1, 0.5, 0.8, 0.1, 0.8, 0.45, 0.9], 2),  # 0.1 and 0.45 fall more than 0.3 below 0.8
    ([0.1, 0.5, 0.8, 0.55, 0.9], 0),  # a dip of 0.25 is not a collapse
    ([0.9, 0.1, 0.1, 0.1], 3),  # every evaluation below the earlier best counts
    ([], 0),
])
def test_a_collapse_is_an_evaluation_far_below_the_best_before_it(metrics, expected):
    assert collapses(metrics, 0.3) == expected


def test_the_summary_pairs_each_rule_by_seed_and_counts_a_miss_as_slowest():
    rows = [{"mode": "ssp", "rule": rule, "seed": seed, "reached": reached, "tta_s": tta, "collapses": c}
            for rule, seed, reached, tta, c in [("fixed", 0, True, 20.0, 5), ("fixed", 1, False, None, 9), ("fixed", 2, True, 30.0, 4),
                                                ("matched", 0, True, 10.0, 0), ("matched", 1, True, 12.0, 0), ("matched", 2, True, 15.0, 1)]]
    [entry] = summarise(rows, ["ssp"], 0.9)
    assert entry["fixed_tta_s"] == 30.0 and entry["matched_tta_s"] == 12.0  # the miss sorts last
    assert entry["fixed_reached"] == 2 and entry["matched_reached"] == 3
    assert entry["fixed_collapses"] == [5, 9, 4] and entry["matched_collapses"] == [0, 0, 1]
    assert entry["matched_over_fixed"] == pytest.approx(12.0 / 30.0)


@pytest.mark.parametrize("argv, message", [
    (["--modes", "fastest"], "plan.mode='fastest'"),
    (["--trace", "/nonexistent.csv"], "'/nonexistent.csv' is not a file"),
])
def test_bad_input_is_one_line_naming_the_value_before_any_run(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--out", str(tmp_path)])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing ran
