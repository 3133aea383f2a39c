"""Dynamic Partial All-Reduce as a strategy: when detected stragglers leave the sync group.

Taking every detected straggler out at once is right for one slow worker of four, and wrong at
scale: each excluded worker runs alone, so 25 stragglers of 100 become 25 streams of stale
updates, and they cost more progress than the waiting they save (simulated, `contention` at 100
workers: 154 s against SSGD's 27 s; `rotating` at 1,000: 891 s against 41 s). So an exclusion is
priced with the mode selector's cost model (star.policy.plan_scores: gradient throughput, effective
batch, staleness) against SSGD, and taken only with the selector's margin and dwell. Readmission
needs no price: once no straggler is detected, everyone rejoins.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, NamedTuple

from star.plan import SyncPlan, ssgd
from star.policy.selector import HeuristicSelector, SelectorConfig, same_shape


class ExclusionDecision(NamedTuple):
    plan: SyncPlan | None  # the plan to switch to; None keeps the current one
    reason: str


class ExclusionPolicy:
    """Chooses between SSGD and excluding the detected stragglers (the `exclude` strategy's plans)."""

    def __init__(self, selection: SelectorConfig):
        self._selector = HeuristicSelector(dataclasses.replace(selection, modes=("ssgd", "exclude")))

    def decide(self, period: int, current: SyncPlan, iter_time_s: Mapping[int, float], batch: Mapping[int, int],
               stragglers: frozenset[int], b_noise: float) -> ExclusionDecision:
        """`current` holds the workers still in the job; the times and batches are theirs."""
        if not stragglers & set(current.workers):
            everyone = ssgd(current.workers)
            if same_shape(current, everyone):
                return ExclusionDecision(None, "no straggler detected")
            return ExclusionDecision(everyone, "every straggler recovered: readmit")
        decision = self._selector.decide(period, current, iter_time_s, batch, stragglers, b_noise)
        return ExclusionDecision(decision.plan, decision.reason)
