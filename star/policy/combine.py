"""Never keep a combination that measurably underperforms one of its parts.

`auto` stacks remedies. Batch sizing alone can balance a straggler by giving it fewer
samples; AMP on that straggler then buys little round time while it costs a verification
period (the worker's batch is held) and bf16 precision. So, with batch sizing on, AMP is
judged by what it adds to batch sizing: the slowest worker's predicted iteration time
with batch sizes re-solved at the worker's AMP speed, against batch sizes alone at its
plain speed. Before trying AMP the AMP speed is an assumed best case; once verified it is
the measured one. Pure: the caller passes the solver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from star.policy.batch import makespan_s

Sizes = Callable[[Mapping[int, float]], dict[int, int]]  # per-sample seconds -> batch sizes


@dataclass(frozen=True)
class AddedGain:
    batch_alone_s: float  # predicted slowest-worker iteration seconds, batch sizes alone
    with_amp_s: float  # ... with AMP on the worker too
    gain: float  # 1 - with_amp_s / batch_alone_s

    def explain(self, worker: int, speedup: float, min_gain: float, measured: bool) -> str:
        how = f"measured {speedup:.2f}x" if measured else f"even a {speedup:.2f}x"
        return (f"batch sizes alone balance worker {worker}: {how} AMP speed-up would cut the predicted iteration "
                f"{self.batch_alone_s * 1e3:.1f} -> {self.with_amp_s * 1e3:.1f} ms ({self.gain:.1%} < {min_gain:.0%}); "
                f"AMP {'undone' if measured else 'not tried'}")


def amp_gain_under_batch(per_sample_s: Mapping[int, float], fixed_s: Mapping[int, float], worker: int, speedup: float,
                         sizes_for: Sizes) -> AddedGain:
    """What AMP (per-sample time / `speedup` on `worker`) adds once batch sizes are re-solved.
    `per_sample_s[worker]` is the worker's time without AMP."""
    faster = {**per_sample_s, worker: per_sample_s[worker] / speedup}
    alone = makespan_s(sizes_for(per_sample_s), per_sample_s, fixed_s)
    combined = makespan_s(sizes_for(faster), faster, fixed_s)
    return AddedGain(alone, combined, 1 - combined / alone if alone > 0 else 0.0)
