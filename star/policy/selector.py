"""Heuristic sync-mode selection (after STAR): pick the plan with the fewest seconds per unit of progress.

Every candidate plan (`star.policy.candidates`) is scored by the cost model in
`star.policy.plan_scores`. A switch happens only when the best candidate beats the plan in
force by `margin`, and not sooner than `min_dwell` decisions after the last one.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

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
    # a property of the task: digits measured 0.88 (0.45 since the PSs match momentum to asynchrony), and at the
    # default 0.15 the selector sent auto to k-of-N or grouped plans that needed 2-3x the updates it predicted.
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


def full_sync(plan: SyncPlan) -> bool:
    """One group that waits for all its workers: SSGD, the plan no slow set shapes."""
    return len(plan.groups) == 1 and plan.quorum[0] == len(plan.groups[0])


def unconfirmed(best: SyncPlan, current: SyncPlan, previous_iter_time_s: Mapping[int, float] | None,
                batch: Mapping[int, int], b_noise: float, penalty: float, margin: float) -> str | None:
    """Why a switch to `best` is not backed by earlier iteration times (None: it is, or `best` is full
    synchronisation, which needs no backing). The controller passes each worker's times of at least one
    decision period before (`PricedTimes`).

    A grouped, k-of-N or asynchronous plan is built around who is slow now, and pays only while they stay
    slow; a switch costs a round of refused pushes. Where slowdowns move from worker to worker every second
    or two (1,000 simulated workers on job_1: 9 plan switches in 23 s, 5 of them from one grouping to
    another), the plan chosen on one decision's times is stale by the next. So a plan shaped by the slow set
    must beat the plan in force by the margin at the earlier times too: a slow set seen once waits; one that
    lasts is acted on then. k-of-N waits for no one in particular, so anyone slow then backs it."""
    if full_sync(best) or previous_iter_time_s is None:  # None: the caller keeps no history, asks no backing
        return None
    if _missing_timings(best.workers, previous_iter_time_s) or _missing_timings(current.workers, previous_iter_time_s):
        return f"{best.label} waits: no earlier iteration times of every worker to confirm it"
    then = estimate(best, previous_iter_time_s, batch, b_noise, penalty).seconds_per_progress
    was = estimate(current, previous_iter_time_s, batch, b_noise, penalty).seconds_per_progress
    gain = 1 - then / was
    if gain < margin:
        return (f"{best.label} would have gained only {gain:.1%} over {current.label} at the earlier "
                f"iteration times (margin {margin:.0%}): the slow set it is built on is new")
    return None


class PricedTimes:
    """Each worker's last priced iteration time, kept over the clock, so that a plan shaped by the slow set can
    be checked against the times of at least `age_s` before (`unconfirmed`). Decisions also come early, on
    arrivals, a fraction of a second apart: the decision just before would back almost anything."""

    def __init__(self, age_s: float):
        self.age_s = age_s
        self._latest: dict[int, float] = {}
        self._history: deque[tuple[float, dict[int, float]]] = deque()

    def record(self, times: Mapping[int, float], now_s: float | None) -> dict[int, float]:
        """Take this decision's times; return the newest times at least age_s old ({}: none yet). Without a
        clock (now_s None), the previous decision's."""
        previous = self._latest
        self._latest = {**previous, **times}
        if now_s is None:
            return previous
        self._history.append((now_s, self._latest))
        while len(self._history) >= 2 and now_s - self._history[1][0] >= self.age_s:
            self._history.popleft()
        oldest_s, oldest = self._history[0]
        return oldest if now_s - oldest_s >= self.age_s else {}


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
        previous_iter_time_s: Mapping[int, float] | None = None,
    ) -> ModeDecision:
        """`previous_iter_time_s`: earlier times (the controller's `PricedTimes`, at least a decision period
        old) that a plan shaped by the slow set must also win at (`unconfirmed`; None: not asked)."""
        workers = current.workers
        if _missing_timings(workers, iter_time_s):
            return ModeDecision(None, "waiting for timings from every worker", ())
        penalty = self.config.penalty
        estimates = candidate_estimates(workers, stragglers, iter_time_s, batch, b_noise, penalty, self.config.modes)
        if not estimates:
            return ModeDecision(None, "no candidate plans", ())
        now = _same_rounds(current, estimates) or estimate(current, iter_time_s, batch, b_noise, penalty)
        return self.choose(period, current, now, estimates, lambda plan: unconfirmed(
            plan, current, previous_iter_time_s, batch, b_noise, penalty, self.config.margin))

    def choose(self, period: int, current: SyncPlan, now: Estimate, estimates: Sequence[Estimate],
               why_not: Callable[[SyncPlan], str | None] | None = None) -> ModeDecision:
        """Switch to the fastest candidate when it beats the current plan (`now`) by the margin, the
        last switch is at least `min_dwell` decisions old, and `why_not` (if given) has no objection."""
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
        objection = why_not(best.plan) if why_not is not None else None
        if objection is not None:
            return ModeDecision(None, objection, estimates)  # no switch: the dwell still counts from the last real one
        self._last_switch = period
        return ModeDecision(
            best.plan,
            f"{best.plan.label} {best.seconds_per_progress:.4f} s/step beats {current.label} {now.seconds_per_progress:.4f} by {gain:.1%}",
            estimates,
        )
