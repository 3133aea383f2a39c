"""Straggler slowdown traces and their replay.

A trace gives, per *trace worker*, a slowdown factor as a step function of the
iteration number. A run worker multiplies its measured compute time by the factor
for its current iteration (in practice: sleeps ``slowdown_sleep_s`` after computing).

Replay contract (relied on by the launcher and the worker daemon):

* A row's iteration number is taken literally; its factor holds until the next row
  of the same worker. Before a worker's first row, its first factor applies. After
  its last row, its last factor applies until the trace wraps.
* ``stretch`` (> 0) multiplies the trace's iteration numbers, so ``stretch=0.1``
  plays a 3,000-iteration trace over 300 run iterations. Stretch is applied exactly
  (as the decimal the caller wrote), so ``0.1 * 30`` is 3, not 3.0000000000000004.
* The trace span is ``max_iteration * stretch``, where ``max_iteration`` is the
  largest iteration number in the whole trace. A run iteration ``i >= span`` is
  looked up at ``i mod span``. A span below one run iteration is rejected.
* Run worker ``r`` replays trace worker ``trace_workers[r]`` when a mapping is given
  (its length must equal the number of run workers); by default the first N trace
  workers in sorted id order. If the default mapping runs out of trace workers, the
  remaining run workers get factor 1.0 (no slowdown).
* Each run worker indexes the trace by its own 0-based iteration counter.

Two file formats, detected from the header by ``load_trace``:

* Alibaba PAI mini-batch times: ``,worker,gpu,time,batch_time_norm`` where ``time``
  is the iteration number. Factor = batch time / median batch time of the fastest
  worker (lowest median; ties go to the lowest id). A repeated (worker, time) row
  keeps the last value, because the published job_2 file contains one. Real exports
  have gaps, so a row whose worker, time or batch time is missing (empty, NaN-like,
  or cut short) is skipped with one warning, and that worker's previous factor holds
  over it; a worker with no measured row is left out. ``batch_time`` is read when
  ``batch_time_norm`` is absent (factors are ratios either way).
* The project's simple CSV: ``iteration,worker,factor`` with factors taken as is.
"""

from __future__ import annotations

import csv
import logging
import math
import numbers
import statistics
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

from star.trace_values import (
    PAI_COLUMNS, PAI_TIME_COLUMNS, SIMPLE_COLUMNS, PAI_MARKERS, SIMPLE_MARKERS, WorkerList, check_factor, check_index,
    check_num_workers, exact_stretch, fail, is_missing_cell, normalise_worker_list, parse_float_cell, parse_int_cell,
)
from star.logs import log

logger = logging.getLogger("traces")

__all__ = [
    "TraceRow",
    "Trace",
    "WorkerSlowdown",
    "load_trace",
    "load_pai_csv",
    "load_simple_csv",
    "write_simple_csv",
    "describe_mapping",
    "load_worker_slowdown",
    "slowdown_sleep_s",
]

# ------------------------------------------------------------------ per-run-worker


IntOrArray = TypeVar("IntOrArray")


def trace_position(iteration: IntOrArray, stretch: Fraction, max_iteration: int) -> IntOrArray:
    """The trace row a run's 0-based iteration replays: iteration / stretch, rounded down to the
    row's integer iteration and wrapped around at max_iteration. Kept in integers (iteration x den
    // num) so that boundaries are exact. Works on an int and, elementwise, on an integer numpy
    array (the simulator replays many workers at once with this same rule)."""
    scaled = iteration * stretch.denominator
    scaled %= max_iteration * stretch.numerator
    return scaled // stretch.numerator


