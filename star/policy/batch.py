"""Batch orchestration (BOA / LB-BSP): per-worker batch sizes by speed under a fixed global batch.

Minimise the slowest worker's iteration time max_i (c_i + b_i·s_i) subject to
Σ b_i = B and b_min ≤ b_i ≤ b_max, with integer b_i. Each worker's cost is increasing
in its batch, so handing out samples one at a time to the worker whose time would
grow least (a heap) is exact for this separable min-max problem.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Mapping

import numpy as np


@dataclass(frozen=True)
class BatchConfig:
    """Batch orchestration settings."""

    min_batch: int = 1  # never give a worker fewer samples than this
    max_factor: float = 2.0  # nor more than this many times the even share
    min_gain: float = 0.1  # resend sizes only when they cut the predicted slowest-worker time by this fraction


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
    if any(per_sample_s[w] <= 0 for w in workers):
        raise BatchPlanError(f"per_sample_s must be > 0, got {dict(per_sample_s)}")
    upper = max_batch if max_batch is not None else global_batch
    if min_batch * len(workers) > global_batch or upper * len(workers) < global_batch:
        raise BatchPlanError(
            f"global_batch={global_batch} cannot be split over {len(workers)} workers within [{min_batch}, {upper}]"
        )
    fixed = fixed_s or {}
    sizes = _bulk_sizes(workers, per_sample_s, fixed, global_batch - min_batch * len(workers), min_batch, upper)
    heap = [(fixed.get(w, 0.0) + (sizes[w] + 1) * per_sample_s[w], w) for w in workers if sizes[w] < upper]
    heapq.heapify(heap)
    for _ in range(global_batch - sum(sizes.values())):
        _, w = heapq.heappop(heap)
        sizes[w] += 1
        if sizes[w] < upper:
            heapq.heappush(heap, (fixed.get(w, 0.0) + (sizes[w] + 1) * per_sample_s[w], w))
    return sizes


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
    before = makespan_s(current, per_sample_s, fixed_s)
    return before > 0 and makespan_s(proposed, per_sample_s, fixed_s) <= before * (1 - min_gain)
