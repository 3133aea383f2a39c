"""How a worker's step time grows with its batch: the fixed part, measured once at start-up.

Batch sizing reads a worker's speed as compute seconds per sample and predicts its step at
another size in proportion. On a CPU that holds (digits: 2.6 ms at 1 sample, 87 ms at 64). On
a GPU it does not: a step is mostly kernel launches and, where workers share a GPU, waiting for
the others' kernels (gpt-50m, four workers on one H200: 31.6 ms at 1 sample, 52 ms at 8 and at
16). Read in proportion, a worker whose batch was cut looks slower per sample, is cut again,
and ends on one sample while as fast as the rest (seen there: 8 -> 2 -> 1).

So a worker times its step at its full batch and at a part of it, interleaved, before it
trains, and reports the fixed part as a number of samples' worth: a step of b samples costs
as much compute as b + fixed_samples would in proportion (`star.report_book` divides by
that). The model is t(b) = s * (F + b); F = a / s for a fit t = a + s * b through the two
points. Shares of the full step under `MIN_SHARE` read as noise (0: in proportion, as before);
over `MAX_SHARE` are capped (the slope, a difference of two noisy times, is then too small to trust).
"""

from __future__ import annotations

import time
from typing import Callable

MIN_SHARE = 0.1  # a fixed part under this share of the full step is read as measurement noise
MAX_SHARE = 0.9  # and over this share is capped there


def fixed_samples(full_s: float, part_s: float, full_batch: int, part_batch: int) -> float:
    """Samples' worth of fixed compute per step from the times of one step at two batch sizes."""
    if not 1 <= part_batch < full_batch:
        raise ValueError(f"need 1 <= part_batch ({part_batch}) < full_batch ({full_batch})")
    if not (full_s > 0 and part_s > 0):
        return 0.0
    share = min(max((part_s - full_s * part_batch / full_batch) / (full_s * (1 - part_batch / full_batch)), 0.0), MAX_SHARE)
    # share = a / t(full): with t = a + s*b through both points, a = (part*full_b - full*part_b) / (full_b - part_b).
    if share < MIN_SHARE:
        return 0.0
    return share * full_batch / (1 - share)


def measure_fixed_samples(step: Callable[[int], None], full_batch: int, repeats: int = 3,
                          clock: Callable[[], float] = time.perf_counter) -> float:
    """Time `step(batch)` at `full_batch` and at half of it, interleaved after one warm-up of each,
    and return `fixed_samples` of the fastest time at each size (the fastest: interference only adds).
    0 for a batch of one sample (nothing to compare)."""
    if full_batch < 2:
        return 0.0
    part_batch = full_batch // 2
    best = {full_batch: float("inf"), part_batch: float("inf")}
    for attempt in range(repeats + 1):
        for batch in (part_batch, full_batch):
            start = clock()
            step(batch)
            if attempt:  # the first round warms up (allocations, kernel selection)
                best[batch] = min(best[batch], clock() - start)
    return fixed_samples(best[full_batch], best[part_batch], full_batch, part_batch)
