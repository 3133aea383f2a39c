"""The plans the mode selector weighs, and their scores from one sort of the iteration times.

A candidate is a spec (family, k): ("ssgd", N), ("kofn", k), ("grouped", cut), ("exclude", 0),
("asgd", 0). Its plan is built only from a checked worker tuple, so it skips SyncPlan's O(N)
checks (at 1,000 workers and ~20 candidates a decision, those checks would dominate); its
rounds come straight from one stable sort of the times, the same rounds `plan_rounds` reads
from the built plan, so `candidate_estimates` equals `estimate` of each `candidate_plans` plan.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Mapping, Sequence

import numpy as np

from star.plan import SyncPlan, asgd, exclude, grouped, kofn, ssgd
from star.policy.plan_scores import Estimate, Rounds, WorkerArrays, in_order_sum, score_rounds, time_array, worker_arrays

Spec = tuple[str, int]


def kofn_quorums(n: int, stragglers: int) -> list[int]:
    """Useful k for k-of-N: every k from N/2 to N-1 for small N; for large N (where scoring
    hundreds of candidates each decision would cost seconds) eight evenly spaced k, N-1,
    and N minus the detected stragglers."""
    lowest = max(1, (n + 1) // 2)
    if n <= 16:
        return list(range(lowest, n))
    ks = {min(n - 1, max(lowest, round(n * f / 16))) for f in range(8, 16)} | {n - 1}
    if 0 < stragglers <= n - lowest:
        ks.add(n - stragglers)
    return sorted(ks)


def _candidate_specs(n: int, stragglers: frozenset[int], modes: Sequence[str]) -> list[Spec]:
    """SSGD, k-of-N for each useful k, 2-group splits of the time-sorted workers, excluded stragglers, ASGD."""
    specs: list[Spec] = []
    if "ssgd" in modes:
        specs.append(("ssgd", n))
    if n >= 2:
        if "kofn" in modes:
            specs.extend(("kofn", k) for k in kofn_quorums(n, len(stragglers)))
        if "grouped" in modes:
            cuts = range(1, n) if n <= 16 else sorted({round(n * f / 8) for f in range(1, 8)})
            specs.extend(("grouped", c) for c in cuts)
        if "exclude" in modes and stragglers and len(stragglers) < n:
            specs.append(("exclude", 0))
        if "asgd" in modes:
            specs.append(("asgd", 0))
    return specs


def _check_workers(workers: tuple[int, ...], stragglers: frozenset[int], specs: Sequence[Spec],
                   iter_time_s: Mapping[int, float]) -> None:
    """Raise what the public, checked builders raise for these candidates' workers (empty, duplicated,
    negative, or stragglers not among them); a cheap test spares the builders in the usual case."""
    members = set(workers)
    if workers and len(members) == len(workers) and workers[0] >= 0 and (
            stragglers <= members or not any(family == "exclude" for family, _ in specs)):
        return
    for family, k in specs:
        if family == "ssgd":
            ssgd(workers)
        elif family == "kofn":
            kofn(workers, k)
        elif family == "grouped":
            ordered = sorted(workers, key=lambda w: (iter_time_s[w], w))
            grouped([tuple(sorted(ordered[:k])), tuple(sorted(ordered[k:]))])
        elif family == "exclude":
            exclude(workers, sorted(stragglers))
        else:
            asgd(workers)


def _plan_template() -> dict | None:
    """A checked plan's fields, defaults for all but groups/quorum/label; None (always use the checked
    constructor) where SyncPlan grew a field without a default or with a default_factory (copying could
    share a mutable default), or keeps no __dict__."""
    if any(f.default_factory is not dataclasses.MISSING for f in dataclasses.fields(SyncPlan)):
        return None
    try:
        template = SyncPlan(0, ((0,),), (1,))
    except TypeError:
        return None
    if not hasattr(template, "__dict__"):
        return None
    fields = {f.name for f in dataclasses.fields(SyncPlan)}
    return {k: v for k, v in vars(template).items() if k in fields}  # never a cached property (SyncPlan.workers)


_PLAN_TEMPLATE = _plan_template()


def _trusted_plan(groups: tuple[tuple[int, ...], ...], quorum: tuple[int, ...], label: str) -> SyncPlan:
    """SyncPlan(0, groups, quorum, label=label) without __post_init__'s O(N) checks. Only for groups
    that partition a worker tuple already checked by `_check_workers`, with quorums in 1..len(group)."""
    if _PLAN_TEMPLATE is None:
        return SyncPlan(0, groups, quorum, label=label)
    plan = object.__new__(SyncPlan)
    plan.__dict__.update(_PLAN_TEMPLATE, groups=groups, quorum=quorum, label=label)
    return plan


class _Workers:
    """A sorted, checked worker tuple, and a fast way to take some of them (as the same values, in order)."""

    def __init__(self, workers: tuple[int, ...]):
        self.workers = workers
        # Plain ints (the usual case) come back from an int64 array as equal ints; anything else is taken one by one.
        ids = np.array(workers) if set(map(type, workers)) == {int} else None
        self.ids = ids if ids is not None and ids.dtype == np.int64 else None

    def pick(self, mask: np.ndarray) -> tuple[int, ...]:
        if self.ids is not None:
            return tuple(self.ids[mask].tolist())
        return tuple(self.workers[i] for i in np.flatnonzero(mask).tolist())


def _build_plan(spec: Spec, workers: _Workers, rank: np.ndarray | None, stragglers_mask: np.ndarray | None) -> SyncPlan:
    """`spec`'s plan, equal field by field to what the public builders give. `rank`: each worker's
    place in the order by (time, id); `stragglers_mask`: which workers are stragglers."""
    family, k = spec
    n = len(workers.workers)
    if family == "ssgd":
        return _trusted_plan((workers.workers,), (n,), "ssgd")
    if family == "kofn":
        return _trusted_plan((workers.workers,), (k,), "kofn")
    if family == "grouped":  # the k fastest, and the rest, each in id order
        assert rank is not None
        fast = rank < k
        first, second = workers.pick(fast), workers.pick(~fast)
        return _trusted_plan((first, second), (len(first), len(second)), "grouped")
    if family == "exclude":  # the healthy together, then each straggler alone, in id order
        assert stragglers_mask is not None
        groups = (workers.pick(~stragglers_mask),) + tuple(zip(workers.pick(stragglers_mask)))
        return _trusted_plan(groups, tuple(len(g) for g in groups), "exclude")
    return _trusted_plan(tuple(zip(workers.workers)), (1,) * n, "asgd")


def _stragglers_mask(workers: tuple[int, ...], stragglers: frozenset[int], specs: Sequence[Spec]) -> np.ndarray | None:
    if not any(family == "exclude" for family, _ in specs):
        return None
    mask = np.zeros(len(workers), dtype=bool)  # stragglers are among the (sorted) workers: _check_workers checked
    mask[[bisect.bisect_left(workers, w) for w in stragglers]] = True
    return mask


def _rank(order: np.ndarray) -> np.ndarray:
    rank = np.empty(len(order), dtype=np.intp)
    rank[order] = np.arange(len(order))
    return rank


def _plans(specs: Sequence[Spec], workers: tuple[int, ...], stragglers: frozenset[int], order: np.ndarray) -> list[SyncPlan]:
    rank = _rank(order) if any(family == "grouped" for family, _ in specs) else None
    mask = _stragglers_mask(workers, stragglers, specs)
    checked = _Workers(workers)
    return [_build_plan(spec, checked, rank, mask) for spec in specs]


def candidate_plans(workers: Sequence[int], stragglers: frozenset[int], iter_time_s: Mapping[int, float],
                    modes: Sequence[str]) -> list[SyncPlan]:
    """SSGD, k-of-N for each useful k, 2-group splits of the time-sorted workers, excluded stragglers, ASGD."""
    workers = tuple(sorted(workers))
    specs = _candidate_specs(len(workers), stragglers, modes)
    _check_workers(workers, stragglers, specs, iter_time_s)
    if not specs:
        return []
    order = np.argsort(time_array([iter_time_s[w] for w in workers]), kind="stable")  # by (time, id)
    return _plans(specs, workers, stragglers, order)


class _SortedWorkers:
    """The workers' arrays, their order by time (stable: ties in id order, as the plans' sorts break
    them) and what every candidate's rounds read from it."""

    def __init__(self, arrays: WorkerArrays, order: np.ndarray, stragglers_mask: np.ndarray | None):
        self.arrays, self.order, self.stragglers_mask = arrays, order, stragglers_mask
        self.n = len(order)
        self.by_time = arrays.batches[order]
        self.on_time = np.add.accumulate(self.by_time)  # [k-1]: the k fastest's batch, added fastest first
        self.full_batch = arrays.total()  # in id order
        self.count_type = np.int64 if arrays.native else object

    def counts(self, first: int, length: int) -> np.ndarray:
        out = np.ones(length, dtype=np.int64).astype(self.count_type, copy=False)
        out[0] = first
        return out

    def floats(self, *values: object) -> np.ndarray:
        return np.array([float(v) for v in values], dtype=self.arrays.times.dtype)

    def rounds(self, spec: Spec) -> tuple[Rounds, object]:
        """`spec`'s plan's rounds and total batch, as `plan_rounds` and the plan's own sum give them."""
        family, k = spec
        arrays, order, n = self.arrays, self.order, self.n
        times, batches = arrays.times, arrays.batches
        if family == "asgd":  # every worker alone, in id order
            return Rounds(times, self.counts(1, n), arrays.floats(batches)), self.full_batch
        if family == "ssgd":  # one round, closed by the slowest worker
            return Rounds(times[order[-1:]], self.counts(n, 1), self.floats(self.on_time[-1])), self.full_batch
        if family == "kofn":  # the k-th fastest closes the round; the N-k others push late, fastest first
            update_batches = arrays.floats(self.by_time[k - 1:])
            update_batches[0] = float(self.on_time[k - 1])
            return Rounds(times[order[k - 1:]], self.counts(k, n - k + 1), update_batches), self.full_batch
        if family == "grouped":  # the k fastest and the rest, each all-of-group
            rounds = Rounds(times[order[[k - 1, n - 1]]], np.array([k, n - k], dtype=self.count_type),
                            self.floats(self.on_time[k - 1], in_order_sum(self.by_time[k:])))
            return rounds, self._total_in_plan_order(order[:k])
        assert family == "exclude" and self.stragglers_mask is not None  # the healthy together; each straggler alone
        healthy = order[~self.stragglers_mask[order]]
        alone = np.flatnonzero(self.stragglers_mask)
        rounds = Rounds(np.concatenate((times[healthy[-1:]], times[alone])), self.counts(len(healthy), 1 + len(alone)),
                        np.concatenate((self.floats(in_order_sum(batches[healthy])), arrays.floats(batches[alone]))))
        return rounds, self._total_in_plan_order(np.flatnonzero(~self.stragglers_mask))

    def _total_in_plan_order(self, first: np.ndarray) -> object:
        """A two-group plan's total batch: the `first` workers', then the others', each in id order."""
        if self.arrays.native:  # ints: exact in any order
            return self.full_batch
        rest = np.ones(self.n, dtype=bool)
        rest[first] = False
        return self.arrays.total(np.concatenate((np.sort(first), np.flatnonzero(rest))))


def candidate_estimates(workers: Sequence[int], stragglers: frozenset[int], iter_time_s: Mapping[int, float],
                        batch: Mapping[int, int], b_noise: float, penalty: float, modes: Sequence[str]) -> tuple[Estimate, ...]:
    """tuple(estimate(p, ...) for p in candidate_plans(...)), equal bit for bit, from one sort of the times."""
    workers = tuple(sorted(workers))
    specs = _candidate_specs(len(workers), stragglers, modes)
    _check_workers(workers, stragglers, specs, iter_time_s)
    if not specs:
        return ()
    arrays = worker_arrays(workers, iter_time_s, batch)
    order = np.argsort(arrays.times, kind="stable")  # by (time, id): workers are sorted by id
    mask = _stragglers_mask(workers, stragglers, specs)
    sorted_workers = _SortedWorkers(arrays, order, mask)
    rounds, totals = zip(*map(sorted_workers.rounds, specs))
    scores = score_rounds(len(workers), totals, rounds, b_noise, penalty)
    return tuple(Estimate(plan, *score) for plan, score in zip(_plans(specs, workers, stragglers, order), scores))
