"""A sync plan's cost in seconds per unit of training progress: the mode selector's model.

For a plan, from per-worker iteration-time estimates t_i:
- each group g with quorum q closes a round every T_g = the q-th smallest t_i of the
  group, applying q gradients; the group's other workers push late, one gradient
  every t_j each (applied alone, or dropped under a drop late-policy);
- gradient throughput R = Σ gradients applied per second; wall seconds per
  SSGD-equivalent step = N / R; where batch sizing made the batches uneven, the full
  batch over samples applied per second, and every average below weighs an update by
  the samples it carries instead of its gradients (a batch-1 stream is worth little);
- statistical efficiency: steps needed grow as 1 + B_noise/B, so a plan whose updates
  carry a smaller effective batch B_eff than SSGD's N·b pays
  (1 + B_noise/B_eff) / (1 + B_noise/(N·b));
- staleness: an update computed s versions ago is worth 1/(1 + penalty·s), with s the
  number of other updates expected between a gradient's pull and its apply.
seconds_per_progress = N/R × efficiency × mean staleness factor. SSGD with equal
workers scores exactly t.

One implementation serves every input. A plan is scored from its rounds, in plan order
(per group: the quorum round, then its late workers fastest first), with every sum added
in round order, so equal plans get equal bits (the selector takes the first of equally
scored plans). Usual input (Python float times, finite and > 0; int batches >= 0 that sum
below 2**53) runs on float64/int64 arrays. Anything else runs the same code on object
arrays, i.e. through Python's own arithmetic element by element: float32 times stay
float32, huge ints stay exact, and a zero time raises ZeroDivisionError where it is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from star.plan import LatePolicy, SyncPlan

_EXACT_INT_SUM = 2**53  # below this, int64 batch sums convert to float exactly, in any order


@dataclass(frozen=True)
class Estimate:
    plan: SyncPlan
    seconds_per_progress: float
    gradients_per_s: float
    efficiency: float
    staleness: float


@dataclass(frozen=True)
class WorkerArrays:
    """Workers' iteration times and batches, in some worker order: native float64/int64 arrays for
    usual input, object arrays (Python's own arithmetic) for anything else."""

    times: np.ndarray
    batches: np.ndarray

    @property
    def native(self) -> bool:
        return self.times.dtype != object

    def floats(self, values: np.ndarray) -> np.ndarray:
        """float(b) of each batch value (what the model applies per update), in this input's kind of array."""
        return values.astype(np.float64) if self.native else _to_float(values)

    def total(self, order: np.ndarray | None = None) -> object:
        """The batches summed in `order` (default: as stored); native ints add exactly in any order."""
        if self.native:
            return int(self.batches.sum())
        return in_order_sum(self.batches if order is None else self.batches[order])


_to_float = np.frompyfunc(float, 1, 1)


def time_array(values: list) -> np.ndarray:
    """Iteration times as float64 if all are Python floats, finite and > 0; else as objects."""
    if values and set(map(type, values)) <= {float, np.float64}:
        times = np.array(values, dtype=np.float64)
        if np.isfinite(times).all() and (times > 0).all():
            return times
    return _objects(values)


def worker_arrays(workers: Sequence[int], iter_time_s: Mapping[int, float], batch: Mapping[int, int]) -> WorkerArrays:
    """The workers' batches and times (batches looked up first, as the model reads them)."""
    batch_values = [batch[w] for w in workers]
    times = time_array([iter_time_s[w] for w in workers])
    if times.dtype != object and set(map(type, batch_values)) <= {int, np.int64}:
        try:
            batches = np.array(batch_values, dtype=np.int64)
        except OverflowError:  # an int past int64: exact as a Python int
            batches = None
        if batches is not None and (batches >= 0).all() and int(batches.max()) * len(batches) < _EXACT_INT_SUM:
            return WorkerArrays(times, batches)
    return WorkerArrays(_objects(times.tolist()), _objects(batch_values))


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def in_order_sum(values: np.ndarray) -> object:
    """values[0] + values[1] + ..., left to right (what a `+=` loop or Python 3.11's `sum` gives)."""
    return np.add.accumulate(values)[-1]


@dataclass(frozen=True)
class Rounds:
    """A plan's rounds, in plan order: the iteration time that closes each, its gradients per update
    and its batch per update."""

    times: np.ndarray
    counts: np.ndarray
    batches: np.ndarray


def _padded(rows: Sequence[np.ndarray], width: int, dtype) -> np.ndarray:
    """Rows as one matrix; a short row's extra cells repeat its last value, so they compute like a
    real cell (no new errors) and, added after the row's end, are never read."""
    out = np.empty((len(rows), width), dtype=dtype)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
        out[i, len(row):] = row[-1]
    return out


def _row_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    return np.add.accumulate(values, axis=1)[np.arange(len(values)), lengths - 1]


def _efficiency(batches: np.ndarray, full_batches: Sequence[object], b_noise: float) -> np.ndarray:
    """(1 + B_noise/b) / (1 + B_noise/full) per cell, for B_noise > 0; 1.0 where b <= 0 (never divided by)."""
    positive = batches > 0
    full = np.full(len(batches), 1.0, dtype=batches.dtype)
    for row in np.flatnonzero(positive.any(axis=1)).tolist():  # a plan with no batch > 0 never reads its total
        full[row] = 1 + b_noise / full_batches[row]
    with np.errstate(over="ignore", invalid="ignore"):  # a batch near 0: inf, then inf/inf = nan, as in the plain rule
        quotient = np.divide(b_noise, batches, out=np.full(batches.shape, 1.0, dtype=batches.dtype), where=positive)
        return np.divide(1 + quotient, full[:, None], out=np.full(batches.shape, 1.0, dtype=batches.dtype), where=positive)


_CELLS_PER_CALL = 2000  # a scoring pass costs about as much as this many more matrix cells


def _buckets(lengths: list[int]) -> list[list[int]]:
    """Rows grouped to score together, fewest padded cells plus calls: rows sorted by length, cut
    where padding a shorter run up to a longer one would cost more than another pass."""
    if len(lengths) * max(lengths) <= _CELLS_PER_CALL:  # small plans: one pass, whatever the padding
        return [list(range(len(lengths)))]
    rows = sorted(range(len(lengths)), key=lengths.__getitem__)
    best = [0] * (len(rows) + 1)  # best[j]: cost of the j shortest rows
    cut = [0] * (len(rows) + 1)
    for j in range(1, len(rows) + 1):
        best[j], cut[j] = min((best[i] + _CELLS_PER_CALL + (j - i) * lengths[rows[j - 1]], i) for i in range(j))
    out, j = [], len(rows)
    while j:
        out.append(rows[cut[j]:j])
        j = cut[j]
    return out


def score_rounds(n: int, full_batches: Sequence[object], rounds: Sequence[Rounds], b_noise: float,
                 penalty: float) -> list[tuple[object, object, object, object]]:
    """(seconds per progress, gradients/s, efficiency, staleness) of each plan's rounds (see the module
    docstring); `full_batches`: each plan's total batch."""
    scores: list[tuple[object, object, object, object]] = [()] * len(rounds)  # type: ignore[list-item]
    for rows in _buckets([len(r.times) for r in rounds]):
        for row, score in zip(rows, _score_rows(n, [full_batches[i] for i in rows], [rounds[i] for i in rows],
                                                b_noise, penalty)):
            scores[row] = score
    return scores


def _score_rows(n: int, full_batches: Sequence[object], rounds: Sequence[Rounds], b_noise: float,
                penalty: float) -> list[tuple[object, object, object, object]]:
    dtype = rounds[0].times.dtype
    lengths = np.array([len(r.times) for r in rounds], dtype=np.intp)
    width = int(lengths.max())
    times = _padded([r.times for r in rounds], width, dtype)
    counts = _padded([r.counts for r in rounds], width, rounds[0].counts.dtype)
    batches = _padded([r.batches for r in rounds], width, dtype)
    rates = 1.0 / times
    gradients = rates * counts
    updates_per_s = _row_sums(rates, lengths)
    gradients_per_s = _row_sums(gradients, lengths)
    share = gradients / gradients_per_s[:, None]
    # Seconds per SSGD-equivalent step of throughput: N gradients' worth, or with uneven batches the full batch's
    # samples (a row's entry is None while it is even: n / g below, so even batches score bit for bit as always).
    throughput_s = [None] * len(rounds)
    for row in _uneven_rows(counts, batches, full_batches, n):
        samples = rates[row, :lengths[row]] * batches[row, :lengths[row]]
        samples_per_s = in_order_sum(samples)
        if samples_per_s > 0:
            share[row, :lengths[row]] = samples / samples_per_s if dtype != object else [x / samples_per_s for x in samples]
            throughput_s[row] = full_batches[row] / samples_per_s
    # Other updates landing while this update's gradients were computed.
    stale_terms = share * (1 + penalty * ((updates_per_s[:, None] - rates) / rates))
    if b_noise <= 0:  # efficiency 1.0 everywhere: share * 1.0 is share
        eff_terms = share
    else:
        eff_terms = share * _efficiency(batches, full_batches, b_noise)
    columns = (gradients_per_s, _row_sums(eff_terms, lengths), _row_sums(stale_terms, lengths))
    g, e, s = (c.tolist() if dtype != object else list(c) for c in columns)
    return [((n / gi if t is None else t) * ei * si, gi, ei, si) for gi, ei, si, t in zip(g, e, s, throughput_s)]


def _uneven_rows(counts: np.ndarray, batches: np.ndarray, full_batches: Sequence[object], n: int) -> list[int]:
    """Rows whose updates do not each carry their gradients' even share of the full batch (batch sizing at work).
    Weighting them by gradient count let a stream of batch-1 updates, worth almost nothing, weigh as much as the
    round of a group of fast workers: a worker behind a slow link, sized to batch 1 under SSGD, priced excluding it
    at 2.45 s per step against SSGD's 0.77 (k-of-N then took 19.5 s to SSGD's 31.4, for real). By samples, an update
    weighs what it carries, and the throughput is the full batch's samples."""
    if batches.dtype != object:  # one vectorised pass: the same float64 products and comparisons as the loop below
        units = np.array([full / n for full in full_batches], dtype=np.float64)
        return np.flatnonzero(~(batches == counts * units[:, None]).all(axis=1)).tolist()
    rows = []
    for row, full in enumerate(full_batches):
        unit = full / n
        if not all(b == c * unit for b, c in zip(batches[row].tolist(), counts[row].tolist())):
            rows.append(row)
    return rows


def plan_rounds(plan: SyncPlan, arrays: WorkerArrays) -> Rounds:
    """`plan`'s rounds from its workers' arrays (in plan order): per group the round closed by its
    quorum-th fastest (ties in group order), then, if late gradients apply, each late worker alone,
    fastest first."""
    times, batches = arrays.times, arrays.batches
    n = len(times)
    counts = np.ones(n, dtype=np.int64)
    if len(plan.groups) == n:  # every group a single worker (ASGD, SSP): no sort
        return Rounds(times, counts if arrays.native else counts.astype(object), arrays.floats(batches))
    apply_late = plan.late_policy is LatePolicy.APPLY
    parts: list[np.ndarray] = []
    singles: list[int] = []
    quorum_rounds: list[tuple[int, int, object]] = []  # (round index, gradients per update, batch per update)
    taken_so_far = start = 0
    for group, quorum in zip(plan.groups, plan.quorum):
        size = len(group)
        if size == 1:
            singles.append(start)
            taken_so_far += 1
        else:
            if singles:
                parts.append(np.array(singles, dtype=np.intp))
                singles = []
            ordered = np.argsort(times[start:start + size], kind="stable") + start  # stable: ties in group order
            quorum_rounds.append((taken_so_far, quorum, in_order_sum(batches[ordered[:quorum]])))
            taken = ordered[quorum - 1:] if apply_late else ordered[quorum - 1:quorum]
            parts.append(taken)
            taken_so_far += len(taken)
        start += size
    if singles:
        parts.append(np.array(singles, dtype=np.intp))
    sel = np.concatenate(parts)
    counts = counts[:len(sel)] if arrays.native else counts[:len(sel)].astype(object)
    update_batches = arrays.floats(batches[sel])
    for index, quorum, on_time_batch in quorum_rounds:
        counts[index] = quorum
        update_batches[index] = float(on_time_batch)
    return Rounds(times[sel], counts, update_batches)


def estimate(plan: SyncPlan, iter_time_s: Mapping[int, float], batch: Mapping[int, int], b_noise: float, penalty: float) -> Estimate:
    """Seconds per SSGD-equivalent step of progress under `plan` (see the module docstring)."""
    arrays = worker_arrays([w for group in plan.groups for w in group], iter_time_s, batch)
    (score,) = score_rounds(plan.total_workers, [arrays.total()], [plan_rounds(plan, arrays)], b_noise, penalty)
    return Estimate(plan, *score)
