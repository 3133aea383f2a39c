"""`star bench`: the summary tables, mitigation, and every output of a small simulated run."""

from __future__ import annotations

import csv

import pytest

from star import bench
from star.sim import compare
from star.cli import main
from star.traces import Trace, write_simple_csv

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _result(trace, strategy, tta, reached=True):
    return {"trace": trace, "strategy": strategy, "workers": 4, "tta_s": tta, "reached": reached}


def test_mitigation_is_the_share_of_the_straggler_delay_removed():
    rows = bench.summary_rows([_result("t", compare.CLEAN, 10.0), _result("t", "ssgd", 20.0), _result("t", "kofn", 12.0),
                               _result("t", "asgd", None, reached=False)])
    by = {r["strategy"]: r["mitigation"] for r in rows}
    assert by == {compare.CLEAN: None, "ssgd": 0.0, "kofn": 0.8, "asgd": None}


def test_best_per_trace_ignores_clean_ssgd_and_misses():
    rows = bench.summary_rows([_result("t", compare.CLEAN, 5.0), _result("t", "ssgd", 20.0), _result("t", "kofn", 12.0),
                               _result("t", "asgd", 1.0, reached=False)])
    assert bench.best_per_trace(rows) == {"t": "kofn"}
    assert "| **t** | **kofn** | **4** | **12.00** | **True** | **0.533** |" in bench.markdown_table(rows)


def test_auto_strategy_names_map_to_auto_mode_with_the_selector_kind():
    assert bench.strategy_settings("auto-learned") == ("auto", {"selector_kind": "learned"})
    assert bench.strategy_settings("auto-heuristic") == ("auto", {"selector_kind": "heuristic"})
    assert bench.strategy_settings("kofn") == ("kofn", {})
    with pytest.raises(ValueError, match="oracle"):
        bench.strategy_settings("oracle")


