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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

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


def estimate(plan: SyncPlan, iter_time_s: Mapping[int, float], batch: Mapping[int, int], b_noise: float, penalty: float) -> Estimate:
    """Seconds per SSGD-equivalent step of progress under `plan` (see the module docstring)."""
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
    return Estimate(plan, seconds, gradients_per_s, weighted_eff, weighted_stale)


def candidate_plans(workers: Sequence[int], stragglers: frozenset[int], iter_time_s: Mapping[int, float], modes: Sequence[str]) -> list[SyncPlan]:
    """SSGD, k-of-N for each useful k, 2-group splits of the time-sorted workers, excluded stragglers, ASGD."""
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
        if any(w not in iter_time_s for w in workers):
            return ModeDecision(None, "waiting for timings from every worker", ())
        estimates = tuple(
            estimate(p, iter_time_s, batch, b_noise, self.config.staleness_penalty)
            for p in candidate_plans(workers, stragglers, iter_time_s, self.config.modes)
        )
        if not estimates:
            return ModeDecision(None, "no candidate plans", ())
        best = min(estimates, key=lambda e: e.seconds_per_progress)
        now = estimate(current, iter_time_s, batch, b_noise, self.config.staleness_penalty)
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
