"""Tests for star.traces: trace loading, step-function replay, stretch, wrap, mapping."""

from __future__ import annotations

import dataclasses
import math
import random
from fractions import Fraction
from pathlib import Path

import pytest

from star.trace_values import TraceError, parse_worker_list
from star.traces import (
    describe_mapping,
    Trace,
    TraceRow,
    WorkerSlowdown,
    load_pai_csv,
    load_simple_csv,
    load_trace,
    load_worker_slowdown,
    slowdown_sleep_s,
    write_simple_csv,
)

PAI_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "alibaba-pai-2020"


def _pai_file(name: str) -> Path:
    path = PAI_DIR / name
    if not path.is_file():
        pytest.skip(f"shared trace {path} not available")
    return path


@pytest.fixture(scope="module")
def job1() -> Trace:
    return load_pai_csv(_pai_file("job_1_norm.csv"))


def _write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# A small trace: worker 0 has rows at 10 and 20; worker 1 sets the span to 40.
STEP_TRACE = Trace.from_rows([(10, 0, 2.0), (20, 0, 3.0), (0, 1, 1.0), (40, 1, 1.5)])


# ---------------------------------------------------------------- real PAI files


def test_pai_job1_has_ten_workers_up_to_iteration_2988(job1: Trace) -> None:
    assert job1.workers == tuple(range(10))
    assert job1.max_iteration == 2988
    assert all(len(job1.steps[w]) == 300 for w in job1.workers)


@pytest.mark.parametrize("name", ["job_1_norm.csv", "job_2_norm.csv"])
def test_pai_fastest_worker_median_factor_is_exactly_one(name: str) -> None:
    summary = load_pai_csv(_pai_file(name)).summary()
    medians = [s["median_factor"] for s in summary.values()]
    assert min(medians) == 1.0


@pytest.mark.parametrize("name", ["job_1_norm.csv", "job_2_norm.csv"])
def test_pai_factors_are_positive_and_near_one_for_most_rows(name: str) -> None:
    trace = load_pai_csv(_pai_file(name))
    factors = [f for pairs in trace.steps.values() for _, f in pairs]
    assert min(factors) > 0
    assert sorted(factors)[len(factors) // 2] < 1.5


def test_pai_job1_worker6_straggles_far_more_than_worker3(job1: Trace) -> None:
    summary = job1.summary()
    assert summary[6]["max_factor"] > 2.0
    assert summary[6]["max_factor"] > 1.5 * summary[3]["max_factor"]


def test_pai_job2_repeated_row_is_tolerated() -> None:
    # job_2 lists worker 3 at iteration 2381 twice (same value).
    trace = load_pai_csv(_pai_file("job_2_norm.csv"))
    assert trace.max_iteration == 2486
    iterations = [it for it, _ in trace.steps[3]]
    assert iterations.count(2381) == 1


@pytest.mark.parametrize("name", ["job_1_norm.csv", "job_2_norm.csv"])
def test_load_trace_detects_pai_header(name: str) -> None:
    path = _pai_file(name)
    assert load_trace(path) == load_pai_csv(path)


def test_pai_trace_replays_with_stretch_over_a_short_run(job1: Trace) -> None:
    slow = job1.slowdown_for(0, 4, "3,4,5,6", stretch=0.1)
    assert slow.trace_worker == 3
    assert slow.span == pytest.approx(298.8)
    assert slow.factor_at(0) == job1.steps[3][0][1]
    assert slow.factor_at(299) == slow.factor_at(0)  # 299 wraps to 0.2, before row 1


# ------------------------------------------------------------- PAI synthetic files

PAI_HEADER = ",worker,gpu,time,batch_time_norm\n"


def test_pai_factor_is_time_over_fastest_workers_median(tmp_path: Path) -> None:
    text = PAI_HEADER + "".join(
        f"{i},{w},25,{it},{t}\n"
        for i, (w, it, t) in enumerate(
            [(0, 1, 200), (1, 1, 100), (0, 11, 300), (1, 11, 120), (0, 21, 200), (1, 21, 100)]
        )
    )
    trace = load_pai_csv(_write(tmp_path, text))
    assert trace.steps[0] == ((1, 2.0), (11, 3.0), (21, 2.0))
    assert trace.steps[1] == ((1, 1.0), (11, 1.2), (21, 1.0))


def test_pai_repeated_worker_iteration_keeps_last_value(tmp_path: Path) -> None:
    text = PAI_HEADER + "0,0,25,1,100\n1,0,25,11,100\n2,0,25,11,300\n3,0,25,21,100\n"
    trace = load_pai_csv(_write(tmp_path, text))
    assert trace.steps[0] == ((1, 1.0), (11, 3.0), (21, 1.0))


@pytest.mark.parametrize("column", ["worker", "time", "batch_time_norm"])
def test_pai_missing_column_is_named(tmp_path: Path, column: str) -> None:
    header = [c for c in ["", "worker", "gpu", "time", "batch_time_norm"] if c != column]
    path = _write(tmp_path, ",".join(header) + "\n" + ",".join(["1"] * len(header)) + "\n")
    with pytest.raises(TraceError, match=f"^{column}: missing column"):
        load_pai_csv(path)


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("0,0,25,1,abc", "batch_time_norm"),
        ("0,0,25,1,0", "batch_time_norm"),
        ("0,0,25,1,-5", "batch_time_norm"),
        ("0,0,25,1,inf", "batch_time_norm"),
        ("0,0,25,x,100", "time"),
        ("0,0,25,-1,100", "time"),
        ("0,0,25,11.5,100", "time"),
        ("0,w,25,1,100", "worker"),
    ],
)
def test_pai_bad_value_names_its_column(tmp_path: Path, row: str, field: str) -> None:
    path = _write(tmp_path, PAI_HEADER + "0,0,25,1,100\n" + row + "\n")
    with pytest.raises(TraceError, match=f"^{field}: .*{path.name}:3"):
        load_pai_csv(path)