@dataclass(frozen=True)
class WorkerSlowdown:
    """The slowdown schedule of ONE run worker, built from plain data so a daemon can
    rebuild it from the trace path, its worker id, the mapping and the stretch.

    ``iterations``/``factors`` are the trace worker's rows in trace units; empty means
    no slowdown (factor 1.0 everywhere). ``max_iteration`` is the whole trace's largest
    iteration number, which sets the wrap-around span together with ``stretch``.
    """

    run_worker: int
    trace_worker: int | None
    iterations: tuple[int, ...]
    factors: tuple[float, ...]
    max_iteration: int
    stretch: float = 1.0
    _stretch_q: Fraction = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_index(self.run_worker, "run_worker")
        if self.trace_worker is not None:
            check_index(self.trace_worker, "trace_worker")
        object.__setattr__(self, "iterations", tuple(self.iterations))
        object.__setattr__(self, "factors", tuple(self.factors))
        self._check_steps()
        stretch_q = exact_stretch(self.stretch)
        check_index(self.max_iteration, "max_iteration")
        if self.max_iteration < 1:
            raise fail("max_iteration", self.max_iteration, "must be >= 1 for a non-empty span")
        if self.max_iteration * stretch_q < 1:
            raise fail(
                "stretch",
                self.stretch,
                f"span = max_iteration {self.max_iteration} x stretch is below one iteration",
            )
        object.__setattr__(self, "_stretch_q", stretch_q)

    def _check_steps(self) -> None:
        """Bisect needs strictly increasing iterations, each paired with a valid factor."""
        if len(self.iterations) != len(self.factors):
            raise fail(
                "factors", len(self.factors), f"length must match iterations ({len(self.iterations)})"
            )
        previous = -1
        for iteration in self.iterations:
            check_index(iteration, "iterations")
            if iteration <= previous:
                raise fail("iterations", iteration, "must be strictly increasing")
            previous = iteration
        if self.iterations and self.iterations[-1] > self.max_iteration:
            raise fail("max_iteration", self.max_iteration, "is below the last iteration")
        for factor in self.factors:
            check_factor(factor, "factors")

    @classmethod
    def no_slowdown(cls, run_worker: int) -> WorkerSlowdown:
        """A schedule that never slows its worker down (factor 1.0 throughout)."""
        return cls(run_worker, None, (), (), max_iteration=1)

    @property
    def span(self) -> float:
        """Run iterations the trace covers before it wraps around."""
        return float(self.max_iteration * self._stretch_q)

    @property
    def stretch_fraction(self) -> Fraction:
        """The stretch as the exact fraction that trace positions are computed with."""
        return self._stretch_q

    def factor_at(self, iteration: int) -> float:
        """Slowdown factor for this worker's 0-based ``iteration``; O(log rows)."""
        iteration = check_index(iteration, "iteration")
        if not self.iterations:
            return 1.0
        position = trace_position(iteration, self._stretch_q, self.max_iteration)
        index = bisect_right(self.iterations, position) - 1
        return self.factors[max(index, 0)]


# --------------------------------------------------------------------------- trace


@dataclass(frozen=True)
class TraceRow:
    """One sample: from ``iteration`` on, ``worker`` runs ``factor`` times slower."""

    iteration: int
    worker: int
    factor: float


def _unpack_row(row: TraceRow | tuple[int, int, float], source: str) -> tuple[int, int, float]:
    """Accept a TraceRow or a plain ``(iteration, worker, factor)`` tuple."""
    if isinstance(row, TraceRow):
        return row.iteration, row.worker, row.factor
    if not isinstance(row, Sequence) or len(row) != 3:
        raise fail("rows", row, "expected (iteration, worker, factor)", source)
    return row[0], row[1], row[2]


