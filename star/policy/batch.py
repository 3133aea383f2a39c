"""Batch orchestration (BOA / LB-BSP): per-worker batch sizes by speed under a fixed global batch.

Minimise the slowest worker's iteration time max_i (c_i + b_i·s_i) subject to
Σ b_i = B and b_min ≤ b_i ≤ b_max, with integer b_i. Each worker's cost is increasing
in its batch, so handing out samples one at a time to the worker whose time would
grow least (a heap) is exact for this separable min-max problem. `solve_batch_sizes` gives
exactly the heap's answer without popping sample by sample: a threshold search on the
finishing time hands out in bulk every sample the heap would hand out before it, and sorts
only the few near the threshold the way the heap would pop them (O(N log N) per call,
however large the global batch).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from star.errors import ConfigError
from star.policy.batch_guard import BatchGuardConfig


@dataclass(frozen=True)
class BatchConfig:
    """Batch orchestration settings."""

    min_batch: int = 1  # never give a worker fewer samples than this
    max_factor: float = 2.0  # nor more than this many times the even share
    min_gain: float = 0.05  # resend sizes only when they cut the predicted slowest-worker time by this fraction...
    change_cost_iters: float = 1.0  # ...and the saving repays a change's cost (this many slowest-worker iterations:
    payback_iters: float = 10.0  # re-measuring at the new sizes) within this many iterations, or within as many as the
    held_payback: bool = True  # speeds have held unchanged, if more: a spread that has lasted t is expected to last about t more
    noise_z: float = 1.0  # ...judged on speeds whose differences are shrunk by this many standard errors (0: as measured)
    speed_alpha: float = 0.3  # EMA weight of a decision's new per-sample time in the speeds sizing acts on (1: none)
    speed_band: float = 0.15  # a worker's speed for sizing moves only when its EMA leaves this relative band...
    speed_confirm: int = 2  # ...for this many decisions in a row
    speed_jump: float | None = 0.3  # ...except a slowdown by more than this fraction, followed at once (None: none)
    speed_shared: bool = True  # a speed that moves moves with it the others already outside the band on its side, if
    # together they are at least half the workers (a shift they share is not a spread; star.policy.speeds)
    settle_max_periods: int = 5  # after a resize, wait until every worker reported at its new size (at most this many decisions)
    even_keep_gain: float | None = 0.0  # sizes in force that beat even batches by no more than this on the speeds they were
    # solved for go back to even (None: never; back_to_even)
    cut_at_once: bool = True  # the worker whose report woke a decision starts its cut in its next iteration (a round with
    # fewer samples); False: at the common iteration, like every other change (simulated at 100-1,000 workers on spiky
    # real traces, acting at once on one-iteration spikes cost batch sizing 1-4%: README, "cut in its very next iteration")
    guard: BatchGuardConfig = field(default_factory=BatchGuardConfig)  # back off to even batches when sizing loses

    def __post_init__(self) -> None:
        for name, ok in (("min_batch", self.min_batch >= 1), ("max_factor", self.max_factor >= 1),
                         ("min_gain", 0 <= self.min_gain < 1), ("change_cost_iters", self.change_cost_iters >= 0),
                         ("payback_iters", self.payback_iters > 0), ("noise_z", self.noise_z >= 0),
                         ("speed_alpha", 0 < self.speed_alpha <= 1), ("speed_band", self.speed_band >= 0),
                         ("speed_confirm", self.speed_confirm >= 1),
                         ("settle_max_periods", self.settle_max_periods >= 0),
                         ("even_keep_gain", self.even_keep_gain is None or 0 <= self.even_keep_gain < 1),
                         ("speed_jump", self.speed_jump is None or self.speed_jump > 0)):
            if not ok:
                raise ConfigError(f"control.batching.{name}", getattr(self, name), "out of range")

    def required_gain(self, held_iters: float = 0.0) -> float:
        """The fraction of the slowest worker's iteration time a change must save. `held_iters`: iterations the
        speeds sizing acts on have held unchanged. With `held_payback` the change's cost may be repaid over that
        long (a lasting mild spread, as real clusters' heterogeneous workers show, is balanced at `min_gain`);
        speeds that just moved get `payback_iters`, so a spike or a fresh step still needs the higher bar."""
        horizon = max(self.payback_iters, held_iters) if self.held_payback else self.payback_iters
        return max(self.min_gain, self.change_cost_iters / horizon)


class BatchPlanError(ValueError):
    pass


def solve_batch_sizes(
    per_sample_s: Mapping[int, float],
    global_batch: int,
    *,
    fixed_s: Mapping[int, float] | None = None,
    min_batch: int = 1,
    max_batch: int | None = None,
) -> dict[int, int]:
    """Integer batch sizes minimising max_i (fixed_i + b_i·per_sample_i), summing to global_batch."""
    workers = sorted(per_sample_s)
    if not workers:
        raise BatchPlanError("per_sample_s is empty")
    s = np.array([per_sample_s[w] for w in workers])
    numeric = s.dtype == np.float64 or s.dtype.kind in "iu"  # else: the plain-Python check and heap, as before
    if (s <= 0).any() if numeric else any(per_sample_s[w] <= 0 for w in workers):
        raise BatchPlanError(f"per_sample_s must be > 0, got {dict(per_sample_s)}")
    upper = max_batch if max_batch is not None else global_batch
    if min_batch * len(workers) > global_batch or upper * len(workers) < global_batch:
        raise BatchPlanError(
            f"global_batch={global_batch} cannot be split over {len(workers)} workers within [{min_batch}, {upper}]"
        )
    fixed = fixed_s or {}
    if numeric:
        sizes = _window_sizes(workers, s.astype(np.float64), fixed, global_batch, min_batch, upper)
        if sizes is not None:
            return sizes
    sizes = _bulk_sizes(workers, per_sample_s, fixed, global_batch - min_batch * len(workers), min_batch, upper)
    heap = [(fixed.get(w, 0.0) + (sizes[w] + 1) * per_sample_s[w], w) for w in workers if sizes[w] < upper]
    heapq.heapify(heap)
    for _ in range(global_batch - sum(sizes.values())):
        _, w = heapq.heappop(heap)
        sizes[w] += 1
        if sizes[w] < upper:
            heapq.heappush(heap, (fixed.get(w, 0.0) + (sizes[w] + 1) * per_sample_s[w], w))
    return sizes


def _slots_below(threshold: float, c: np.ndarray, s: np.ndarray, min_batch: int, upper: int) -> np.ndarray:
    """Per worker, its size after every sample whose finishing time c + b·s (the heap's float
    expression) is < threshold: the b in [min_batch, upper] with c + b·s < threshold <= c + (b+1)·s."""
    q = np.minimum(np.maximum((threshold - c) / s, min_batch), upper + 1)
    b = np.minimum(np.maximum(np.ceil(q).astype(np.int64) - 1, min_batch), upper)
    for _ in range(64):  # the quotient is off by at most a step or two: settle on the exact float comparison
        down = (b > min_batch) & (c + b * s >= threshold)
        up = (b < upper) & (c + (b + 1) * s < threshold)
        if not (down.any() or up.any()):
            return b
        b = b - down + up
    raise ArithmeticError("slot count did not settle")


def _window_sizes(workers: list[int], s: np.ndarray, fixed: Mapping[int, float], global_batch: int, min_batch: int,
                  upper: int) -> dict[int, int] | None:
    """The heap's answer, vectorised. The one-at-a-time greedy hands out, in order of (finishing time,
    worker id), the samples with the smallest finishing times c_w + b·s_w (b = min_batch+1..upper;
    each worker's times only grow with b, so the heap merges sorted runs). So: search a time T
    until few samples lie in [T_lo, T_hi), where at most global_batch sizes' worth of samples finish
    before T_lo and at least that many before T_hi; hand out every sample before T_lo and the rest
    from the window, sorted exactly as the heap pops them. None (use the heap) where the input is
    not float64/int numbers, all finite."""
    c = np.array([fixed.get(w, 0.0) for w in workers])
    if c.dtype != np.float64 and c.dtype.kind not in "iu":
        return None
    c = c.astype(np.float64)
    if not (np.isfinite(s).all() and np.isfinite(c).all()):
        return None
    n = len(workers)
    if global_batch == min_batch * n or upper == min_batch:
        return {w: min_batch for w in workers}
    # (T, sizes, their sum) with at most global_batch samples finishing before T, and with at least as many.
    lo = (float((c + (min_batch + 1) * s).min()), np.full(n, min_batch, dtype=np.int64), min_batch * n)  # none before
    hi = (float(np.nextafter((c + upper * s).max(), np.inf)), np.full(n, upper, dtype=np.int64), upper * n)  # all before

    def probe(t: float, lo: tuple, hi: tuple) -> tuple[tuple, tuple, str]:
        b = _slots_below(t, c, s, min_batch, upper)
        count = int(b.sum())
        return ((t, b, count), hi, "lo") if count <= global_batch else (lo, (t, b, count), "hi")

    try:
        while hi[2] - lo[2] > n // 2 + 64:
            # Samples finish at a roughly steady rate in T: probe either side of where global_batch
            # should be reached; where that does not bracket it, halve the bracket too.
            guess = lo[0] + (hi[0] - lo[0]) * ((global_batch - lo[2]) / (hi[2] - lo[2]))
            width = (hi[0] - lo[0]) * (n / 8 / (hi[2] - lo[2]))
            sides = set()
            for t in (guess - width, guess + width):
                if lo[0] < t < hi[0]:
                    lo, hi, side = probe(t, lo, hi)
                    sides.add(side)
            if len(sides) < 2:
                middle = (lo[0] + hi[0]) / 2
                if not lo[0] < middle < hi[0]:
                    break  # adjacent floats: what is left is samples tied at one finishing time
                lo, hi, _ = probe(middle, lo, hi)
    except ArithmeticError:
        return None
    (_, lo_b, lo_n), (_, hi_b, hi_n) = lo, hi
    if hi_n - lo_n > 8 * n + 4096:  # so wide a window only from pathological input: the heap instead
        return None
    rest = global_batch - lo_n
    if rest:
        extra = hi_b - lo_b  # per worker, its samples finishing in [lo_t, hi_t)
        who = np.repeat(np.arange(n), extra)
        starts = np.cumsum(extra) - extra
        size = lo_b[who] + 1 + (np.arange(len(who)) - starts[who])  # each sample's size once handed out
        finish = c[who] + size * s[who]
        # In (worker, size) order already, so a stable sort on the finishing time is the heap's order.
        first = np.argsort(finish, kind="stable")[:rest]
        lo_b = lo_b + np.bincount(who[first], minlength=n)
    return dict(zip(workers, lo_b.tolist()))


def _bulk_sizes(workers: list[int], per_sample_s: Mapping[int, float], fixed: Mapping[int, float], remaining: int,
                min_batch: int, upper: int) -> dict[int, int]:
    """Hand out at once every sample the one-at-a-time greedy would give before its finishing
    time reaches a threshold T, leaving at most ~2 per worker to the exact heap, so the result is
    the same as handing out every sample by heap, in O(N log) instead of O(B log N) steps."""
    s = np.array([per_sample_s[w] for w in workers])
    c = np.array([fixed.get(w, 0.0) for w in workers])
    span = upper - min_batch

    def approx_count(threshold: float) -> int:
        return int(np.clip(np.floor((threshold - c) / s) - min_batch, 0, span).sum())

    low, high = float((c + min_batch * s).min()), float((c + upper * s).max())
    budget = remaining - len(workers)  # headroom for the exact check moving each worker by one
    if budget <= 0 or approx_count(high) <= budget:
        low = float((c + min_batch * s).min())  # nothing to gain in bulk
    else:
        for _ in range(64):
            middle = (low + high) / 2
            if approx_count(middle) <= budget:
                low = middle
            else:
                high = middle
    sizes = {}
    for w, s_w, c_w in zip(workers, s.tolist(), c.tolist()):
        # Exactly the samples whose finishing time (same float expression as the heap) is < low.
        k = min(upper, max(min_batch, int((low - c_w) / s_w)))
        while k > min_batch and c_w + k * s_w >= low:
            k -= 1
        while k < upper and c_w + (k + 1) * s_w < low:
            k += 1
        sizes[w] = k
    return sizes


def makespan_s(sizes: Mapping[int, int], per_sample_s: Mapping[int, float], fixed_s: Mapping[int, float] | None = None) -> float:
    fixed = fixed_s or {}
    return max(fixed.get(w, 0.0) + b * per_sample_s[w] for w, b in sizes.items())


def worth_changing(
    current: Mapping[int, int],
    proposed: Mapping[int, int],
    per_sample_s: Mapping[int, float],
    fixed_s: Mapping[int, float] | None,
    min_gain: float,
) -> bool:
    """Only a clear predicted gain justifies a change: timings are noisy, and every change costs a re-measure."""
    return predicted_gain(current, proposed, per_sample_s, fixed_s) >= min_gain > -1


def predicted_gain(current: Mapping[int, int], proposed: Mapping[int, int], per_sample_s: Mapping[int, float],
                   fixed_s: Mapping[int, float] | None) -> float:
    """The fraction of the slowest worker's iteration time `proposed` saves over `current` (0 when unknown)."""
    before = makespan_s(current, per_sample_s, fixed_s)
    return 1 - makespan_s(proposed, per_sample_s, fixed_s) / before if before > 0 else 0.0


@dataclass(frozen=True)
class BackToEven:
    sizes: dict[int, int]  # even
    gain: float  # what the sizes in force gain over them on the speeds they were solved for

    def event(self, keep_gain: float) -> dict:
        return {"kind": "batch_sizes", "sizes": {str(w): b for w, b in self.sizes.items()}, "back_to_even": True,
                "predicted_gain": round(-self.gain, 3),
                "reason": f"back to even batches: the sizes in force beat them by {self.gain:.1%} on the smoothed speeds "
                          f"batch sizing acts on (<= {keep_gain:.0%}: no longer worth their unevenness)"}


def back_to_even(current: Mapping[int, int], per_sample_s: Mapping[int, float], fixed_s: Mapping[int, float],
                 even_size: int, keep_gain: float) -> BackToEven | None:
    """Even sizes, and what the sizes in force gain over them, where that gain is no more than `keep_gain` on
    `per_sample_s`, the smoothed speeds batch sizing solves sizes for (star.policy.speeds.SpeedTracker); None where
    they still pay. A resize needs a clear gain, so uneven sizes set for a difference that has since gone stayed as
    long as no other change cleared that bar: at 100 simulated workers on job_1, sizes of 31-80 set for a passing
    slowdown at 5 s held for the rest of the run, 3-4% slower than even batches (SSGD). The bar back to even is
    lower than the bar away from it, so a decision does not undo the one before on the same speeds. Not judged on
    the noise-shrunk speeds (resolvable_speeds): right after an AMP verification a worker's few fresh reports carry
    a large error that shrinks every difference, and sizes that fit looked worse than even (simulated 4-worker
    heavy_tail: back to even at once, 13.47 -> 13.66 s)."""
    even = {w: even_size for w in current}
    if dict(current) == even:
        return None
    gain = predicted_gain(even, current, per_sample_s, fixed_s)
    return BackToEven(even, gain) if gain <= keep_gain else None


def batch_offsets(sizes: Mapping[int, int]) -> dict[int, int]:
    """Each worker's offset in a round's global batch (star.tasks.global_batch): the sizes of the
    workers before it, in worker order, so that the batches tile the global batch."""
    offsets, total = {}, 0
    for worker in sorted(sizes):
        offsets[worker] = total
        total += sizes[worker]
    return offsets


BATCH_LEAD_ITERATIONS = 1  # how far past the furthest worker's latest report new batches start


def first_iteration_of_new_batches(max_reported_iteration: int) -> int:
    """The iteration from which every worker takes new sizes and offsets together. Under synchronous
    plans no worker has reported past the furthest report, and each worker, before it computes an
    iteration, waits briefly for the reply to the report it just queued (star.worker.reporting), which
    carries every decision made before that report arrived: so one iteration past the furthest report,
    every worker has read the directive. A reply later than the wait makes that worker apply it one
    iteration late (at once, star.policy.batch_queue.PendingBatch). Before it, the old batches still tile the round."""
    return max_reported_iteration + BATCH_LEAD_ITERATIONS


def directed_from_iteration(pending_from: int, reported_iteration: int, max_reported_iteration: int) -> int:
    """The first iteration of one worker's new batch directive. A directive still pending for this worker (it has
    not reached `pending_from`) keeps its iteration when a newer one replaces it: moved on to one past the furthest
    report, it would be postponed by every decision that comes before the worker gets there. At 1,000 simulated
    workers, with sizes re-decided every round, a 2x straggler cut to 27 of 64 ran 5 more rounds at 64 that way,
    every round the slowest (its round-mates that had reached the iteration took their new sizes, so that round was
    not tiled either). Otherwise: first_iteration_of_new_batches."""
    start = first_iteration_of_new_batches(max_reported_iteration)
    return min(pending_from, start) if reported_iteration < pending_from else start
