"""benchmarks.batch_noise: first-decision resizes through the real ReportBook and Controller, one JSON line last."""

from __future__ import annotations

import json

import pytest

from benchmarks import batch_noise


def test_noise_alone_resizes_only_without_the_noise_test_and_a_3x_straggler_always(capsys):
    assert batch_noise.main(["--draws", "150", "--slowdowns", "1.0,3.0", "--z", "0,1"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rate = {(r["slowdown"], r["noise_z"]): r["act_rate"] for r in figures["rows"]}
    assert rate[(1.0, 0.0)] > 0.03 and rate[(1.0, 1.0)] == 0.0
    assert rate[(3.0, 0.0)] == rate[(3.0, 1.0)] == 1.0
    noisy = next(r for r in figures["rows"] if (r["slowdown"], r["noise_z"]) == (1.0, 0.0))
    assert noisy["true_gain_when_acting"] < 0  # resizes on noise make the round slower in truth


@pytest.mark.parametrize("flags, named", [(["--slowdowns", "abc"], "--slowdowns"), (["--draws", "0"], "--draws"),
                                          (["--z", "1,-1"], "--z"), (["--slowdowns", "0,2"], "--slowdowns"),
                                          (["--noise-cv", "-1"], "--noise-cv")])
def test_a_bad_flag_is_one_line_naming_it(flags, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        batch_noise.main(flags)
    assert exit_info.value.code == 2 and named in capsys.readouterr().err