@pytest.mark.parametrize("gap", ["", "nan", "NaN", " NA ", "null"])
def test_pai_row_with_a_missing_batch_time_is_skipped_and_the_previous_factor_holds(
        tmp_path: Path, gap: str, caplog: pytest.LogCaptureFixture) -> None:
    text = PAI_HEADER + f"0,0,25,1,100\n1,0,25,11,300\n2,0,25,21,{gap}\n3,0,25,31,100\n4,1,25,31,100\n"
    path = _write(tmp_path, text)
    with caplog.at_level("WARNING", logger="traces"):
        trace = load_pai_csv(path)
    assert trace.steps[0] == ((1, 1.0), (11, 3.0), (31, 1.0))
    slow = trace.slowdown_for(0, 2)
    assert [slow.factor_at(i) for i in (11, 21, 30, 31)] == [3.0, 3.0, 3.0, 1.0]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].fields["rows"] == 1
    assert warnings[0].fields["first"] == f"{path}:4"


def test_pai_rows_cut_short_or_missing_a_worker_or_time_are_skipped(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    text = PAI_HEADER + "0,0,25,1,100\n1,,25,11,300\n2,0,25,,300\n3,0,25,21,200\n4,0,25,31\n5,1,25,1,100\n"
    with caplog.at_level("WARNING", logger="traces"):
        trace = load_pai_csv(_write(tmp_path, text))
    assert trace.steps[0] == ((1, 1.0), (21, 2.0))
    assert [r.fields["rows"] for r in caplog.records if r.levelname == "WARNING"] == [3]


def test_pai_worker_without_a_measured_row_is_left_out(tmp_path: Path) -> None:
    text = PAI_HEADER + "0,0,25,1,100\n1,1,25,1,nan\n2,2,25,1,200\n3,0,25,11,100\n4,1,25,11,\n5,2,25,11,200\n"
    trace = load_pai_csv(_write(tmp_path, text))
    assert trace.workers == (0, 2)
    with pytest.raises(TraceError, match="^trace_workers: "):
        trace.slowdown_for(0, 2, "1,2")


def test_pai_file_with_no_measured_row_names_rows(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="^rows: .*with a worker, time and batch time"):
        load_pai_csv(_write(tmp_path, PAI_HEADER + "0,0,25,1,nan\n1,1,25,1,\n"))


def test_pai_integer_columns_written_as_integral_floats_are_read(tmp_path: Path) -> None:
    # pandas writes an integer column that holds a NaN anywhere as floats: "11.0".
    text = PAI_HEADER + "0,0.0,25.0,1.0,100.0\n1,0.0,25.0,11.0,250.0\n2,1.0,25.0,11.0,100.0\n"
    trace = load_trace(_write(tmp_path, text))
    assert trace.steps[0] == ((1, 1.0), (11, 2.5))
    assert trace.workers == (0, 1)


def test_pai_batch_time_column_is_read_when_the_normalised_one_is_absent(tmp_path: Path) -> None:
    text = ",worker,gpu,time,batch_time\n0,0,25,1,0.5\n1,0,25,11,1.5\n2,1,25,11,0.5\n"
    trace = load_trace(_write(tmp_path, text))
    assert trace.steps[0] == ((1, 1.0), (11, 3.0))


@pytest.mark.parametrize("header", ["\ufeff,worker,gpu,time,batch_time_norm", ",worker ,gpu, time , batch_time_norm "])
def test_pai_header_with_a_byte_order_mark_or_padded_names_is_read(tmp_path: Path, header: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(header + "\n0,0,25,1,100\n1,0,25,11,200\n2,1,25,1,100\n", encoding="utf-8")
    assert load_trace(path).steps[0] == ((1, 1.0), (11, 2.0))


def test_simple_csv_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("\ufeffiteration,worker,factor\n0,0,1\n10,0,2\n", encoding="utf-8")
    assert load_trace(path).steps[0] == ((0, 1.0), (10, 2.0))


# ------------------------------------------------------------------- simple CSV


def test_simple_csv_factors_are_taken_as_is(tmp_path: Path) -> None:
    path = _write(tmp_path, "iteration,worker,factor\n0,1,1.0\n50,1,3\n0,0,0.75\n")
    trace = load_simple_csv(path)
    assert trace.workers == (0, 1)
    assert trace.steps[1] == ((0, 1.0), (50, 3.0))
    assert trace.steps[0] == ((0, 0.75),)
    assert trace.max_iteration == 50


def test_load_trace_detects_simple_header(tmp_path: Path) -> None:
    path = _write(tmp_path, "iteration, worker, factor\n0,0,2\n10,0,1\n")
    assert load_trace(path) == load_simple_csv(path)


def test_write_simple_csv_round_trips_exactly(tmp_path: Path) -> None:
    trace = Trace.from_rows([(0, 0, 1 / 3), (7, 0, 2.5), (0, 4, 1e-3), (1000, 4, 3.0)])
    path = write_simple_csv(trace, tmp_path / "out.csv")
    assert path.read_text().splitlines()[0] == "iteration,worker,factor"
    assert load_trace(path) == Trace.from_rows(trace.rows(), source=str(path))
    assert load_trace(path).steps == trace.steps


def test_write_simple_csv_builds_a_middle_half_straggler(tmp_path: Path) -> None:
    # The benchmark's scenario: worker 1 is 3x slower for the middle half of 400 iterations.
    rows = [(0, w, 1.0) for w in range(4)] + [(100, 1, 3.0), (300, 1, 1.0), (400, 1, 1.0)]
    path = write_simple_csv(Trace.from_rows(rows), tmp_path / "mid.csv")
    slow = load_worker_slowdown(path, run_worker=1, num_workers=4)
    assert [slow.factor_at(i) for i in (0, 99, 100, 299, 300, 399)] == [1, 1, 3, 3, 1, 1]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("iteration,worker\n0,0\n", "factor"),
        ("worker,factor\n0,1.0\n", "iteration"),
        ("iteration,factor\n0,1.0\n", "worker"),
        ("iteration,worker,factor\n0,0,fast\n", "factor"),
        ("iteration,worker,factor\n0,0,0\n", "factor"),
        ("iteration,worker,factor\n0,0,-2\n", "factor"),
        ("iteration,worker,factor\n0,0,nan\n", "factor"),
        ("iteration,worker,factor\n0,0,inf\n", "factor"),
        ("iteration,worker,factor\n0,0,\n", "factor"),
        ("iteration,worker,factor\n1.5,0,1\n", "iteration"),
        ("iteration,worker,factor\n-1,0,1\n", "iteration"),
        ("iteration,worker,factor\n0,x,1\n", "worker"),
        ("iteration,worker,factor\n0,-3,1\n", "worker"),
        ("iteration,worker,factor\n5,0,1\n5,0,2\n", "iteration"),
        ("iteration,worker,factor\n0,0,1\n", "iteration"),  # span would be 0
        ("iteration,worker,factor\n", "rows"),
        ("", "header"),
        ("\n", "header"),
        ("a,b,c\n1,2,3\n", "header"),
    ],
)
def test_bad_simple_csv_raises_naming_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(TraceError, match=f"^{field}: "):
        load_trace(path)


