"""Heuristic sync-mode selection (after STAR): pick the plan with the fewest seconds per unit of progress.

For every candidate plan, from per-worker iteration-time estimates t_i:
- each group g with quorum q closes a round every T_g = the q-th smallest t_i of the
  group, applying q gradients; the group's other workers push late, one gradient
  every t_j each (applied alone, or dropped under a drop late-policy);
- gradient throughput R = Σ gradients applied per second; wall seconds per
  SSGD-equivalent step = N / R;
- statistical efficiency: steps needed grow as 1 + B_noise/B, so a plan whose updates
  carry a smaller effective batch B_eff than SSGD's N·b pays
  (1 + B_noise/B_eff) / (1 + B_noise/(N·b));
- staleness: an update computed s versions ago is worth 1/(1 + penalty·s), with s the
  number of other updates expected between a gradient's pull and its apply.
seconds_per_progress = N/R × efficiency × mean staleness factor. SSGD with equal
workers scores exactly t. A switch happens only when the best candidate beats the
plan in force by `margin`, and not sooner than `min_dwell` decisions after the last one.

Cost at scale (1,000 workers, ~20 candidates, one decision a second of simulated time):
`HeuristicSelector.decide` scores every candidate from one stable sort of the times with
numpy, bit for bit what `estimate` gives for each `candidate_plans` plan, and builds the
candidates' SyncPlans without re-running SyncPlan's O(N) checks (they only regroup the
current plan's already-validated workers). Unusual input (non-float64 times, times not
finite and > 0, non-integer or negative batches, stragglers outside the plan) takes the
plain-Python definition, errors included.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from star.plan import LatePolicy, SyncPlan, asgd, exclude, grouped, kofn, ssgd


@dataclass(frozen=True)
class SelectorConfig:
    """Heuristic mode-selector settings."""

    margin: float = 0.1  # switch only when the best plan is this fraction faster than the current one
    min_dwell: int = 3  # decisions to wait after a switch before the next one
    staleness_penalty: float = 0.15  # progress factor 1/(1 + penalty·staleness)
    modes: tuple[str, ...] = ("ssgd", "kofn", "grouped", "exclude", "asgd")  # candidates considered


@dataclass(frozen=True)
class Estimate:
    plan: SyncPlan
    seconds_per_progress: float
    gradients_per_s: float
    efficiency: float
    staleness: float


@dataclass(frozen=True)
class ModeDecision:
    plan: SyncPlan | None  # None: keep the plan in force
    reason: str
    estimates: tuple[Estimate, ...]


def _efficiency(batch: float, full_batch: float, b_noise: float) -> float:
    if b_noise <= 0 or batch <= 0:
        return 1.0
    return (1 + b_noise / batch) / (1 + b_noise / full_batch)


# ---- scoring -----------------------------------------------------------------------------
# A plan is scored from its rounds: (updates/s, gradients per update, batch per update), in
# plan order (per group: the quorum round, then its late workers fastest first). Two scorers
# do exactly the same float operations in the same order, so they give the same bits: a
# plain-Python one (few rounds) and a numpy one (many rounds: ASGD, k-of-N at scale). Bit
# equality matters: the selector takes the first of equally scored plans, as it always has.

_FEW_ROUNDS = 24  # below this many rounds plain Python is faster than numpy
# Python's float `sum` adds in order up to 3.11 and with compensation from 3.12: mirror whichever runs.
_SEQUENTIAL_SUM = sum([1e16, 1.0, -1e16]) == 0.0


def _python_sum(values: np.ndarray) -> float:
    """sum(values.tolist()), bit for bit."""
    return float(np.add.accumulate(values)[-1]) if _SEQUENTIAL_SUM else sum(values.tolist())


def _in_order_row_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each row's first `length` values added in order (what a `+=` loop gives)."""
    return np.add.accumulate(values, axis=1)[np.arange(len(values)), lengths - 1]


def _python_row_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """[sum(row[:length].tolist()) for row, length in zip(values, lengths)], bit for bit."""
    if _SEQUENTIAL_SUM:
        return _in_order_row_sums(values, lengths)
    return np.array([sum(row[:length].tolist()) for row, length in zip(values, lengths.tolist())])


