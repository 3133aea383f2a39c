"""benchmarks.retarget: time and updates to other targets, read back from saved runs with the runs' own rule."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.retarget import main, retarget


def _run(root: Path, name: str, seed: int, curve: list[tuple[float, int, float]], smoothing: int = 1, metric: str = "loss") -> None:
    run = root / name / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "config.toml").write_text(f"[evaluation]\nsmoothing = {smoothing}\n")
    (run / "result.json").write_text(json.dumps({"metric": metric}))
    (run / "curve.csv").write_text("time_s,version,metric\n" + "".join(f"{t},{v},{m}\n" for t, v, m in curve))


def test_each_target_is_read_with_the_runs_smoothing_and_a_target_never_passed_is_a_miss(tmp_path):
    _run(tmp_path, "a", 0, [(1.0, 2, 3.6), (2.0, 4, 3.3), (3.0, 6, 3.1)])  # no smoothing: 3.3 first at 2 s
    _run(tmp_path, "a", 1, [(1.0, 2, 3.6), (2.0, 4, 3.3), (3.0, 6, 3.3)], smoothing=2)  # mean of 2: 3.3 at 3 s
    found = retarget(tmp_path, [3.3, 3.0])
    assert found["a"][3.3] == [(2.0, 4), (3.0, 6)]
    assert found["a"][3.0] == [(None, None), (None, None)]


def test_accuracy_runs_count_upwards_and_the_last_line_is_json(tmp_path, capsys):
    for seed, tta in enumerate((2.0, 4.0, 3.0)):
        _run(tmp_path, "ddp", seed, [(1.0, 2, 0.5), (tta, 4, 0.96)], metric="accuracy")
        _run(tmp_path, "auto", seed, [(1.0, 2, 0.5), (tta / 2, 4, 0.96)], metric="accuracy")
    assert main([str(tmp_path), "--targets", "0.95", "--ratio-to", "ddp"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["runs"]["ddp"]["0.95"] == {"tta_s": 3.0, "updates": 4.0}
    assert summary["runs"]["auto"]["0.95"]["tta_s"] == 1.5
    assert any(line.startswith("target 0.95") and "auto 0.50" in line for line in lines)


def test_a_run_that_stopped_exactly_at_its_target_reads_as_reached_despite_the_curves_rounding(tmp_path):
    _run(tmp_path, "a", 0, [(1.0, 2, 0.913889), (2.0, 4, 0.966667), (3.0, 6, 0.969444)], smoothing=3, metric="accuracy")
    assert retarget(tmp_path, [0.95])["a"][0.95] == [(3.0, 6)]  # the mean of the rounded values is 0.94999...


def test_a_folder_without_saved_runs_is_one_clear_error(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path), "--targets", "0.95"])
    assert exit_.value.code == 2 and "no <run>/seed<N>/curve.csv" in capsys.readouterr().err
    _run(tmp_path, "a", 0, [(1.0, 2, 0.5)])
    (tmp_path / "a" / "seed0" / "config.toml").unlink()
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path), "--targets", "0.95"])
    assert exit_.value.code == 2 and "config.toml" in capsys.readouterr().err
