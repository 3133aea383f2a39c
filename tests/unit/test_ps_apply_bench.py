"""benchmarks.ps_apply: times the PS's round phases with the PS's own code and ends with one JSON line."""

from __future__ import annotations

import json

import pytest

from benchmarks import ps_apply


def test_prints_every_phase_and_the_ratio_as_its_last_json_line(capsys):
    assert ps_apply.main(["--numel", "20k", "--gradients", "3", "--repeats", "1"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["numel"] == 20_000 and figures["gradients"] == 3
    for key in ("round_now_ms", "round_before_ms", "noise_in_update_ms", "sum_scale_step_fused_ms", "publish_copy_ms"):
        assert figures[key] >= 0


@pytest.mark.parametrize("text, count", [("24.9M", 24_900_000), ("20k", 20_000), ("1000", 1000)])
def test_counts_take_k_and_m_suffixes(text, count):
    assert ps_apply.parse_count(text) == count


@pytest.mark.parametrize("text", ["lots", "0"])
def test_a_bad_count_names_the_flag(text):
    with pytest.raises(SystemExit, match="--numel"):
        ps_apply.parse_count(text)
