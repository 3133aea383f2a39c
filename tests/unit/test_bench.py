"""`star bench`: the summary tables, mitigation, and every output of a small simulated run."""

from __future__ import annotations

import csv

import pytest

from benchmarks import bench
from star.cli import main
from star.traces import Trace, write_simple_csv

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _result(trace, strategy, tta, reached=True):
    return {"trace": trace, "strategy": strategy, "workers": 4, "tta_s": tta, "reached": reached}


def test_mitigation_is_the_share_of_the_straggler_delay_removed():
    rows = bench.summary_rows([_result("t", bench.CLEAN, 10.0), _result("t", "ssgd", 20.0), _result("t", "kofn", 12.0),
                               _result("t", "asgd", None, reached=False)])
    by = {r["strategy"]: r["mitigation"] for r in rows}
    assert by == {bench.CLEAN: None, "ssgd": 0.0, "kofn": 0.8, "asgd": None}


def test_best_per_trace_ignores_clean_ssgd_and_misses():
    rows = bench.summary_rows([_result("t", bench.CLEAN, 5.0), _result("t", "ssgd", 20.0), _result("t", "kofn", 12.0),
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
    assert [(r["trace"], r["strategy"]) for r in rows] == [("slow3", bench.CLEAN), ("slow3", "ssgd"), ("slow3", "kofn")]
    assert all(r["reached"] == "True" and float(r["tta_s"]) > 0 for r in rows)
    tta = {r["strategy"]: float(r["tta_s"]) for r in rows}
    best = min(("ssgd", "kofn"), key=tta.get)
    assert f"| **slow3** | **{best}** |" in (out / "summary.md").read_text()
    for name in ("curves_slow3.png", "tta.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000
    assert (out / "runs" / "slow3" / "kofn" / "result.json").exists()
    assert "[3/3] slow3 kofn" in capsys.readouterr().err


def test_a_bad_strategy_name_fails_before_any_run(tmp_path, capsys):
    code = main(["bench", "--traces", "synthetic:static", "--sim", "--strategies", "ssgd,oracle", "--out", str(tmp_path / "b")])
    assert code == 2 and "oracle" in capsys.readouterr().err
    assert not (tmp_path / "b" / "summary.csv").exists()