def _score_rounds(n: int, full_batch: int, rounds: Sequence[tuple[float, int, float]], b_noise: float,
                  penalty: float) -> tuple[float, float, float, float]:
    """(seconds per progress, gradients/s, efficiency, staleness) of a plan's rounds."""
    updates_per_s = sum(rate for rate, _, _ in rounds)
    gradients_per_s = sum(rate * count for rate, count, _ in rounds)
    weighted_eff = weighted_stale = 0.0
    for rate, count, update_batch in rounds:
        share = rate * count / gradients_per_s
        # Other updates landing while this update's gradients were computed.
        others = (updates_per_s - rate) / rate
        weighted_eff += share * _efficiency(update_batch, full_batch, b_noise)
        weighted_stale += share * (1 + penalty * others)
    seconds = (n / gradients_per_s) * weighted_eff * weighted_stale
    return seconds, gradients_per_s, weighted_eff, weighted_stale


def _score_arrays(n: int, full_batch: int, rates: np.ndarray, counts: np.ndarray, batches: np.ndarray, b_noise: float,
                  penalty: float) -> tuple[float, float, float, float]:
    """_score_rounds with the rounds as arrays (float64 rates, int64 counts, float64 batches), same bits:
    element-wise ops are IEEE like Python's, the two plain sums are Python's own `sum`, and the two
    running sums are np.add.accumulate, which adds in order like the `+=` loop."""
    if len(rates) < _FEW_ROUNDS:
        return _score_rounds(n, full_batch, list(zip(rates.tolist(), counts.tolist(), batches.tolist())), b_noise, penalty)
    gradients = rates * counts
    updates_per_s = _python_sum(rates)
    gradients_per_s = _python_sum(gradients)
    share = gradients / gradients_per_s
    stale_terms = share * (1 + penalty * ((updates_per_s - rates) / rates))
    if b_noise <= 0 or full_batch <= 0:  # full_batch 0 with batches >= 0: every update batch is 0, efficiency 1
        eff_terms = share
    else:
        full = 1 + b_noise / full_batch
        with np.errstate(divide="ignore", invalid="ignore"):
            eff_terms = share * np.where(batches > 0, (1 + b_noise / batches) / full, 1.0)
    weighted_eff = float(np.add.accumulate(eff_terms)[-1])
    weighted_stale = float(np.add.accumulate(stale_terms)[-1])
    return (n / gradients_per_s) * weighted_eff * weighted_stale, gradients_per_s, weighted_eff, weighted_stale


