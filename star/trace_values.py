"""Trace values checked at the boundary: column names, factors, indices, stretch, worker lists.

Every check raises a TraceError naming the field, the value and where it came from, so
a bad trace file or flag is one clear line (star.cli_checks shows it to the user).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from fractions import Fraction

PAI_COLUMNS = ("worker", "time", "batch_time_norm")
PAI_TIME_COLUMNS = ("batch_time_norm", "batch_time")  # the first present is read (the published files: _norm)
SIMPLE_COLUMNS = ("iteration", "worker", "factor")
PAI_MARKERS = frozenset({"time", "batch_time_norm", "batch_time", "gpu"})
# How a measurement that was not taken appears in exported tables (pandas writes NaN as "" or "nan").
MISSING_CELLS = frozenset({"", "nan", "na", "n/a", "null", "none"})
SIMPLE_MARKERS = frozenset({"iteration", "factor"})

WorkerList = str | Sequence[int] | None


class TraceError(ValueError):
    """A trace file, trace row or replay setting is invalid."""


def fail(name: str, value: object, problem: str, where: str = "") -> TraceError:
    """Build an error that names the offending field and value, and where it came from."""
    location = f" at {where}" if where else ""
    return TraceError(f"{name}: {problem} (got {value!r}){location}")


# --------------------------------------------------------------------------- values


def check_factor(value: float, name: str = "factor", where: str = "") -> float:
    """Factors scale compute time, so only finite positive values make sense."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise fail(name, value, "must be a number", where)
    if not math.isfinite(value) or value <= 0:
        raise fail(name, value, "must be finite and > 0", where)
    return float(value)


def check_index(value: int, name: str, where: str = "") -> int:
    """Iterations and worker ids are non-negative integers."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise fail(name, value, "must be an integer", where)
    if value < 0:
        raise fail(name, value, "must be >= 0", where)
    return int(value)


def exact_stretch(stretch: float) -> Fraction:
    """Stretch as the exact decimal the caller wrote, so scaled boundaries land on integers."""
    if isinstance(stretch, bool) or not isinstance(stretch, numbers.Real):
        raise fail("stretch", stretch, "must be a number")
    if not math.isfinite(stretch) or stretch <= 0:
        raise fail("stretch", stretch, "must be finite and > 0")
    return Fraction(str(float(stretch)))


def is_missing_cell(text: str | None) -> bool:
    """Whether a CSV cell holds no measurement (absent in a short row, empty, or NaN-like)."""
    return text is None or text.strip().lower() in MISSING_CELLS


def _parse_integer(text: str) -> int:
    """An integer, also when written as an integral float ("11.0"): pandas writes an integer column that
    holds a gap anywhere as floats."""
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if not value.is_integer():
            raise
        return int(value)


def _parse_cell(text: str | None, name: str, where: str, parse, what: str):
    if text is None or not text.strip():
        raise fail(name, text, "missing value", where)
    try:
        return parse(text)
    except (ValueError, OverflowError):
        raise fail(name, text, f"not {what}", where) from None


def parse_int_cell(text: str | None, name: str, where: str) -> int:
    """Parse a CSV cell as a non-negative integer, naming the column on failure."""
    return check_index(_parse_cell(text, name, where, _parse_integer, "an integer"), name, where)


def parse_float_cell(text: str | None, name: str, where: str) -> float:
    """Parse a CSV cell as a finite positive number, naming the column on failure."""
    return check_factor(_parse_cell(text, name, where, float, "a number"), name, where)


# ----------------------------------------------------------------------- mapping


def parse_worker_list(text: str, name: str = "trace_workers") -> tuple[int, ...]:
    """Parse a CLI list like ``"3,4,5,6"`` into worker ids; spaces are allowed."""
    if not isinstance(text, str) or not text.strip():
        raise fail(name, text, "expected a comma-separated list of worker ids")
    ids = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise fail(name, text, "empty entry in worker list")
        try:
            ids.append(int(item))
        except ValueError:
            raise fail(name, text, f"{item!r} is not an integer") from None
        if ids[-1] < 0:
            raise fail(name, text, f"worker id {item} must be >= 0")
    return tuple(ids)


def normalise_worker_list(trace_workers: WorkerList) -> tuple[int, ...] | None:
    """Accept the CLI string or an already-parsed sequence, so callers needn't care."""
    if trace_workers is None:
        return None
    if isinstance(trace_workers, str):
        return parse_worker_list(trace_workers)
    ids = tuple(trace_workers)
    for worker in ids:
        check_index(worker, "trace_workers")
    return ids


def check_num_workers(num_workers: int) -> int:
    """A run needs at least one worker."""
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise fail("num_workers", num_workers, "must be an integer >= 1")
    return num_workers
