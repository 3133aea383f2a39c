"""Simulator vs real: Kendall tau, per-trace agreement, and the sim_vs_real tool's pure pieces."""

from __future__ import annotations

import math

import pytest

from benchmarks import sim_vs_real
from star.sim.compare import agreement, agreement_table, kendall_tau, resolved_tau, seed_agreement


def test_kendall_tau_is_one_for_the_same_order_and_minus_one_for_the_reverse():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)


def test_kendall_tau_counts_one_swapped_pair_of_four():
    # 6 pairs, 1 discordant: (5 - 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)


def test_kendall_tau_b_corrects_for_ties_and_a_miss_ranks_last():
    # scipy.stats.kendalltau([1, 2, 2, 3], [1, 2, 3, 4]) = 0.9128709291752769 (tau-b)
    assert kendall_tau([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9128709291752769)
    assert kendall_tau([1.0, None, 2.0], [1.0, 9.0, 2.0]) == pytest.approx(1.0)  # None = missed = slowest
    assert kendall_tau([1, 1, 1], [1, 2, 3]) is None
    with pytest.raises(ValueError, match="paired"):
        kendall_tau([1, 2], [1])


def _row(trace, strategy, real, sim):
    return {"trace": trace, "strategy": strategy, "real_tta_s": real, "sim_tta_s": sim,
            "error": None if not (real and sim) else sim / real - 1, "error_vs_clean": None if not (real and sim) else sim / real - 1}


def test_agreement_ranks_strategies_without_the_clean_reference_and_averages_abs_errors():
    compared = [_row("t", "ssgd-clean", 10.0, 30.0), _row("t", "ssgd", 20.0, 22.0), _row("t", "asgd", 12.0, 10.8),
                _row("t", "kofn", 15.0, 15.0), _row("u", "ssgd", 5.0, 5.0), _row("u", "kofn", 6.0, 4.0)]
    rows = {r["trace"]: r for r in agreement(compared)}
    assert rows["t"]["strategies"] == 3 and rows["t"]["kendall_tau"] == pytest.approx(1.0)  # clean's 200% miss not ranked
    assert rows["t"]["mean_error_vs_clean"] == pytest.approx((0.1 + 0.1 + 0.0) / 3)
    assert rows["t"]["mean_error"] == pytest.approx((0.1 + 0.1 + 0.0) / 3)
    assert rows["u"]["kendall_tau"] == pytest.approx(-1.0)
    assert rows["t"]["real_order"] == "asgd < kofn < ssgd"
    table = agreement_table(list(rows.values()))
    assert "| t | 3 | 1.00 | yes |" in table and "| u | 2 | -1.00 | **NO** |" in table


def test_seed_agreement_averages_the_tau_of_every_two_seeds_rankings():
    per_seed = {0: {"a": 1.0, "b": 2.0, "c": 3.0}, 1: {"a": 1.0, "b": 2.0, "c": 3.0}, 2: {"a": 3.0, "b": 2.0, "c": 1.0}}
    assert seed_agreement(per_seed) == pytest.approx((1.0 - 1.0 - 1.0) / 3)
    assert seed_agreement({0: {"a": 1.0, "b": 2.0}}) is None


def test_scaled_cost_stretches_every_duration_and_slows_the_network():
    cost = {"base_compute_s": 0.1, "overhead_s": 0.2, "bandwidth_bytes_per_s": 100.0, "base_batch": 64, "host_cores": 2.0}
    scaled = sim_vs_real.scaled_cost(cost, 2.0)
    assert scaled == {"base_compute_s": 0.2, "overhead_s": 0.4, "bandwidth_bytes_per_s": 50.0}


def test_seed_anchors_take_each_seeds_clean_run_and_skip_misses(tmp_path):
    runs = tmp_path / "runs.csv"
    runs.write_text("run,strategy,trace,seed,reached,tta_s,final_metric,updates\n"
                    "clean,ssgd,none,0,True,20.0,0.95,60\nssgd,ssgd,x.csv,0,True,30.0,0.95,61\n"
                    "clean,ssgd,none,1,False,,0.90,99\n")
    assert sim_vs_real.seed_anchors(runs) == {0: (20.0, 60.0)}
    runs.write_text("run,strategy,trace,seed,reached,tta_s,final_metric,updates,updates_to_target\n"
                    "clean,ssgd,none,3,True,20.0,0.95,64,58\n")
    assert sim_vs_real.seed_anchors(runs) == {3: (20.0, 58.0)}  # the version the target was reached at


def test_parse_case_reads_options_and_names_a_bad_word(tmp_path):
    summary, trace = tmp_path / "summary.csv", tmp_path / "t.csv"
    summary.write_text("x\n")
    trace.write_text("x\n")
    case = sim_vs_real.parse_case(["job1", str(summary), str(trace), "trace_workers=3,4,5,6", "stretch=0.06"])
    assert (case.trace_workers, case.stretch) == ("3,4,5,6", 0.06)
    with pytest.raises(ValueError, match="stretch='x'"):
        sim_vs_real.parse_case(["a", str(summary), str(trace), "stretch=x"])
    with pytest.raises(ValueError, match="'speed=2'"):
        sim_vs_real.parse_case(["a", str(summary), str(trace), "speed=2"])
    with pytest.raises(ValueError, match="TRACE"):
        sim_vs_real.parse_case(["a", str(summary), str(tmp_path / "missing.csv")])


def test_median_tta_counts_a_miss_as_slowest():
    assert sim_vs_real.median_tta([{"reached": True, "tta_s": 3.0}, {"reached": False, "tta_s": None},
                                   {"reached": True, "tta_s": 1.0}]) == 3.0
    assert sim_vs_real.median_tta([{"reached": False, "tta_s": None}, {"reached": True, "tta_s": 1.0}]) is None
    assert not math.isnan(sim_vs_real.median_tta([{"reached": True, "tta_s": 2.0}]))


def test_resolved_tau_judges_only_pairs_whose_real_ranges_do_not_overlap():
    lo, hi = [10.0, 12.0, 20.0], [13.0, 15.0, 22.0]  # a and b overlap: only (a, c) and (b, c) count
    assert resolved_tau(lo, hi, [5.0, 1.0, 9.0]) == (pytest.approx(1.0), 2)  # a/b swapped in sim: not judged
    assert resolved_tau(lo, hi, [5.0, 9.0, 1.0]) == (pytest.approx(-1.0), 2)
    assert resolved_tau(lo, hi, [5.0, 1.0, 3.0]) == (pytest.approx(0.0), 2)  # one pair right, one wrong
    assert resolved_tau(lo, hi, [5.0, 5.0, 5.0]) == (pytest.approx(0.0), 2)  # sim ties score 0
    assert resolved_tau([1.0, 1.0], [3.0, 3.0], [1.0, 2.0]) == (None, 0)
    assert resolved_tau([1.0, None], [2.0, None], [1.0, 9.0]) == (pytest.approx(1.0), 1)  # a miss is slowest


def test_the_tool_writes_a_paired_comparison_and_refuses_a_bad_case_with_exit_2(tmp_path, capsys):
    folder = tmp_path / "real"
    folder.mkdir()
    (folder / "summary.csv").write_text("run,strategy,trace,runs,reached,tta_s,tta_lo_s,tta_hi_s,updates_to_target,s_per_update\n"
                                        "clean,ssgd,none,1,1/1,6.0,6.0,6.0,20,0.3\nssgd,ssgd,t.csv,1,1/1,12.0,12.0,12.0,20,0.6\n"
                                        "asgd,asgd,t.csv,1,1/1,8.0,8.0,8.0,80,0.1\n")
    (folder / "runs.csv").write_text("run,strategy,trace,seed,reached,tta_s,updates,updates_to_target\n"
                                     "clean,ssgd,none,0,True,6.0,20,20\nssgd,ssgd,t.csv,0,True,12.0,20,20\n"
                                     "asgd,asgd,t.csv,0,True,8.0,80,80\n")
    trace = tmp_path / "t.csv"
    trace.write_text("iteration,worker,factor\n0,0,1\n0,1,1\n0,2,1\n0,3,4\n1000,3,4\n")
    out = tmp_path / "out"
    assert sim_vs_real.main(["--case", "t", str(folder / "summary.csv"), str(trace), "--out", str(out)]) == 0
    text = (out / "sim_vs_real.md").read_text()
    assert "| t | 2 |" in text and "| t | ssgd-clean | 6.000 |" in text  # 2 strategies ranked; clean anchored
    clean_sim = float(text.split("| t | ssgd-clean | 6.000 | ")[1].split(" |")[0])
    assert clean_sim == pytest.approx(6.0, rel=0.1)  # paired: the simulated clean run takes the real one's time
    assert "| t | ssgd-clean | 6.000 | " in text and "| 20 | 20 | 0.300 |" in text  # both factors, real and simulated
    assert sim_vs_real.main(["--case", "t", str(folder / "summary.csv"), str(tmp_path / "missing.csv"), "--out", str(out)]) == 2
    assert "missing.csv" in capsys.readouterr().err


def test_agreement_ranks_seconds_per_update_apart_from_tta():
    """A simulator that predicts the cost of an update right but not the update that reached the target (a draw the
    real runs make afresh when a strategy changes any round's gradient) is told apart from one that is simply wrong."""
    def row(strategy, real_tta, sim_tta, real_spu, sim_spu):
        return {**_row("t", strategy, real_tta, sim_tta), "real_s_per_update": real_spu, "sim_s_per_update": sim_spu,
                "s_per_update_error": sim_spu / real_spu - 1}
    compared = [row("ssgd", 17.0, 17.0, 0.42, 0.42), row("batch", 10.3, 11.3, 0.27, 0.28),
                row("auto-heuristic", 9.4, 11.4, 0.25, 0.27)]  # auto reached in fewer updates than clean in the real run
    rows = agreement(compared)
    assert rows[0]["kendall_tau"] == pytest.approx(1 / 3)  # batch and auto swapped
    assert rows[0]["s_per_update_tau"] == pytest.approx(1.0)
    assert rows[0]["mean_s_per_update_error"] == pytest.approx((0.0 + 0.01 / 0.27 + 0.02 / 0.25) / 3)
    assert "| 1.00 | 3.9% |" in agreement_table(rows)


def test_tta_factors_are_medians_over_the_seeds_that_reached():
    results = [{"reached": True, "tta_s": 10.0, "updates": 40}, {"reached": True, "tta_s": 9.0, "updates": 30},
               {"reached": True, "tta_s": 12.0, "updates": 40}, {"reached": False, "tta_s": None, "updates": 90}]
    assert sim_vs_real.tta_factors(results) == {"updates_to_target": 40, "s_per_update": pytest.approx(0.3)}
    assert sim_vs_real.tta_factors(results[3:]) == {"updates_to_target": None, "s_per_update": None}
