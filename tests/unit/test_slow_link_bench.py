"""benchmarks.slow_link: its table and last JSON line from run rows; the capped host may hold no shard."""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks import slow_link


def _row(strategy: str, seed: int, tta_s: float | None) -> dict:
    return {"strategy": strategy, "seed": seed, "reached": tta_s is not None, "tta_s": tta_s, "updates": 40,
            "plans": "kofn@13s" if strategy == "auto" else "", "slow_links": "w1@12s" if strategy == "auto" else "",
            "wall_s": 50.0}


def test_the_summary_names_the_best_fixed_strategy_and_auto_s_paired_ratio_to_it():
    rows = [_row(s, seed, t) for seed in range(3) for s, t in
            (("ssgd", 31.0 + seed), ("kofn", 15.0 + seed), ("auto", 18.0 + seed))]
    args = argparse.Namespace(nodes=4, cap_host=1, cap_mbit=10.0, ps_hosts="0,2", task="digits", transport="socket", repeats=3)
    text = slow_link.summary(rows, args)
    verdict = json.loads(text.strip().splitlines()[-1])
    assert verdict["best_fixed"] == "kofn" and verdict["medians_s"] == {"ssgd": 32.0, "kofn": 16.0, "auto": 19.0}
    assert verdict["auto_over_best"] == pytest.approx(19.0 / 16.0)
    assert "| auto | 0 | True | 18.00 | 40 | kofn@13s | w1@12s |" in text


def test_a_miss_counts_against_its_strategy():
    rows = [_row("ssgd", 0, None), _row("ssgd", 1, None), _row("ssgd", 2, 30.0), _row("kofn", 0, 15.0),
            _row("kofn", 1, 16.0), _row("kofn", 2, 17.0)]
    args = argparse.Namespace(nodes=4, cap_host=1, cap_mbit=10.0, ps_hosts="0,2", task="digits", transport="socket", repeats=3)
    verdict = json.loads(slow_link.summary(rows, args).strip().splitlines()[-1])
    assert verdict["medians_s"]["ssgd"] is None and verdict["best_fixed"] == "kofn" and "auto_over_best" not in verdict


def test_a_capped_host_among_the_ps_hosts_is_refused_naming_both_flags(capsys):
    with pytest.raises(SystemExit) as exit_info:
        slow_link.main(["--cap-host", "2", "--ps-hosts", "0,2"])
    assert exit_info.value.code == 2 and "--cap-host" in capsys.readouterr().err


@pytest.mark.parametrize("flags, named", [(["--strategies", "ssgd,fast"], "'fast'"), (["--ps-hosts", "x,y"], "ps_ranks"),
                                          (["--strategies", ","], "plan.mode")])
def test_a_bad_strategy_or_host_list_is_one_line_before_any_host_is_built(flags, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        slow_link.main(flags)
    assert exit_info.value.code == 2 and named in capsys.readouterr().err
