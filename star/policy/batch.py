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
    sizes = {w: min_batch for w in workers}
    heap = [(fixed.get(w, 0.0) + (min_batch + 1) * per_sample_s[w], w) for w in workers]
    heapq.heapify(heap)
    for _ in range(global_batch - min_batch * len(workers)):
        while True:
            _, w = heapq.heappop(heap)
            if sizes[w] < upper:
                break
        sizes[w] += 1
        if sizes[w] < upper:
            heapq.heappush(heap, (fixed.get(w, 0.0) + (sizes[w] + 1) * per_sample_s[w], w))
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
