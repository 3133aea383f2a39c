"""Heuristic sync-mode selection (after STAR): pick the plan with the fewest seconds per unit of progress.

Every candidate plan (`star.policy.candidates`) is scored by the cost model in
`star.policy.plan_scores`. A switch happens only when the best candidate beats the plan in
force by `margin`, and not sooner than `min_dwell` decisions after the last one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from star.errors import ConfigError
from star.plan import SyncPlan
from star.policy.candidates import candidate_estimates
from star.policy.plan_scores import Estimate, estimate


@dataclass(frozen=True)
class SelectorConfig:
    """Heuristic mode-selector settings."""

    margin: float = 0.1  # switch only when the best plan is this fraction faster than the current one
    min_dwell: int = 3  # decisions to wait after a switch before the next one
    # Progress factor 1/(1 + penalty·staleness). None: the task's measured penalty (star calibrate; shipped for
    # built-in tasks, star.task_calibration), else DEFAULT_STALENESS_PENALTY. How much a stale update is worth is
    # a property of the task: digits measured 0.88, and at the default 0.15 the selector sent auto to k-of-N or
    # grouped plans that needed 2-3x the updates it predicted.
    staleness_penalty: float | None = None
    modes: tuple[str, ...] = ("ssgd", "kofn", "grouped", "exclude", "asgd")  # candidates considered

    def __post_init__(self) -> None:
        if self.staleness_penalty is not None and not self.staleness_penalty >= 0:
            raise ConfigError("control.selection.staleness_penalty", self.staleness_penalty, "must be >= 0")

    @property
    def penalty(self) -> float:
        """The staleness penalty in force: the configured (or task's) one, else the default."""
        return DEFAULT_STALENESS_PENALTY if self.staleness_penalty is None else self.staleness_penalty


DEFAULT_STALENESS_PENALTY = 0.15  # where neither the config nor a calibration of the task gives one


def with_task_penalty(config: SelectorConfig, task_penalty: float | None) -> SelectorConfig:
    """`config` with an unset staleness_penalty filled from the task's measured one (if known)."""
    if config.staleness_penalty is not None or task_penalty is None:
        return config
    return dataclasses.replace(config, staleness_penalty=task_penalty)


@dataclass(frozen=True)
class ModeDecision:
    plan: SyncPlan | None  # None: keep the plan in force
    reason: str
    estimates: tuple[Estimate, ...]


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
        penalty = self.config.penalty
        estimates = candidate_estimates(workers, stragglers, iter_time_s, batch, b_noise, penalty, self.config.modes)
        if not estimates:
            return ModeDecision(None, "no candidate plans", ())
        now = _same_rounds(current, estimates) or estimate(current, iter_time_s, batch, b_noise, penalty)
        return self.choose(period, current, now, estimates)

    def choose(self, period: int, current: SyncPlan, now: Estimate, estimates: Sequence[Estimate]) -> ModeDecision:
        """Switch to the fastest candidate when it beats the current plan (`now`) by the margin and the
        last switch is at least `min_dwell` decisions old."""
        best = min(estimates, key=lambda e: e.seconds_per_progress)
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
