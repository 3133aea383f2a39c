"""benchmarks.unseen_traces: cases nobody tuned for, the row and verdict arithmetic, the JSON line, bad input."""

import csv
import json

import pytest

from benchmarks.unseen_traces import Case, case_row, generated_cases, main, subset_cases, verdict
from star.traces import load_trace



@pytest.fixture
def six_workers(tmp_path) -> str:
    """A trace file of 6 workers, as a real job's would be (written here: the shared traces may be absent)."""
    from star.sim.generators import transient
    from star.traces import write_simple_csv

    return str(write_simple_csv(transient(6, 40, seed=3), tmp_path / "six.csv"))


def _case(name: str = "c") -> Case:
    return Case(name, lambda path: None)


def test_a_row_compares_auto_with_the_best_fixed_strategy_and_mitigates_only_a_large_delay():
    row = case_row(_case(), {"clean": 10.0, "ssgd": 20.0, "batch": 12.0, "amp": 15.0, "auto": 12.6})
    assert row["best_fixed"] == "batch" and row["auto_over_best"] == 1.05
    assert row["ssgd_delay"] == 1.0 and row["mitigation"] == 0.74  # (20 - 12.6) / (20 - 10)
    small = case_row(_case(), {"clean": 10.0, "ssgd": 12.0, "batch": 12.5, "amp": 13.0, "auto": 11.0})
    assert small["best_fixed"] == "ssgd" and small["mitigation"] is None  # a delay of 20%: no mitigation goal


def test_the_verdict_names_the_worst_case_and_counts_those_over_5_percent():
    rows = [{"case": "a", "auto_over_best": 0.98}, {"case": "b", "auto_over_best": 1.07}, {"case": "c", "auto_over_best": 1.01}]
    assert verdict(rows) == {"cases": 3, "median_auto_over_best": 1.01, "worst_auto_over_best": 1.07, "worst_case": "b",
                             "over_1_05": 1}


def test_generated_cases_use_seeds_the_shipped_scenarios_do_not(tmp_path):
    cases = generated_cases(2, 4)
    assert len(cases) == 46 and all(c.name.endswith((" s1", " s2")) for c in cases)
    cases[0].write(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text().startswith("iteration,worker,factor")


@pytest.mark.parametrize("name, factor", [("transient 3x early s1", 3.0), ("transient 5x early s2", 5.0)])
def test_the_early_transient_cases_recover_well_before_the_target(tmp_path, name, factor):
    """The other transient cases recover at iteration 75, after the ~40 updates digits needs: a sweep of those alone
    never sees how a recovery is followed."""
    case = next(c for c in generated_cases(2, 4) if c.name == name)
    case.write(tmp_path / "t.csv")
    trace = load_trace(tmp_path / "t.csv")
    slowed = [w for w, steps in trace.steps.items() if any(f > 1 for _, f in steps)]
    steps = trace.steps[slowed[0]]
    assert len(slowed) == 1 and steps[:3] == ((0, 1.0), (10, factor), (30, 1.0)) and all(f == 1.0 for _, f in steps[2:])


def test_subsets_are_distinct_seeded_and_run_at_every_stretch(six_workers):
    cases = subset_cases([six_workers], 3, 4)
    assert len(cases) == 6 and len({c.trace_workers for c in cases}) == 3
    assert {c.stretch for c in cases} == {0.025, 0.1}
    assert [c.name for c in cases] == [c.name for c in subset_cases([six_workers], 3, 4)]


def test_the_sweep_writes_its_tables_and_ends_with_one_json_line(six_workers, tmp_path, capsys):
    assert main(["--generator-seeds", "0", "--traces", six_workers, "--subsets", "1", "--seeds", "1", "--out", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["cases"] == 2 and summary["worst_auto_over_best"] > 0
    rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert len(rows) == 2 and all(float(r["auto_s"]) > 0 for r in rows)
    assert (tmp_path / "summary.md").read_text().startswith("| case |")


@pytest.mark.parametrize("argv, named", [(["--seeds", "0"], "--seeds"), (["--traces", "nope.csv"], "nope.csv"),
                                         (["--generator-seeds", "0"], "nothing to run"),
                                         (["--traces", "SIX", "--workers", "7"], "--workers 7")])
def test_bad_input_is_one_line_naming_the_value_with_exit_2(argv, named, six_workers, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([six_workers if a == "SIX" else a for a in argv] + ["--out", str(tmp_path)])
    assert exit_info.value.code == 2 and named in capsys.readouterr().err