def test_trace_error_is_a_value_error() -> None:
    assert issubclass(TraceError, ValueError)


# ------------------------------------------------------------ step semantics


@pytest.mark.parametrize(
    ("iteration", "expected"),
    [
        (0, 2.0),  # before the first row: first row's factor
        (9, 2.0),
        (10, 2.0),
        (19, 2.0),  # holds until the next row
        (20, 3.0),
        (39, 3.0),  # after the last row: holds until the span
        (40, 2.0),  # span = 40: wraps to 0
        (50, 2.0),
        (60, 3.0),
        (40 * 1000 + 25, 3.0),
    ],
)
def test_factor_is_a_step_function_holding_until_the_next_row(
    iteration: int, expected: float
) -> None:
    (slow,) = STEP_TRACE.for_run_workers(1)
    assert slow.factor_at(iteration) == expected


RAMP = Trace.from_rows([(0, 0, 1.0), (100, 0, 3.0), (200, 0, 1.0), (300, 0, 1.0)])


@pytest.mark.parametrize(
    ("stretch", "iteration", "expected"),
    [
        (0.1, 9, 1.0),
        (0.1, 10, 3.0),
        (0.1, 19, 3.0),
        (0.1, 20, 1.0),
        (0.1, 30, 1.0),  # span 30 wraps to 0
        (0.1, 40, 3.0),
        (2.0, 199, 1.0),
        (2.0, 200, 3.0),
        (2.0, 399, 3.0),
        (2.0, 400, 1.0),
        (2.0, 800, 3.0),  # span 600 wraps 800 to 200
    ],
)
def test_stretch_scales_trace_iterations(stretch: float, iteration: int, expected: float) -> None:
    (slow,) = RAMP.for_run_workers(1, stretch=stretch)
    assert slow.factor_at(iteration) == expected