@dataclass(frozen=True)
class Trace:
    """Per-trace-worker slowdown step functions.

    ``steps`` maps each trace worker id to its ``(iteration, factor)`` pairs sorted by
    iteration. Build it with ``Trace.from_rows`` or one of the loaders.
    """

    steps: Mapping[int, tuple[tuple[int, float], ...]]
    source: str = "<rows>"

    def __post_init__(self) -> None:
        if not self.steps:
            raise fail("steps", dict(self.steps), "a trace needs at least one worker")
        frozen: dict[int, tuple[tuple[int, float], ...]] = {}
        for worker in sorted(self.steps):
            check_index(worker, "worker")
            pairs = tuple((int(it), float(f)) for it, f in self.steps[worker])
            if not pairs:
                raise fail("steps", worker, "worker has no rows")
            frozen[worker] = pairs
        object.__setattr__(self, "steps", MappingProxyType(frozen))
        max_iteration = self.max_iteration
        if max_iteration < 1:
            raise fail("iteration", max_iteration, "largest iteration must be >= 1 to wrap")
        for worker, pairs in frozen.items():
            # Reuse the schedule's own checks: sorted, unique, valid factors.
            WorkerSlowdown(0, worker, *zip(*pairs), max_iteration=max_iteration)

    @classmethod
    def from_rows(
        cls, rows: Iterable[TraceRow | tuple[int, int, float]], source: str = "<rows>"
    ) -> Trace:
        """Build a trace from ``(iteration, worker, factor)`` rows in any order.

        A repeated (worker, iteration) pair is an error: one of the values would be lost.
        """
        by_worker: dict[int, dict[int, float]] = {}
        for row in rows:
            iteration, worker, factor = _unpack_row(row, source)
            iteration = check_index(iteration, "iteration", source)
            worker = check_index(worker, "worker", source)
            factor = check_factor(factor, "factor", source)
            samples = by_worker.setdefault(worker, {})
            if iteration in samples:
                raise fail("iteration", iteration, f"repeated for worker {worker}", source)
            samples[iteration] = factor
        if not by_worker:
            raise fail("rows", 0, "a trace needs at least one row", source)
        steps = {w: tuple(sorted(samples.items())) for w, samples in by_worker.items()}
        return cls(steps, source)

    @property
    def workers(self) -> tuple[int, ...]:
        """Trace worker ids in sorted order (the default mapping order)."""
        return tuple(self.steps)

    @property
    def max_iteration(self) -> int:
        """Largest iteration number in the whole trace; sets the wrap-around span."""
        return max(pairs[-1][0] for pairs in self.steps.values())

    def rows(self) -> list[TraceRow]:
        """All samples, by worker then iteration (e.g. for writing back out)."""
        return [TraceRow(it, w, f) for w, pairs in self.steps.items() for it, f in pairs]

    def summary(self) -> dict[int, dict[str, float | int]]:
        """Per trace worker: median and max factor and row count, for run logs."""
        out = {}
        for worker, pairs in self.steps.items():
            factors = [f for _, f in pairs]
            out[worker] = {
                "median_factor": statistics.median(factors),
                "max_factor": max(factors),
                "rows": len(factors),
            }
        return out

    def trace_worker_for(
        self, run_worker: int, num_workers: int, trace_workers: WorkerList = None
    ) -> int | None:
        """Which trace worker ``run_worker`` replays; None means no slowdown."""
        check_num_workers(num_workers)
        check_index(run_worker, "run_worker")
        if run_worker >= num_workers:
            raise fail("run_worker", run_worker, f"must be < num_workers ({num_workers})")
        mapping = normalise_worker_list(trace_workers)
        if mapping is None:
            return self.workers[run_worker] if run_worker < len(self.workers) else None
        if len(mapping) != num_workers:
            raise fail(
                "trace_workers", mapping, f"needs one entry per run worker ({num_workers})"
            )
        unknown = [w for w in mapping if w not in self.steps]
        if unknown:
            raise fail(
                "trace_workers", mapping, f"workers {unknown} not in trace {list(self.workers)}"
            )
        return mapping[run_worker]

    def slowdown_for(
        self,
        run_worker: int,
        num_workers: int,
        trace_workers: WorkerList = None,
        stretch: float = 1.0,
    ) -> WorkerSlowdown:
        """The replay schedule of one run worker under the given mapping and stretch."""
        trace_worker = self.trace_worker_for(run_worker, num_workers, trace_workers)
        pairs = self.steps[trace_worker] if trace_worker is not None else ()
        iterations = tuple(it for it, _ in pairs)
        factors = tuple(f for _, f in pairs)
        return WorkerSlowdown(
            run_worker, trace_worker, iterations, factors, self.max_iteration, stretch
        )

    def for_run_workers(
        self, num_workers: int, trace_workers: WorkerList = None, stretch: float = 1.0
    ) -> list[WorkerSlowdown]:
        """Replay schedules for run workers ``0..num_workers-1``."""
        check_num_workers(num_workers)
        return [
            self.slowdown_for(r, num_workers, trace_workers, stretch) for r in range(num_workers)
        ]


# ------------------------------------------------------------------------- loading


def _csv_records(path: Path, required: Sequence[str]) -> Iterator[tuple[str, dict]]:
    """Yield ``(location, record)`` per data row after checking the header has ``required``."""
    with open(path, newline="", encoding="utf-8-sig") as handle:  # -sig: a byte-order mark is not a column name
        reader = csv.DictReader(handle, skipinitialspace=True)
        if not reader.fieldnames:
            raise fail("header", str(path), "empty file, expected a CSV header")
        header = reader.fieldnames = [name.strip() for name in reader.fieldnames]
        for column in required:
            if column not in header:
                raise fail(column, header, "missing column in header", str(path))
        for record in reader:
            yield f"{path}:{reader.line_num}", record


def _read_header(path: Path) -> list[str]:
    """First CSV line of ``path``, to tell the formats apart."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return [name.strip() for name in next(csv.reader(handle), [])]


def load_simple_csv(path: str | Path) -> Trace:
    """Load the project's ``iteration,worker,factor`` CSV; factors are used as is."""
    path = Path(path)
    rows = [
        TraceRow(
            parse_int_cell(record["iteration"], "iteration", where),
            parse_int_cell(record["worker"], "worker", where),
            parse_float_cell(record["factor"], "factor", where),
        )
        for where, record in _csv_records(path, SIMPLE_COLUMNS)
    ]
    return Trace.from_rows(rows, source=str(path))


def _pai_time_column(path: Path) -> str:
    """The batch-time column this PAI file has (batch_time_norm, else batch_time)."""
    header = set(_read_header(path))
    return next((name for name in PAI_TIME_COLUMNS if name in header), PAI_TIME_COLUMNS[0])


