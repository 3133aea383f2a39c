"""benchmarks.updates_cv: updates to target read with the evaluator's own smoothed rule, and its CV."""

import json
import math

import pytest

from benchmarks.updates_cv import main, paired_cut_rows, spread_rows, updates_to_targets


def test_updates_to_target_waits_for_the_smoothed_metric():
    history = [(2, 0.5), (4, 0.96), (6, 0.5), (8, 0.96), (10, 0.96), (12, 0.96)]
    assert updates_to_targets(history, [0.95], True, smoothing=1) == [4]
    assert updates_to_targets(history, [0.95], True, smoothing=3) == [12]


def test_a_loss_target_is_reached_from_above_and_a_missed_target_is_none():
    history = [(2, 1.0), (4, 0.4), (6, 0.2)]
    assert updates_to_targets(history, [0.5, 0.1], False, smoothing=1) == [4, None]


def test_spread_counts_the_misses_and_takes_the_cv_of_the_seeds_that_reached():
    rows = spread_rows({0: [10], 1: [12], 2: [None]}, [0.95])
    assert rows[0]["reached"] == "2/3"
    assert rows[0]["updates"] == [10, 12, None]
    assert math.isclose(rows[0]["cv"], round(math.sqrt(2) / 11, 4))


def test_the_benchmark_ends_with_one_json_line(capsys):
    assert main(["--task", "digits", "--workers", "1", "--batch-size", "8", "--max-steps", "6", "--seeds", "2",
                 "--targets", "0.0", "--fixed-init"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["fixed_init"] is True and last["seeds"] == 2
    assert last["cv"] == {"0.0": 0.0}  # both seeds reach a target of 0 at the third evaluation: update 6


def test_a_loss_metric_puts_the_target_on_the_held_out_loss(capsys):
    """A loss of 100 is reached at the first smoothed evaluation; an accuracy target of 100 never would be."""
    assert main(["--task", "digits", "--workers", "1", "--batch-size", "8", "--max-steps", "6", "--seeds", "1",
                 "--metric", "loss", "--targets", "100,0.0001", "--smoothing", "1"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1])["metric"] == "loss"
    assert "updates [2] reached 1/1" in out[0] and "updates [None] reached 0/1" in out[1]


def test_paired_cut_rows_compare_each_seed_with_itself():
    rows = paired_cut_rows({0: [40], 1: [36], 2: [44]}, {0: [40], 1: [34], 2: [None]}, [0.95])
    assert rows[0]["ratios"] == [1.0, round(34 / 36, 4), None]
    assert rows[0]["unchanged"] == "1/2" and rows[0]["median_ratio"] == pytest.approx((1 + 34 / 36) / 2, abs=1e-4)
    assert rows[0]["mean_abs_log_ratio"] == pytest.approx(abs(math.log(round(34 / 36, 4))) / 2, abs=1e-4)


def test_a_cut_round_changes_that_update_and_nothing_before_it():
    """The cut is the only difference: the held-out loss is the same bit for bit up to the cut round, then not."""
    import dataclasses

    from star.tasks.calibrate import simulate
    from star.tasks.registry import get_task

    task = dataclasses.replace(get_task("digits"), metric_name="loss", higher_is_better=False)
    plain = simulate(task, 2, 4, 1, seed=0, batch_size=8, target=-1.0)
    cut = simulate(task, 2, 4, 1, seed=0, batch_size=8, target=-1.0, cut=(2, 3))
    assert plain.history[:2] == cut.history[:2]  # updates 1 and 2
    assert plain.history[2][1] != cut.history[2][1]  # update 3 is the cut round's


def test_the_cut_option_runs_each_seed_twice_and_reports_the_ratio(capsys):
    assert main(["--task", "digits", "--workers", "2", "--batch-size", "8", "--max-steps", "4", "--seeds", "1",
                 "--targets", "0.0", "--smoothing", "1", "--every", "1", "--cut-round", "0", "--cut-keep", "2"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["cut_round"] == 0 and last["cut_median_ratio"] == {"0.0": 1.0}  # a target of 0 is reached at once either way


@pytest.mark.parametrize("argv, named", [(["--task", "nope"], "nope"), (["--targets", "abc"], "abc"), (["--seeds", "0"], "--seeds"),
                                         (["--metric", "loss"], "--targets"), (["--cut-round", "3"], "--cut-keep"),
                                         (["--cut-round", "3", "--cut-keep", "0"], "--cut-keep"),
                                         (["--momentum", "1.5"], "momentum"), (["--first-seed", "-1"], "--first-seed")])
def test_bad_input_is_one_line_naming_the_value_with_exit_2(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