def test_stretch_boundaries_are_exact_decimals() -> None:
    # 30 * 0.1 is 3.0000000000000004 in floats; the row must still start at run iteration 3.
    trace = Trace.from_rows([(0, 0, 1.0), (30, 0, 2.0), (60, 0, 1.0)])
    (slow,) = trace.for_run_workers(1, stretch=0.1)
    assert [slow.factor_at(i) for i in range(10)] == [1, 1, 1, 2, 2, 2, 1, 1, 1, 2]


def test_wrap_with_a_fractional_span() -> None:
    # Rows start at 0, 1 and 2.5 run iterations; span 2.5.
    trace = Trace.from_rows([(0, 0, 1.0), (10, 0, 2.0), (25, 0, 3.0)])
    (slow,) = trace.for_run_workers(1, stretch=0.1)
    assert slow.span == 2.5
    assert [slow.factor_at(i) for i in range(6)] == [1.0, 2.0, 2.0, 1.0, 2.0, 1.0]


def test_span_is_the_whole_traces_max_iteration_times_stretch() -> None:
    slows = STEP_TRACE.for_run_workers(2, stretch=0.5)
    assert [s.span for s in slows] == [20.0, 20.0]


def test_span_of_exactly_one_iteration_replays_the_first_factor() -> None:
    trace = Trace.from_rows([(0, 0, 4.0), (10, 0, 1.0)])
    (slow,) = trace.for_run_workers(1, stretch=0.1)
    assert {slow.factor_at(i) for i in range(20)} == {4.0}


@pytest.mark.parametrize("stretch", [0.09, 0.0, -1.0, math.nan, math.inf])
def test_bad_stretch_or_span_below_one_iteration_names_stretch(stretch: float) -> None:
    trace = Trace.from_rows([(0, 0, 4.0), (10, 0, 1.0)])
    with pytest.raises(TraceError, match="^stretch: "):
        trace.for_run_workers(1, stretch=stretch)


def _reference_factor(pairs, max_iteration: int, stretch: float, iteration: int) -> float:
    """Linear scan straight from the contract, in exact arithmetic."""
    s = Fraction(str(stretch))
    span = max_iteration * s
    position = Fraction(iteration) % span
    chosen = pairs[0][1]
    for it, factor in pairs:
        if it * s <= position:
            chosen = factor
    return chosen


@pytest.mark.parametrize("stretch", [1.0, 0.1, 0.37, 2.5, 3.0, 0.013])
def test_factor_at_matches_a_linear_scan_of_the_contract(stretch: float) -> None:
    rng = random.Random(stretch)
    rows = []
    for worker in range(3):
        for it in sorted(rng.sample(range(1, 500), 25)):
            rows.append((it, worker, round(rng.uniform(0.8, 3.0), 3)))
    trace = Trace.from_rows(rows)
    for slow in trace.for_run_workers(3, stretch=stretch):
        pairs = trace.steps[slow.trace_worker]
        for i in range(0, 2000, 7):
            assert slow.factor_at(i) == _reference_factor(pairs, trace.max_iteration, stretch, i)


