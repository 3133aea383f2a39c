"""Never keep a combination that measurably underperforms one of its parts.

`auto` stacks remedies. Batch sizing alone can balance a straggler by giving it fewer
samples; AMP on that straggler then buys little round time while it costs a verification
period (the worker's batch is held) and bf16 precision. So, with batch sizing on, AMP is
judged by what it adds to batch sizing: the slowest worker's predicted iteration time
with batch sizes re-solved at the worker's AMP speed, against batch sizes alone at its
plain speed. Before trying AMP the AMP speed is an assumed best case; once verified it is
the measured one. Stragglers not on AMP are judged together: where many workers slow at once
(contention on a host), AMP on any one of them adds little once batch sizes move its samples to
the others, while AMP on all of them adds the capacity batch sizing cannot (simulated at 100
workers, each of 25 slowed workers read 0.7% and AMP was never tried; AMP alone beat auto by 7%).
Pure: the caller passes the solver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from star.policy.batch import makespan_s

Sizes = Callable[..., dict[int, int]]  # (per-sample seconds[, fixed seconds]) -> batch sizes


@dataclass(frozen=True)
class AddedGain:
    batch_alone_s: float  # predicted slowest-worker iteration seconds, batch sizes alone
    with_amp_s: float  # ... with AMP on the worker too
    gain: float  # 1 - with_amp_s / batch_alone_s

    def explain(self, workers: Sequence[int], speedup: float, min_gain: float, measured: bool) -> str:
        how = f"measured {speedup:.2f}x" if measured else f"even a {speedup:.2f}x"
        who = f"worker {workers[0]}" if len(workers) == 1 else f"workers {list(workers)}"
        on = "" if len(workers) == 1 else " on all of them"
        return (f"batch sizes alone balance {who}: {how} AMP speed-up{on} would cut the predicted iteration "
                f"{self.batch_alone_s * 1e3:.1f} -> {self.with_amp_s * 1e3:.1f} ms ({self.gain:.1%} < {min_gain:.0%}); "
                f"AMP {'undone' if measured else 'not tried'}")


def amp_gain_under_batch(per_sample_s: Mapping[int, float], fixed_s: Mapping[int, float], workers: Iterable[int],
                         speedup: float, sizes_for: Sizes, fixed_compute_s: Mapping[int, float] | None = None) -> AddedGain:
    """What AMP (per-sample time / `speedup` on each of `workers`) adds once batch sizes are re-solved.
    `per_sample_s[w]` is each worker's time without AMP; `fixed_compute_s[w]`, the part of `fixed_s[w]` that is
    its step's fixed compute (star.report_book), which AMP shortens by the same factor."""
    workers = list(workers)
    faster = {**per_sample_s, **{w: per_sample_s[w] / speedup for w in workers}}
    compute = fixed_compute_s or {}
    faster_fixed = {**fixed_s, **{w: fixed_s[w] - compute.get(w, 0.0) * (1 - 1 / speedup) for w in workers}}
    alone = makespan_s(sizes_for(per_sample_s), per_sample_s, fixed_s)
    combined = makespan_s(sizes_for(faster, faster_fixed), faster, faster_fixed)
    return AddedGain(alone, combined, 1 - combined / alone if alone > 0 else 0.0)


def unbalanced(in_force_s: Mapping[int, tuple[float, float]], balanced_s: float, speedup: float, min_gain: float) -> list[int]:
    """Of the workers left off AMP for batch sizes to balance, those that still hold the round back: at their size in
    force (`in_force_s[w]`: its fixed seconds and compute seconds) the iteration is over the balanced round by more than
    `min_gain`, and AMP at `speedup` would cut it by at least that much. Batch sizing may wait for a resize (its gain
    not yet resolved among many workers, or its last sizes not yet reported) while AMP would act now."""
    return [w for w, (fixed_s, compute_s) in in_force_s.items() if fixed_s + compute_s > balanced_s * (1 + min_gain)
            and compute_s * (1 - 1 / speedup) >= min_gain * (fixed_s + compute_s)]
