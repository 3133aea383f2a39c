"""benchmarks.tree's table: fixed-fanout arms, relief arms (trees when the PS NIC runs hot) and their ratios."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.tree import main, summary


def _row(fanout, repeat, tta_s, switched=()):
    return {"fanout": fanout, "repeat": repeat, "reached": tta_s is not None, "tta_s": tta_s, "updates": 36,
            "pushes_per_update": 4.0, "push_mb_per_update": 1.9, "trees_switched": list(switched)}


def test_the_table_shows_relief_arms_beside_fixed_fanouts_with_when_trees_went_on():
    rows = [_row(0, 0, 30.0), _row(2, 0, 27.0), _row("relief2", 0, 28.0, ["2 at 4.1s"]),
            _row(0, 1, 32.0), _row(2, 1, 26.0), _row("relief2", 1, None)]
    text = summary(rows, argparse.Namespace(workers=4, cap_mbit=40.0, task="digits"))
    assert "| relief2 | 0 | True | 28.00 | 36 | 4.0 | 1.9 | 2 at 4.1s |" in text
    assert "| none | 1 | True | 32.00 | 36 | 4.0 | 1.9 | — |" in text
    assert "median TTA, trees of 2: 26.50 s vs 31.00 s without: ratio 0.85" in text
    assert "median TTA, relief2 (trees when the PS NIC runs hot): 28.00 s vs 31.00 s without: ratio 0.90" in text


@pytest.mark.parametrize("flag, bad", [("--relief-fanouts", "two"), ("--relief-fanouts", "1"), ("--relief-fanouts", "0"),
                                       ("--relief-fanouts", ""), ("--fanouts", "0,x"), ("--fanouts", "1")])
def test_a_fanout_that_is_not_a_tree_is_refused_before_any_host_is_built(flag, bad, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([flag, bad, "--out", "/nonexistent/tree"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and flag in err and repr(bad) in err and "Traceback" not in err