def test_factor_at_rejects_negative_iteration() -> None:
    (slow,) = STEP_TRACE.for_run_workers(1)
    with pytest.raises(TraceError, match="^iteration: "):
        slow.factor_at(-1)


# -------------------------------------------------------------------- mapping

SPARSE = Trace.from_rows([(0, 9, 9.0), (10, 9, 9.0), (0, 2, 2.0), (0, 5, 5.0)])


def test_default_mapping_takes_first_trace_workers_in_sorted_order() -> None:
    slows = SPARSE.for_run_workers(2)
    assert [s.trace_worker for s in slows] == [2, 5]
    assert [s.factor_at(3) for s in slows] == [2.0, 5.0]


def test_default_mapping_beyond_trace_workers_means_no_slowdown() -> None:
    slows = SPARSE.for_run_workers(5)
    assert [s.trace_worker for s in slows] == [2, 5, 9, None, None]
    assert [s.factor_at(3) for s in slows] == [2.0, 5.0, 9.0, 1.0, 1.0]


@pytest.mark.parametrize("mapping", ["9,2", " 9 , 2 ", (9, 2), [9, 2]])
def test_explicit_mapping_assigns_run_worker_r_to_list_entry_r(mapping) -> None:
    slows = SPARSE.for_run_workers(2, trace_workers=mapping)
    assert [(s.run_worker, s.trace_worker) for s in slows] == [(0, 9), (1, 2)]
    assert [s.factor_at(0) for s in slows] == [9.0, 2.0]


def test_explicit_mapping_may_repeat_a_trace_worker() -> None:
    slows = SPARSE.for_run_workers(2, trace_workers="5,5")
    assert [s.factor_at(0) for s in slows] == [5.0, 5.0]


@pytest.mark.parametrize("mapping", ["2,5", "2,5,9,2", "2,5,7", (2, 5, 3)])
def test_explicit_mapping_of_wrong_length_or_unknown_worker_names_trace_workers(
    mapping,
) -> None:
    with pytest.raises(TraceError, match="^trace_workers: "):
        SPARSE.for_run_workers(3, trace_workers=mapping)


@pytest.mark.parametrize(
    ("run_worker", "num_workers", "field"),
    [(3, 3, "run_worker"), (-1, 3, "run_worker"), (0, 0, "num_workers")],
)
def test_slowdown_for_rejects_bad_worker_indices(run_worker, num_workers, field) -> None:
    with pytest.raises(TraceError, match=f"^{field}: "):
        SPARSE.slowdown_for(run_worker, num_workers)


def test_load_worker_slowdown_equals_the_traces_schedule(tmp_path: Path) -> None:
    path = write_simple_csv(SPARSE, tmp_path / "sparse.csv")
    direct = SPARSE.for_run_workers(2, "9,5", stretch=0.5)
    loaded = [load_worker_slowdown(path, r, 2, "9,5", 0.5) for r in range(2)]
    assert loaded == direct


@pytest.mark.parametrize(
    ("text", "expected"),
    [("3,4,5,6", (3, 4, 5, 6)), (" 3 , 4 ", (3, 4)), ("7", (7,)), ("0,0", (0, 0))],
)
def test_parse_worker_list_accepts_comma_separated_ids(text: str, expected) -> None:
    assert parse_worker_list(text) == expected


@pytest.mark.parametrize("text", ["", "  ", "3,,4", "3,", "a,b", "3,-1", "3.5"])
def test_parse_worker_list_rejects_malformed_lists_naming_trace_workers(text: str) -> None:
    with pytest.raises(TraceError, match="^trace_workers: "):
        parse_worker_list(text)


# --------------------------------------------------------- Trace construction


def test_trace_exposes_sorted_workers_max_iteration_and_summary() -> None:
    trace = Trace.from_rows(
        [TraceRow(5, 3, 2.0), TraceRow(0, 3, 1.0), TraceRow(9, 3, 4.0), TraceRow(7, 1, 1.5)]
    )
    assert trace.workers == (1, 3)
    assert trace.max_iteration == 9
    assert trace.steps[3] == ((0, 1.0), (5, 2.0), (9, 4.0))
    assert trace.summary() == {
        1: {"median_factor": 1.5, "max_factor": 1.5, "rows": 1},
        3: {"median_factor": 2.0, "max_factor": 4.0, "rows": 3},
    }