def _arrays(workers: Sequence[int], iter_time_s: Mapping[int, float], batch: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-worker times (float64) and batches (int64) for the numpy paths, or None where those could
    differ from the plain-Python model by a bit (non-float64 times, times not finite and > 0,
    non-integer or negative batches): such input takes the plain-Python path, errors included."""
    batches = np.array([batch[w] for w in workers])
    times = np.array([iter_time_s[w] for w in workers])
    if times.dtype != np.float64 or batches.dtype.kind not in "iu" or not len(times):
        return None
    if not (np.isfinite(times).all() and (times > 0).all() and (batches >= 0).all()):
        return None
    return times, batches.astype(np.int64, copy=False)


def _estimate_reference(plan: SyncPlan, iter_time_s: Mapping[int, float], batch: Mapping[int, int], b_noise: float,
                        penalty: float) -> Estimate:
    """The model in plain Python, one plan at a time: the definition the fast paths reproduce."""
    n = plan.total_workers
    full_batch = sum(batch[w] for group in plan.groups for w in group)
    rounds: list[tuple[float, int, float]] = []  # (updates/s, gradients per update, batch per update)
    apply_late = plan.late_policy is LatePolicy.APPLY
    for group, quorum in zip(plan.groups, plan.quorum):
        if len(group) == 1:  # the common case at scale (ASGD, excluded workers): no sort
            w = group[0]
            rounds.append((1.0 / iter_time_s[w], 1, float(batch[w])))
            continue
        ordered = sorted(group, key=iter_time_s.__getitem__)
        on_time = ordered[:quorum]
        rounds.append((1.0 / iter_time_s[on_time[-1]], quorum, float(sum(batch[w] for w in on_time))))
        if apply_late:
            rounds.extend((1.0 / iter_time_s[w], 1, float(batch[w])) for w in ordered[quorum:])
    return Estimate(plan, *_score_rounds(n, full_batch, rounds, b_noise, penalty))


def _estimate_arrays(plan: SyncPlan, iter_time_s: Mapping[int, float], batch: Mapping[int, int], b_noise: float,
                     penalty: float) -> Estimate | None:
    """_estimate_reference with numpy (one stable argsort per multi-worker group); None: use the reference."""
    flat = [w for group in plan.groups for w in group]
    arrays = _arrays(flat, iter_time_s, batch)
    if arrays is None:
        return None
    times, batches = arrays
    rate = 1.0 / times
    n = len(flat)
    if len(plan.groups) == n:  # every group a single worker (ASGD, SSP): no sort
        sel = np.arange(n)
        quorum_rounds: list[tuple[int, int, int]] = []
    else:
        apply_late = plan.late_policy is LatePolicy.APPLY
        parts: list[np.ndarray] = []
        singles: list[int] = []
        quorum_rounds = []  # (round index, gradients per update, batch per update)
        rounds = start = 0
        for group, quorum in zip(plan.groups, plan.quorum):
            size = len(group)
            if size == 1:
                singles.append(start)
                rounds += 1
            else:
                if singles:
                    parts.append(np.array(singles, dtype=np.intp))
                    singles = []
                ordered = np.argsort(times[start:start + size], kind="stable") + start  # stable: ties in group order
                quorum_rounds.append((rounds, quorum, int(batches[ordered[:quorum]].sum())))
                taken = ordered[quorum - 1:] if apply_late else ordered[quorum - 1:quorum]
                parts.append(taken)
                rounds += len(taken)
            start += size
        if singles:
            parts.append(np.array(singles, dtype=np.intp))
        sel = np.concatenate(parts)
    counts = np.ones(len(sel), dtype=np.int64)
    update_batches = batches[sel].astype(np.float64)
    for index, quorum, on_time_batch in quorum_rounds:
        counts[index] = quorum
        update_batches[index] = on_time_batch
    return Estimate(plan, *_score_arrays(n, int(batches.sum()), rate[sel], counts, update_batches, b_noise, penalty))


def estimate(plan: SyncPlan, iter_time_s: Mapping[int, float], batch: Mapping[int, int], b_noise: float, penalty: float) -> Estimate:
    """Seconds per SSGD-equivalent step of progress under `plan` (see the module docstring)."""
    if plan.total_workers >= _FEW_ROUNDS:
        fast = _estimate_arrays(plan, iter_time_s, batch, b_noise, penalty)
        if fast is not None:
            return fast
    return _estimate_reference(plan, iter_time_s, batch, b_noise, penalty)


# ---- candidates --------------------------------------------------------------------------
# A candidate is a spec (family, k): ("ssgd", N), ("kofn", k), ("grouped", cut), ("exclude", 0),
# ("asgd", 0). Its plan is built only from a validated worker tuple, so it skips SyncPlan's
# O(N) checks; its score comes straight from one sort of the iteration times.

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
    that partition a worker tuple already checked by `_trusted_workers` (or taken from a validated
    plan), with quorums in 1..len(group); any other input goes through the checked constructor."""
    if _PLAN_TEMPLATE is None:
        return SyncPlan(0, groups, quorum, label=label)
    plan = object.__new__(SyncPlan)
    plan.__dict__.update(_PLAN_TEMPLATE, groups=groups, quorum=quorum, label=label)
    return plan


def _candidate_specs(n: int, stragglers: frozenset[int], modes: Sequence[str]) -> list[tuple[str, int]]:
    specs: list[tuple[str, int]] = []
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


def _trusted_workers(workers: tuple[int, ...], stragglers: frozenset[int], specs: Sequence[tuple[str, int]]) -> bool:
    """Whether every plan in `specs` built from `workers` (sorted) passes SyncPlan's and the builders' checks
    (non-empty, no duplicates, no negative id, stragglers among them); if not, the checked builders run
    (and raise, as they always have)."""
    members = set(workers)
    if not workers or len(members) != len(workers) or workers[0] < 0:
        return False
    return not any(family == "exclude" for family, _ in specs) or stragglers <= members


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


def _build_plan(spec: tuple[str, int], workers: _Workers, rank: np.ndarray | None, stragglers_mask: np.ndarray | None) -> SyncPlan:
    """The plan `_candidate_plans_reference` builds for `spec`, equal field by field. `rank`: each worker's
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


def _stragglers_mask(workers: tuple[int, ...], stragglers: frozenset[int], specs: Sequence[tuple[str, int]]) -> np.ndarray | None:
    if not any(family == "exclude" for family, _ in specs):
        return None
    mask = np.zeros(len(workers), dtype=bool)  # stragglers are among the (sorted) workers: _trusted_workers checked
    mask[[bisect.bisect_left(workers, w) for w in stragglers]] = True
    return mask


def _rank(order: np.ndarray) -> np.ndarray:
    rank = np.empty(len(order), dtype=np.intp)
    rank[order] = np.arange(len(order))
    return rank


def _candidate_plans_reference(workers: Sequence[int], stragglers: frozenset[int], iter_time_s: Mapping[int, float],
                               modes: Sequence[str]) -> list[SyncPlan]:
    workers = tuple(sorted(workers))
    n = len(workers)
    plans: list[SyncPlan] = []
    if "ssgd" in modes:
        plans.append(ssgd(workers))
    if n >= 2:
        if "kofn" in modes:
            plans.extend(kofn(workers, k) for k in kofn_quorums(n, len(stragglers)))
        if "grouped" in modes:
            ordered = sorted(workers, key=lambda w: (iter_time_s[w], w))
            cuts = range(1, n) if n <= 16 else sorted({round(n * f / 8) for f in range(1, 8)})
            plans.extend(grouped([tuple(sorted(ordered[:c])), tuple(sorted(ordered[c:]))]) for c in cuts)
        if "exclude" in modes and stragglers and len(stragglers) < n:
            plans.append(exclude(workers, sorted(stragglers)))
        if "asgd" in modes:
            plans.append(asgd(workers))
    return plans


def candidate_plans(workers: Sequence[int], stragglers: frozenset[int], iter_time_s: Mapping[int, float], modes: Sequence[str]) -> list[SyncPlan]:
    """SSGD, k-of-N for each useful k, 2-group splits of the time-sorted workers, excluded stragglers, ASGD."""
    workers = tuple(sorted(workers))
    specs = _candidate_specs(len(workers), stragglers, modes)
    if not _trusted_workers(workers, stragglers, specs):
        return _candidate_plans_reference(workers, stragglers, iter_time_s, modes)
    rank = None
    if any(family == "grouped" for family, _ in specs):
        rank = _rank(np.array(sorted(range(len(workers)), key=lambda i: (iter_time_s[workers[i]], workers[i])), dtype=np.intp))
    mask = _stragglers_mask(workers, stragglers, specs)
    checked = _Workers(workers)
    return [_build_plan(spec, checked, rank, mask) for spec in specs]


def _kofn_scores(ks: Sequence[int], n: int, full_batch: int, rate_sorted: np.ndarray, batch_sorted: np.ndarray,
                 on_time_batch: np.ndarray, b_noise: float, penalty: float) -> list[tuple[float, float, float, float]]:
    """_score_arrays of every k-of-N candidate at once, one row per k (its rounds: the k-th fastest
    closes the round, the N-k others push late, fastest first), same bits: every sum runs along a row
    in order, and cells past a row's end are never read."""
    if n < _FEW_ROUNDS:
        scores = []
        for k in ks:
            rounds = [(float(rate_sorted[k - 1]), k, float(on_time_batch[k - 1]))]
            rounds.extend(zip(rate_sorted[k:].tolist(), [1] * (n - k), batch_sorted[k:].astype(np.float64).tolist()))
            scores.append(_score_rounds(n, full_batch, rounds, b_noise, penalty))
        return scores
    k = np.asarray(ks, dtype=np.int64)
    lengths = n - k + 1
    at = np.minimum(k[:, None] - 1 + np.arange(int(lengths.max())), n - 1)  # (k-1+j)-th fastest; clipped past the end
    rates = rate_sorted[at]
    gradients = rates.copy()
    gradients[:, 0] *= k  # the quorum round applies k gradients; a late push one (rate * 1 == rate)
    updates_per_s = _python_row_sums(rates, lengths)
    gradients_per_s = _python_row_sums(gradients, lengths)
    share = gradients / gradients_per_s[:, None]
    stale_terms = share * (1 + penalty * ((updates_per_s[:, None] - rates) / rates))
    if b_noise <= 0 or full_batch <= 0:
        eff_terms = share
    else:
        full = 1 + b_noise / full_batch
        with np.errstate(divide="ignore"):
            late_eff = np.where(batch_sorted > 0, (1 + b_noise / batch_sorted.astype(np.float64)) / full, 1.0)
            on_time = on_time_batch[k - 1].astype(np.float64)
            round_eff = np.where(on_time > 0, (1 + b_noise / on_time) / full, 1.0)
        eff = late_eff[at]
        eff[:, 0] = round_eff
        eff_terms = share * eff
    weighted_eff = _in_order_row_sums(eff_terms, lengths).tolist()
    weighted_stale = _in_order_row_sums(stale_terms, lengths).tolist()
    return [((n / g) * e * s, g, e, s) for g, e, s in zip(gradients_per_s.tolist(), weighted_eff, weighted_stale)]


def _spec_scores(specs: Sequence[tuple[str, int]], times: np.ndarray, batches: np.ndarray, order: np.ndarray,
                 stragglers_mask: np.ndarray | None, b_noise: float, penalty: float) -> list[tuple[float, float, float, float]]:
    """_estimate_reference's numbers for each spec's plan, from the workers' arrays (id order) and
    `order` (their indices by time, stable: ties in id order, as the plans' sorts break them)."""
    n = len(times)
    rate = 1.0 / times
    full_batch = int(batches.sum())
    rate_sorted, batch_sorted = rate[order], batches[order]
    on_time_batch = np.cumsum(batch_sorted)  # [k-1]: the batch of the k fastest (ints: exact)
    kofn_ks = [k for family, k in specs if family == "kofn"]
    kofn = iter(_kofn_scores(kofn_ks, n, full_batch, rate_sorted, batch_sorted, on_time_batch, b_noise, penalty) if kofn_ks else ())
    scores = []
    for family, k in specs:
        if family == "kofn":
            scores.append(next(kofn))
        elif family == "ssgd":  # one round, closed by the slowest worker
            scores.append(_score_rounds(n, full_batch, [(float(rate_sorted[-1]), n, float(full_batch))], b_noise, penalty))
        elif family == "grouped":  # the k fastest and the rest, each all-of-group
            fast_batch = int(on_time_batch[k - 1])
            rounds = [(float(rate_sorted[k - 1]), k, float(fast_batch)), (float(rate_sorted[-1]), n - k, float(full_batch - fast_batch))]
            scores.append(_score_rounds(n, full_batch, rounds, b_noise, penalty))
        elif family == "exclude":  # the healthy sync together; each straggler alone, in id order
            assert stragglers_mask is not None
            healthy = ~stragglers_mask
            alone = np.flatnonzero(stragglers_mask)
            rates = np.concatenate(([1.0 / float(times[healthy].max())], rate[alone]))
            counts = np.ones(len(rates), dtype=np.int64)
            counts[0] = int(healthy.sum())
            update_batches = np.concatenate(([float(batches[healthy].sum())], batches[alone].astype(np.float64)))
            scores.append(_score_arrays(n, full_batch, rates, counts, update_batches, b_noise, penalty))
        else:  # asgd: every worker alone, in id order
            scores.append(_score_arrays(n, full_batch, rate, np.ones(n, dtype=np.int64), batches.astype(np.float64), b_noise, penalty))
    return scores


def _fast_candidate_estimates(workers: tuple[int, ...], stragglers: frozenset[int], iter_time_s: Mapping[int, float],
                              batch: Mapping[int, int], b_noise: float, penalty: float,
                              modes: Sequence[str]) -> tuple[Estimate, ...] | None:
    """tuple(estimate(p, ...) for p in candidate_plans(...)) from one sort of the times, equal bit for bit;
    None where the input needs the reference path."""
    specs = _candidate_specs(len(workers), stragglers, modes)
    if not _trusted_workers(workers, stragglers, specs):
        return None
    arrays = _arrays(workers, iter_time_s, batch)
    if arrays is None:
        return None
    times, batches = arrays
    order = np.argsort(times, kind="stable")  # by (time, id): workers are sorted by id
    rank = _rank(order) if any(family == "grouped" for family, _ in specs) else None
    mask = _stragglers_mask(workers, stragglers, specs)
    scores = _spec_scores(specs, times, batches, order, mask, b_noise, penalty)
    checked = _Workers(workers)
    return tuple(Estimate(_build_plan(spec, checked, rank, mask), *score) for spec, score in zip(specs, scores))


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


def same_shape(a: SyncPlan, b: SyncPlan) -> bool:
    """Equal ignoring the epoch, label and pacing (pacing is the traffic guard's business, not the selector's)."""
    key = lambda p: (sorted(zip(p.groups, p.quorum)), p.staleness_bound, p.scale, p.late_policy)  # noqa: E731
    return key(a) == key(b)


def _missing_timings(workers: tuple[int, ...], iter_time_s: Mapping[int, float]) -> bool:
    if type(iter_time_s) is dict:  # a set comparison in C; any other mapping by its own `in`
        return not iter_time_s.keys() >= set(workers)
    return any(w not in iter_time_s for w in workers)


def _same_rounds(plan: SyncPlan, estimates: Sequence[Estimate]) -> Estimate | None:
    """`plan`'s estimate taken from a candidate with the same groups, quorums and late policy (all that
    `estimate` reads, so the same numbers), sparing a second pass over the workers; None if none has."""
    for e in estimates:
        p = e.plan
        if p.quorum == plan.quorum and p.late_policy == plan.late_policy and p.groups == plan.groups:
            return Estimate(plan, e.seconds_per_progress, e.gradients_per_s, e.efficiency, e.staleness)
    return None


@dataclass
class HeuristicSelector:
    config: SelectorConfig = field(default_factory=SelectorConfig)
    _last_switch: int = -(10**9)

    def decide(
        self,
        period: int,
        current: SyncPlan,
        iter_time_s: Mapping[int, float],
        batch: Mapping[int, int],
        stragglers: frozenset[int],
        b_noise: float = 0.0,
    ) -> ModeDecision:
        workers = current.workers
        if _missing_timings(workers, iter_time_s):
            return ModeDecision(None, "waiting for timings from every worker", ())
        penalty = self.config.staleness_penalty
        estimates = _fast_candidate_estimates(workers, stragglers, iter_time_s, batch, b_noise, penalty, self.config.modes)
        if estimates is None:
            estimates = tuple(
                _estimate_reference(p, iter_time_s, batch, b_noise, penalty)
                for p in _candidate_plans_reference(workers, stragglers, iter_time_s, self.config.modes)
            )
        if not estimates:
            return ModeDecision(None, "no candidate plans", ())
        best = min(estimates, key=lambda e: e.seconds_per_progress)
        now = _same_rounds(current, estimates) or estimate(current, iter_time_s, batch, b_noise, penalty)
        if same_shape(best.plan, current):
            return ModeDecision(None, f"{current.label} is already the best plan ({now.seconds_per_progress:.4f} s/step)", estimates)
        if period - self._last_switch < self.config.min_dwell:
            return ModeDecision(None, f"dwell: last switch {period - self._last_switch} decisions ago", estimates)
        gain = 1 - best.seconds_per_progress / now.seconds_per_progress
        if gain < self.config.margin:
            return ModeDecision(
                None, f"best {best.plan.label} gains only {gain:.1%} over {current.label} (margin {self.config.margin:.0%})", estimates
            )
        self._last_switch = period
        return ModeDecision(
            best.plan,
            f"{best.plan.label} {best.seconds_per_progress:.4f} s/step beats {current.label} {now.seconds_per_progress:.4f} by {gain:.1%}",
            estimates,
        )