def test_sim_bench_writes_every_output(tmp_path, capsys):
    trace = write_simple_csv(Trace.from_rows([(0, w, 3.0 if w == 3 else 1.0) for w in range(4)]
                                             + [(200, w, 3.0 if w == 3 else 1.0) for w in range(4)]), tmp_path / "slow3.csv")
    out = tmp_path / "bench"
    code = main(["bench", "--traces", str(trace), "--sim", "--workers", "4", "--strategies", "ssgd,kofn", "--out", str(out)])
    assert code == 0
    with open(out / "summary.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert tuple(reader.fieldnames) == bench.SUMMARY_COLUMNS
    assert [(r["trace"], r["strategy"]) for r in rows] == [("slow3", compare.CLEAN), ("slow3", "ssgd"), ("slow3", "kofn")]
    assert all(r["reached"] == "True" and float(r["tta_s"]) > 0 for r in rows)
    tta = {r["strategy"]: float(r["tta_s"]) for r in rows}
    best = min(("ssgd", "kofn"), key=tta.get)
    assert f"| **slow3** | **{best}** |" in (out / "summary.md").read_text()
    for name in ("curves_slow3.png", "tta.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000
    assert (out / "runs" / "slow3" / "kofn" / "result.json").exists()
    assert "] 3/3 slow3 kofn: reached=True" in capsys.readouterr().err  # the progress bar's last line


def test_a_bad_strategy_name_fails_before_any_run(tmp_path, capsys):
    code = main(["bench", "--traces", "synthetic:static", "--sim", "--strategies", "ssgd,oracle", "--out", str(tmp_path / "b")])
    assert code == 2 and "oracle" in capsys.readouterr().err
    assert not (tmp_path / "b" / "summary.csv").exists()


@pytest.mark.parametrize("flags, named", [
    (["--trace-stretch", "0"], "trace_stretch=0.0"), (["--trace-stretch", "nan"], "trace_stretch=nan"),
    (["--synthetic-iterations", "0"], "synthetic_iterations=0"), (["--workers", "0"], "workers=0"),
    (["--ps", "0"], "ps=0"), (["--strategies", "ddp"], "benchmarks.strategies"),
])
def test_a_value_any_run_would_refuse_fails_before_the_first_run(tmp_path, capsys, flags, named):
    """Before, a stretch of 0 was found after the clean run (up to 150 s of a real one), and 0 iterations or
    workers surfaced as a trace error about rows."""
    code = main(["bench", "--traces", "synthetic:static", "--sim", *flags, "--out", str(tmp_path / "b")])
    assert code == 2 and named in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_progress_bar_fills_with_the_runs_done():
    assert bench.progress_bar(0, 4, width=8) == "[--------] 0/4"
    assert bench.progress_bar(2, 4, width=8) == "[####----] 2/4"
    assert bench.progress_bar(4, 4, width=8) == "[########] 4/4"


def test_sim_is_compared_with_real_runs_raw_and_relative_to_clean_ssgd(tmp_path):
    real = tmp_path / "strategies.csv"  # benchmarks/strategies.py format: one trace, run names clean / auto
    real.write_text("run,strategy,trace,reached,tta_s\nclean,ssgd,none,True,10.0\nssgd,ssgd,t.csv,True,20.0\n"
                    "auto,auto,t.csv,True,12.0\nauto-clean,auto,none,True,11.0\n")
    sim = bench.summary_rows([_result("t", compare.CLEAN, 20.0), _result("t", "ssgd", 30.0), _result("t", "auto-heuristic", 30.0),
                              _result("t", "kofn", 25.0)])
    compared = {c["strategy"]: c for c in compare.compare_with_real(sim, compare.read_real_summary(real))}
    assert set(compared) == {compare.CLEAN, "ssgd", "auto-heuristic"}  # kofn has no real run
    assert compared["ssgd"]["error"] == pytest.approx(0.5)  # 30 s simulated vs 20 s real
    assert compared["ssgd"]["error_vs_clean"] == pytest.approx(1.5 / 2.0 - 1)  # 1.5x clean vs 2x clean
    assert compared["auto-heuristic"]["error_vs_clean"] == pytest.approx(1.5 / 1.2 - 1)
    table = compare.sim_vs_real_table(list(compared.values()))
    assert "| t | ssgd | 20.00 | 30.00 | +50.0% |" in table and "Mean |error|" in table


def test_sim_bench_with_real_runs_writes_the_comparison(tmp_path):
    trace = write_simple_csv(Trace.from_rows([(0, w, 2.0 if w == 1 else 1.0) for w in range(4)]
                                             + [(200, w, 2.0 if w == 1 else 1.0) for w in range(4)]), tmp_path / "slow1.csv")
    real = tmp_path / "real.csv"  # a real star bench summary.csv
    real.write_text("trace,strategy,workers,tta_s,reached,mitigation\nslow1,ssgd-clean,4,10.0,True,\n"
                    "slow1,ssgd,4,16.0,True,0.0\n")
    out = tmp_path / "b"
    assert main(["bench", "--traces", str(trace), "--sim", "--strategies", "ssgd", "--real", str(real), "--out", str(out)]) == 0
    text = (out / "sim_vs_real.md").read_text()
    assert "| slow1 | ssgd | 16.00 |" in text and "| slow1 | ssgd-clean | 10.00 |" in text
    assert main(["bench", "--traces", str(trace), "--strategies", "ssgd", "--real", str(real), "--out", str(out)]) == 2


def test_goals_table_checks_auto_against_the_best_and_the_cut_and_its_ceiling():
    rows = bench.summary_rows([_result("a", compare.CLEAN, 10.0), _result("a", "ssgd", 20.0), _result("a", "kofn", 11.0),
                               _result("a", "auto-heuristic", 11.5),
                               _result("b", compare.CLEAN, 10.0), _result("b", "ssgd", 16.0), _result("b", "batch", 14.0),
                               _result("b", "auto-heuristic", 14.0)])
    lines = {line.split(" | ")[0].strip("| "): line for line in bench.goals_table(rows).splitlines()[2:]}
    # a: auto 4.5% over kofn, 42.5% under SSGD (delay 100% > 50%, ceiling 50%): both goals met
    assert "| 1.045 | yes |" in lines["a"] and "| 42.5% | 50.0% | yes | yes |" in lines["a"]
    # b: delay 60% needs a 40% cut, but removing the whole delay only cuts 37.5%
    assert "| 12.5% | 37.5% | yes (above ceiling) | NO |" in lines["b"]


def test_goals_md_explains_the_cut_ceiling_and_the_other_goal_columns(tmp_path):
    rows = bench.summary_rows([_result("a", compare.CLEAN, 10.0), _result("a", "ssgd", 20.0),
                               _result("a", "auto-heuristic", 11.5)])
    bench.write_summary(tmp_path, rows)
    text = (tmp_path / "goals.md").read_text()
    for column in ("auto/best", "ssgd_delay", "auto_vs_ssgd", "cut_ceiling"):
        assert f"- `{column}`:" in text
    assert "above ceiling" in text.split("- `cut_ceiling`:")[1]


def test_the_summary_gives_tta_s_two_factors_for_real_and_simulated_runs(tmp_path):
    """`star bench --sim --real` left sim_vs_real.md's updates and s/update columns empty: its summary had neither."""
    real = {**_result("t", "batch", 12.0), "updates": 44, "updates_to_target": 40}  # a real job runs past its target
    simulated = {**_result("t", "auto", 9.0), "updates": 36}  # a simulation stops at the target
    missed = {**_result("t", "asgd", None, reached=False), "updates": 500}
    rows = {r["strategy"]: r for r in bench.summary_rows([real, simulated, missed])}
    assert (rows["batch"]["updates_to_target"], rows["batch"]["s_per_update"]) == (40, 0.3)
    assert (rows["auto"]["updates_to_target"], rows["auto"]["s_per_update"]) == (36, 0.25)
    assert (rows["asgd"]["updates_to_target"], rows["asgd"]["s_per_update"]) == (None, None)
    bench.write_summary(tmp_path, list(rows.values()))
    header = (tmp_path / "summary.csv").read_text().splitlines()[0].split(",")
    assert header[-2:] == ["updates_to_target", "s_per_update"]


def test_an_interrupted_bench_still_writes_the_summary_of_the_runs_that_ended(tmp_path):
    """A Ctrl-C said "the runs that ended are under DIR" but left no summary.csv for them."""
    calls = []

    def runner(config, strategy, trace, run_dir):
        calls.append(strategy)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return {"tta_s": 10.0 + len(calls), "reached": True, "updates": 40}

    config = bench.BenchConfig(traces=("synthetic:static",), out=str(tmp_path), strategies=("ssgd", "batch", "auto"),
                               sim=True)
    with pytest.raises(KeyboardInterrupt):
        bench.run_bench(config, runner=runner, log=lambda i, what: None)
    lines = (tmp_path / "summary.csv").read_text().splitlines()
    assert [line.split(",")[1] for line in lines[1:]] == [compare.CLEAN, "ssgd"]