def test_trace_steps_are_immutable() -> None:
    with pytest.raises(TypeError):
        STEP_TRACE.steps[0] = ((0, 1.0),)  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        STEP_TRACE.source = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("rows", "field"),
    [
        ([], "rows"),
        ([(0, 0, 1.0), (0, 0, 2.0)], "iteration"),
        ([(0, 0, 1.0), (5, 0, 0.0)], "factor"),
        ([(0, 0, 1.0), (5, 0, math.nan)], "factor"),
        ([(-1, 0, 1.0), (5, 0, 1.0)], "iteration"),
        ([(0, -1, 1.0), (5, 0, 1.0)], "worker"),
        ([(0, 0)], "rows"),
        ([(0.5, 0, 1.0), (5, 0, 1.0)], "iteration"),
    ],
)
def test_from_rows_rejects_bad_rows_naming_the_field(rows, field: str) -> None:
    with pytest.raises(TraceError, match=f"^{field}: "):
        Trace.from_rows(rows)


# ------------------------------------------------------------- WorkerSlowdown


def test_worker_slowdown_is_built_from_plain_data() -> None:
    slow = WorkerSlowdown(2, 6, (1, 11), (1.0, 2.0), max_iteration=20, stretch=1.0)
    assert [slow.factor_at(i) for i in (0, 10, 11, 19, 20, 31)] == [1.0, 1.0, 2.0, 2.0, 1.0, 2.0]


def test_no_slowdown_schedule_is_always_one() -> None:
    slow = WorkerSlowdown.no_slowdown(4)
    assert slow.trace_worker is None
    assert {slow.factor_at(i) for i in range(0, 10_000, 97)} == {1.0}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"iterations": (5, 1), "factors": (1.0, 2.0)}, "iterations"),
        ({"iterations": (1, 1), "factors": (1.0, 2.0)}, "iterations"),
        ({"iterations": (1, 5), "factors": (1.0,)}, "factors"),
        ({"iterations": (1, 5), "factors": (1.0, -2.0)}, "factors"),
        ({"iterations": (1, 50), "factors": (1.0, 2.0)}, "max_iteration"),
        ({"max_iteration": 0, "iterations": (), "factors": ()}, "max_iteration"),
        ({"stretch": 0.01}, "stretch"),
        ({"run_worker": -1}, "run_worker"),
    ],
)
def test_worker_slowdown_rejects_inconsistent_data(kwargs: dict, field: str) -> None:
    args = {
        "run_worker": 0,
        "trace_worker": 0,
        "iterations": (1, 5),
        "factors": (1.0, 2.0),
        "max_iteration": 10,
        "stretch": 1.0,
    } | kwargs
    with pytest.raises(TraceError, match=f"^{field}: "):
        WorkerSlowdown(**args)


# -------------------------------------------------------------------- sleeping


@pytest.mark.parametrize(
    ("compute_s", "factor", "expected"),
    [(1.0, 3.0, 2.0), (0.5, 1.0, 0.0), (1.0, 0.9, 0.0), (0.0, 5.0, 0.0), (0.2, 1.5, 0.1)],
)
def test_slowdown_sleep_is_the_extra_time_above_compute(compute_s, factor, expected) -> None:
    assert slowdown_sleep_s(compute_s, factor) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("compute_s", "factor", "field"),
    [(-1.0, 2.0, "compute_s"), (math.nan, 2.0, "compute_s"), (1.0, 0.0, "factor"),
     (1.0, math.inf, "factor")],
)
def test_slowdown_sleep_rejects_bad_inputs(compute_s, factor, field) -> None:
    with pytest.raises(TraceError, match=f"^{field}: "):
        slowdown_sleep_s(compute_s, factor)


def test_describe_mapping_names_each_run_workers_source_and_its_factors():
    trace = Trace.from_rows([(0, 0, 1.0), (0, 1, 2.0), (10, 1, 4.0), (0, 2, 1.5)])
    line = describe_mapping(trace, 2, "2,1")
    assert line == "run worker <- trace worker: 0<-2 (1.50x median, 1.50x max), 1<-1 (3.00x median, 4.00x max)"


@pytest.mark.parametrize("workers, idle", [(4, "worker 3 replays nothing"), (6, "workers 3-5 replay nothing")])
def test_describe_mapping_says_which_run_workers_past_the_trace_replay_nothing(workers, idle):
    trace = Trace.from_rows([(it, w, 1.0) for w in range(3) for it in (0, 10)])
    assert describe_mapping(trace, workers).endswith(f", {idle} (the trace has 3 workers)")
