"""benchmarks/strategies.py: the summary table's columns and paired figures (no real runs)."""

from __future__ import annotations

import csv

import pytest

from benchmarks import strategies

REQUIRED = ("strategy", "run", "tta_s", "reached", "updates_to_target", "s_per_update", "tta_lo_s", "tta_hi_s")


def fake_run(args, strategy, trace, out, seed):
    """TTA = updates x s/update, with a per-seed factor every strategy shares (the pairing)."""
    s_per_update = {"ssgd": 0.6, "batch": 0.3, "kofn": 0.4, "auto": 0.31}[strategy] if trace else 0.3
    updates = 50 + 5 * seed
    return {"reached": not (strategy == "kofn" and seed == 2), "tta_s": updates * s_per_update, "final_metric": 0.96,
            "updates": updates + 3, "updates_to_target": updates, "s_per_update": s_per_update,
            "straggler_detections": 1 if trace else 0, "plan_switches": 0, "amp_toggles": 0, "batch_resizes": 2}


def test_summary_csv_has_the_interface_columns_and_paired_ratios(tmp_path, monkeypatch):
    monkeypatch.setattr(strategies, "run_one", fake_run)
    monkeypatch.setattr(strategies, "write_report", lambda runs, out=None: None)  # no run directories to draw
    out = tmp_path / "out"
    assert strategies.main(["--trace", "mid3x", "--strategies", "ssgd,batch,kofn,auto", "--repeats", "3", "--out", str(out)]) == 0
    with open(out / "summary.csv", newline="") as handle:
        rows = {r["run"]: r for r in csv.DictReader(handle)}
    assert set(REQUIRED) <= set(next(iter(rows.values())))
    assert list(rows) == ["clean", "ssgd", "batch", "kofn", "auto", "auto-clean"]
    batch, auto, kofn = rows["batch"], rows["auto"], rows["kofn"]
    assert float(batch["tta_s"]) == pytest.approx(55 * 0.3)
    assert float(batch["tta_lo_s"]) == pytest.approx(50 * 0.3) and float(batch["tta_hi_s"]) == pytest.approx(60 * 0.3)
    assert float(batch["updates_to_target"]) == 55 and float(batch["s_per_update"]) == 0.3
    assert kofn["reached"] == "2/3"
    assert auto["best"] == "batch"
    # paired: every seed's auto/batch ratio is 0.31/0.3, so the interval is that one value
    assert float(auto["vs_best"]) == pytest.approx(0.31 / 0.3, abs=1e-3)
    assert float(auto["vs_best_lo"]) == pytest.approx(0.31 / 0.3, abs=1e-3) == pytest.approx(float(auto["vs_best_hi"]), abs=1e-3)
    assert float(batch["vs_ssgd"]) == pytest.approx(0.5)
    assert float(batch["mitigation"]) == pytest.approx(1.0)
    # seed by seed: (0.6 - 0.31) / (0.6 - 0.3) in every seed, whatever its updates to target
    assert float(auto["mitigation_paired"]) == pytest.approx(0.29 / 0.3, abs=1e-3)
    assert float(auto["mitigation_paired_lo"]) == pytest.approx(float(auto["mitigation_paired_hi"]), abs=1e-3)
    assert rows["clean"]["mitigation_paired"] == "" and rows["auto-clean"]["mitigation_paired"] == ""
    assert rows["auto-clean"]["detections"] == "0"
    no_trace = rows["auto-clean"]  # paired against clean SSGD seed by seed, with an interval like the other ratios
    assert float(no_trace["vs_clean"]) == float(no_trace["vs_clean_lo"]) == float(no_trace["vs_clean_hi"]) == 1.0
    assert float(auto["vs_clean"]) == pytest.approx(0.31 / 0.3, abs=1e-3)


def test_paired_mitigation_is_taken_seed_by_seed_not_from_medians_of_different_seeds():
    clean, straggled = [10.0, 13.0, 11.0], [20.0, 22.0, 21.0]
    auto = [11.0, 13.0, 13.0]  # per seed 0.9, 1.0, 0.8
    median, lo, hi = strategies.paired_mitigation(clean, straggled, auto, 0.9)
    assert median == pytest.approx(0.9) and lo == pytest.approx(0.8) and hi == pytest.approx(1.0)
    unpaired = strategies.mitigation(11.0, 21.0, 13.0)  # medians: 0.8, taken from three different seeds' runs
    assert unpaired == pytest.approx(0.8)
    assert strategies.paired_mitigation(clean, straggled, [None, 13.0, 13.0], 0.9)[0] == pytest.approx(0.9)


def test_an_interrupted_run_stops_the_whole_strategies_benchmark_and_keeps_what_was_measured(tmp_path, monkeypatch, capsys):
    """SIGTERM or Ctrl-C reaches the job being launched; the benchmark must not go on to the next run."""
    import benchmarks.strategies as strategies
    import star.launch

    results = iter([{"reached": True, "tta_s": 10.0, "final_metric": 0.96, "updates": 40, "interrupted": False},
                    {"reached": False, "tta_s": None, "final_metric": 0.5, "updates": 3, "interrupted": True}])
    launched = []
    monkeypatch.setattr(star.launch, "launch", lambda config: launched.append(config) or next(results))
    monkeypatch.setattr(strategies, "write_report", lambda dirs, *rest: None)
    code = strategies.main(["--trace", "mid3x", "--strategies", "ssgd", "--repeats", "2", "--out", str(tmp_path)])
    assert code == 130 and len(launched) == 2
    assert len((tmp_path / "runs.csv").read_text().splitlines()) == 2  # header + the run that ended
    assert "interrupted" in capsys.readouterr().err


def test_launch_or_stop_returns_a_finished_job_s_result(monkeypatch):
    import star.launch

    monkeypatch.setattr(star.launch, "launch", lambda config: {"reached": True, "interrupted": False})
    assert star.launch.launch_or_stop(None)["reached"] is True


def test_launch_or_stop_turns_an_interruption_before_any_result_into_a_stop_of_the_benchmark(monkeypatch):
    import star.launch
    from star.processes import InterruptedBeforeResult

    def interrupted(config):
        raise InterruptedBeforeResult("interrupted before a result was written")

    monkeypatch.setattr(star.launch, "launch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        star.launch.launch_or_stop(None)


def test_summarise_only_rewrites_the_same_summary_from_runs_csv(tmp_path, monkeypatch):
    monkeypatch.setattr(strategies, "run_one", fake_run)
    monkeypatch.setattr(strategies, "write_report", lambda runs, out=None: None)
    out = tmp_path / "out"
    assert strategies.main(["--trace", "mid3x", "--strategies", "ssgd,batch,kofn,auto", "--repeats", "3", "--out", str(out)]) == 0
    first = (out / "summary.csv").read_text()
    (out / "summary.csv").unlink()
    monkeypatch.setattr(strategies, "run_one", lambda *a: pytest.fail("--summarise-only ran a job"))
    assert strategies.main(["--summarise-only", "--out", str(out)]) == 0
    assert (out / "summary.csv").read_text() == first


def test_summarise_only_without_runs_csv_names_the_missing_file(tmp_path, capsys):
    assert strategies.main(["--summarise-only", "--out", str(tmp_path / "nothing")]) == 2
    assert "nothing/runs.csv" in capsys.readouterr().err