def _read_pai_times(path: Path) -> dict[int, dict[int, float]]:
    """Batch times per worker and iteration; a repeated pair keeps the last value, a row with a gap is
    skipped (one warning says how many and where the first was). A malformed value is still an error."""
    column = _pai_time_column(path)
    columns = ("worker", "time", column)
    times: dict[int, dict[int, float]] = {}
    gaps: list[str] = []
    for where, record in _csv_records(path, columns):
        if any(is_missing_cell(record.get(name)) for name in columns):
            gaps.append(where)
            continue
        worker = parse_int_cell(record["worker"], "worker", where)
        iteration = parse_int_cell(record["time"], "time", where)
        batch_time = parse_float_cell(record[column], column, where)
        times.setdefault(worker, {})[iteration] = batch_time
    if not times:
        raise fail("rows", 0, f"a trace needs at least one row with a worker, time and batch time ({len(gaps)} had a gap)",
                   str(path))
    if gaps:
        log(logger, logging.WARNING, f"{path}: {len(gaps)} trace row(s) with a missing value skipped (first at "
            f"{gaps[0]}); each worker's factor holds over them", file=str(path), rows=len(gaps), first=gaps[0])
    return times


def _fastest_median(times: Mapping[int, Mapping[int, float]]) -> float:
    """Median batch time of the fastest worker (lowest median, ties to lowest id)."""
    medians = {w: statistics.median(samples.values()) for w, samples in times.items()}
    fastest = min(sorted(medians), key=lambda w: medians[w])
    return medians[fastest]


def load_pai_csv(path: str | Path) -> Trace:
    """Load an Alibaba PAI mini-batch-time CSV as factors against the fastest worker."""
    path = Path(path)
    times = _read_pai_times(path)
    baseline = _fastest_median(times)
    rows = [
        TraceRow(iteration, worker, batch_time / baseline)
        for worker, samples in times.items()
        for iteration, batch_time in samples.items()
    ]
    return Trace.from_rows(rows, source=str(path))


def load_trace(path: str | Path) -> Trace:
    """Load a trace in either format, chosen from the header's column names."""
    path = Path(path)
    header = {name.strip() for name in _read_header(path)}
    if not header:
        raise fail("header", str(path), "empty file, expected a CSV header")
    if header & PAI_MARKERS:
        return load_pai_csv(path)
    if header & SIMPLE_MARKERS:
        return load_simple_csv(path)
    raise fail(
        "header",
        sorted(header),
        f"unknown trace format, expected columns {list(SIMPLE_COLUMNS)} "
        f"or {list(PAI_COLUMNS)}",
        str(path),
    )


def describe_mapping(trace: Trace, num_workers: int, trace_workers: WorkerList = None) -> str:
    """One line saying which trace worker each run worker replays, with its median and largest factor, and which
    replay nothing (run workers past the trace's, without `trace_workers`): a trace nobody has seen before is
    replayed as the user meant only if they can see the mapping before the job's numbers come in."""
    summary, parts, idle = trace.summary(), [], []
    for run_worker in range(num_workers):
        source = trace.trace_worker_for(run_worker, num_workers, trace_workers)
        if source is None:
            idle.append(run_worker)
            continue
        s = summary[source]
        parts.append(f"{run_worker}<-{source} ({s['median_factor']:.2f}x median, {s['max_factor']:.2f}x max)")
    if idle:
        parts.append(f"{_span(idle)} nothing (the trace has {len(trace.workers)} workers)")
    return "run worker <- trace worker: " + ", ".join(parts)


def _span(workers: list[int]) -> str:
    return f"worker {workers[0]} replays" if len(workers) == 1 else f"workers {workers[0]}-{workers[-1]} replay"


def write_simple_csv(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as ``iteration,worker,factor`` (exact floats, so it round-trips)."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(SIMPLE_COLUMNS)
        for row in trace.rows():
            writer.writerow((row.iteration, row.worker, repr(row.factor)))
    return path


def load_worker_slowdown(
    path: str | Path,
    run_worker: int,
    num_workers: int,
    trace_workers: WorkerList = None,
    stretch: float = 1.0,
) -> WorkerSlowdown:
    """One run worker's schedule straight from a trace file (what a worker daemon needs)."""
    return load_trace(path).slowdown_for(run_worker, num_workers, trace_workers, stretch)


# -------------------------------------------------------------------------- replay


def slowdown_sleep_s(compute_s: float, factor: float) -> float:
    """Extra seconds to sleep after ``compute_s`` of work so the step takes ``factor`` x.

    Factors below 1 cannot speed a worker up, so they sleep 0.
    """
    if isinstance(compute_s, bool) or not isinstance(compute_s, numbers.Real):
        raise fail("compute_s", compute_s, "must be a number")
    if not math.isfinite(compute_s) or compute_s < 0:
        raise fail("compute_s", compute_s, "must be finite and >= 0")
    check_factor(factor)
    return max(0.0, (factor - 1.0) * compute_s)
