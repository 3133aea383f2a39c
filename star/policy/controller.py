"""The coordinator's decision step: detector → AMP → batch sizes → plan, as one pure call.

`Controller.decide` takes per-worker summaries of recent reports and returns what to
change (a new plan, AMP and batch directives) with the reason for each, as events.
The coordinator daemon (and a simulator) only supply summaries and carry decisions out.

Strategies (`--mode`) are named combinations of these policies:
  ssgd/asgd/kofn/grouped/ssp  a fixed plan; the detector only reports
  exclude   Dynamic Partial All-Reduce: detected stragglers leave the sync group where it pays (star.policy.exclusion)
  amp       Korel: SSGD + AMP on detected stragglers
  batch     BOA / LB-BSP: SSGD + per-worker batch sizes by speed
  auto      detector + AMP + mode selector + batch sizes (each can be switched off); the selector is the
            heuristic, or the learned one with control.selector_kind = "learned"
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping

from star.errors import ConfigError
from star.detect import DetectorConfig, StragglerDetector, finishes_early
from star.plan import SyncPlan, with_epoch, with_pace, with_tree, without_workers
from star.policy.amp import AmpConfig, AmpDecision, AmpPolicy
from star.policy.batch import back_to_even, BatchConfig, BatchPlanError, makespan_s, predicted_gain, solve_batch_sizes
from star.policy.batch_guard import BatchGuard
from star.policy.combine import amp_gain_under_batch, Sizes, unbalanced
from star.policy.learned import LearnedSelector, load_model
from star.policy.links import SlowLinks
from star.policy.plan_scores import estimate
from star.policy.exclusion import ExclusionPolicy
from star.policy.selector import HeuristicSelector, PricedTimes, SelectorConfig, same_shape, with_task_penalty
from star.policy.speeds import noise_z_for, SpeedTracker, resolvable_speeds
from star.policy.summary import WorkerSummary
from star.policy.traffic import PsLayout, TrafficConfig, TrafficGuard

FIXED_MODES = ("ssgd", "asgd", "kofn", "grouped", "ssp")
STRATEGIES = FIXED_MODES + ("exclude", "amp", "batch", "auto")


@dataclass(frozen=True)
class ControlConfig:
    """Which policies run, and how often (the strategy sets the switches)."""

    amp: bool | None = None  # AMP on detected stragglers (None: as the strategy says)
    selector: bool | None = None  # heuristic sync-mode selection (None: as the strategy says)
    batch: bool | None = None  # per-worker batch sizes by speed (None: as the strategy says)
    exclude: bool | None = None  # drop detected stragglers from the sync group (None: as the strategy says)
    decision_period_s: float = 1.0  # how often the controller decides
    min_reports: int = 3  # a worker needs this many fresh reports before it is judged
    lost_after_s: float = 20.0  # a worker silent this long is lost and leaves the plan ...
    # ... or this many of its own recent steps, if longer (a big model's slow steps are not silence). A straggler's
    # first slow step is f times its recent ones: at 3, a 3x onset at gpt-50M (7 s steps) was declared lost (5 Dec)
    lost_after_steps: float = 10.0
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    amp_policy: AmpConfig = field(default_factory=AmpConfig)
    selection: SelectorConfig = field(default_factory=SelectorConfig)
    batching: BatchConfig = field(default_factory=BatchConfig)
    traffic: TrafficConfig = field(default_factory=TrafficConfig)  # proactive prevention: defer traffic-raising plans, pace pushes
    selector_kind: str = "heuristic"  # which mode selector `selector` runs: heuristic | learned
    selector_model: str | None = None  # learned selector's JSON model file (None: the one shipped in star/policy/models)

    def __post_init__(self) -> None:
        if self.selector_kind not in SELECTOR_KINDS:
            raise ConfigError("control.selector_kind", self.selector_kind, f"one of {', '.join(SELECTOR_KINDS)}")
        if not self.lost_after_s > 0:
            raise ConfigError("control.lost_after_s", self.lost_after_s, "a number of seconds > 0")
        if not self.lost_after_steps >= 0:
            raise ConfigError("control.lost_after_steps", self.lost_after_steps, "a number of steps >= 0 (0: seconds only)")


SELECTOR_KINDS = ("heuristic", "learned")


def strategy_switches(strategy: str) -> dict[str, bool]:
    """The policy switches a named strategy turns on."""
    if strategy not in STRATEGIES:
        raise ValueError(f"mode={strategy!r} is not one of {', '.join(STRATEGIES)}")
    return {"amp": strategy in ("amp", "auto"), "selector": strategy == "auto", "batch": strategy in ("batch", "auto"),
            "exclude": strategy == "exclude"}


def for_strategy(config: ControlConfig, strategy: str) -> ControlConfig:
    """Fill the switches left unset (None) from the strategy."""
    switches = strategy_switches(strategy)
    return dataclasses.replace(config, **{k: v if getattr(config, k) is None else getattr(config, k) for k, v in switches.items()})


def with_task_staleness(config: ControlConfig, task_penalty: float | None) -> ControlConfig:
    """Fill an unset selection.staleness_penalty with the task's measured one (star.task_calibration)."""
    return dataclasses.replace(config, selection=with_task_penalty(config.selection, task_penalty))


def initial_mode(strategy: str) -> str:
    return strategy if strategy in FIXED_MODES else "ssgd"


@dataclass(frozen=True)
class ControlDecision:
    plan: SyncPlan | None
    amp: dict[int, bool]
    batch_sizes: dict[int, int]
    stragglers: frozenset[int]
    lost: frozenset[int]
    events: list[dict[str, Any]]


class Controller:
    def __init__(self, config: ControlConfig, num_workers: int, base_batch: int):
        self.config = config
        self.num_workers = num_workers
        self.base_batch = base_batch
        self.detector = StragglerDetector(config.detector)
        self.slow_links = SlowLinks(config.detector)  # workers whose link, not compute, holds rounds back: plans only
        self._excused: set[int] = set()  # outliers last kept out of the slow set for finishing early (logged once per spell)
        self._sized_on_estimate: set[int] = set()  # batch sized at an estimated speed: corrected at its next measurement
        self.amp = AmpPolicy(config.amp_policy)
        if config.selector_kind == "learned":
            self.selector: HeuristicSelector | LearnedSelector = LearnedSelector(
                config.selection, load_model(config.selector_model), config.detector)
        else:
            self.selector = HeuristicSelector(config.selection)
        self.exclusion = ExclusionPolicy(config.selection)
        self.traffic = TrafficGuard(config.traffic)
        self.batch_sizes = {w: base_batch for w in range(num_workers)}
        b = config.batching
        self.speeds = SpeedTracker(b.speed_alpha, b.speed_band, b.speed_confirm, b.speed_jump, b.speed_shared)  # what batch sizing acts on
        self.batch_guard = BatchGuard(b.guard)  # even batches while sizing loses to them
        self._settle_waits = 0  # decisions batch sizing has waited for the sizes last sent to be reported
        self._speeds_since_s: float | None = None  # when a speed batch sizing acts on last moved (BatchConfig.held_payback)
        self.lost: set[int] = set()
        self.judged: set[int] = set()  # workers that have had enough reports to be judged at least once
        self.base_plan: SyncPlan | None = None  # the first plan seen: what a rejoining worker goes back to
        self.priced_times = PricedTimes(config.decision_period_s)  # what a switch to a new plan is backed with

    def silence_limit_s(self, s: WorkerSummary) -> float:
        """lost_after_s, or lost_after_steps of its own recent steps where longer (a big model's step can exceed 20 s)."""
        if s.reports <= 0:
            return self.config.lost_after_s
        return max(self.config.lost_after_s, self.config.lost_after_steps * (s.per_sample_s * s.batch_size + s.comm_s))

    def decide(self, period: int, current: SyncPlan, workers: Mapping[int, WorkerSummary], b_noise: float = 0.0,
               layout: PsLayout | None = None, now_s: float | None = None) -> ControlDecision:
        """`layout`: the PS shards' hosts and their latest resource samples (None: unknown, no traffic policy).
        `now_s`: the decision's time (what a plan switch is backed with: star.policy.selector.PricedTimes)."""
        c = self.config
        events: list[dict[str, Any]] = []
        if self.base_plan is None:
            self.base_plan = current
        rejoined = {w for w in self.lost if w in workers and workers[w].silent_s <= self.silence_limit_s(workers[w])
                    and workers[w].reports >= c.min_reports}
        for w in sorted(rejoined):
            self.lost.discard(w)
            self.batch_sizes[w] = self.base_batch
            self.speeds.forget(w)
            events.append({"kind": "worker_rejoined", "worker": w, "reason": "reporting again"})
        newly_lost = {w for w, s in workers.items() if s.silent_s > self.silence_limit_s(s) and w not in self.lost}
        for w in sorted(newly_lost):
            self.lost.add(w)
            self.detector.forget(w)
            self.slow_links.forget(w)
            self.amp.forget(w)
            self.speeds.forget(w)
            events.append({"kind": "worker_lost", "worker": w, "silent_s": round(workers[w].silent_s, 2), "reason": f"no report for > {self.silence_limit_s(workers[w]):.1f} s"})
        active = {w: s for w, s in workers.items() if w not in self.lost and s.reports >= c.min_reports}
        if len(self.judged) < self.num_workers:
            self.judged.update(active)
        if not active or any(w not in self.judged for w in current.workers if w not in self.lost):
            # Some worker never judged (start, rejoin), or none judgeable now: only losses and rejoins until they can be
            plan = self._membership_plan(current, newly_lost, rejoined)
            plan = with_epoch(plan, current.epoch + 1) if plan is not None else None
            return ControlDecision(plan, {}, {}, frozenset(self.detector.stragglers), frozenset(self.lost), events)

        speedups, verifying = self.amp.speedups(), self.amp.verifying()
        # Not judged while AMP is verified on it: its time is neither plain nor normalisable (read as plain, it "recovered")
        normalised = {w: s.per_sample_s * speedups.get(w, 1.0) for w, s in active.items() if w not in verifying}
        early = finishes_early({w: s.per_sample_s * s.batch_size + s.fixed_compute_s for w, s in active.items()}, c.detector.margin)
        # On AMP and faster per sample than the median: let out, so AMP goes off and its plain speed shows (the probe)
        probe = (self.amp.probe_ready(period) & finishes_early({w: s.per_sample_s for w, s in active.items()},
                                                               c.detector.margin)) if c.amp else frozenset()
        detection = self.detector.decide(normalised, early, let_out=probe)
        median = statistics.median(normalised.values() or [0.0])  # the median the MAD rule judged against (star.detect.slow_now)
        for w in sorted(detection.excused - self._excused):
            reason = ("on AMP, it runs over the margin faster per sample than the median: counted as recovered, so "
                      "that AMP goes off and its plain speed shows" if w in probe else
                      "slow per sample, but its iteration ends early at its batch size: it holds nobody back")
            events.append({"kind": "straggler_excused", "worker": w, "per_sample_ms": round(normalised[w] * 1e3, 4),
                           "median_ms": round(median * 1e3, 4), "batch_size": active[w].batch_size, "reason": reason})
        self._excused = set(detection.excused)
        for w in sorted(detection.entered):
            events.append({"kind": "straggler_detected", "worker": w, "per_sample_ms": round(normalised[w] * 1e3, 4),
                           "median_ms": round(median * 1e3, 4), "rule": c.detector.rule})
        for w in sorted(detection.exited):
            events.append({"kind": "straggler_recovered", "worker": w, "per_sample_ms": round(normalised[w] * 1e3, 4),
                           "median_ms": round(median * 1e3, 4)})

        # A worker re-measuring after an AMP switch keeps its batch and AMP setting; the others do not wait for it
        held = {w for w in current.workers if w not in self.lost and w not in active} if c.batch else set()
        correcting = frozenset(self._sized_on_estimate & set(active))  # measured since: corrected now
        self._sized_on_estimate -= correcting
        per_sample = {w: s.sizing_per_sample_s for w, s in active.items()} if c.batch else {}  # per sample from now on
        steady = {w: s.per_sample_s for w, s in active.items()} if c.batch else {}  # the same over more reports
        amp: dict[int, bool] = {}
        estimated_now: set[int] = set()  # AMP off as recovered in this decision: sized (below) at an estimated speed
        if c.amp:
            on_before = {w: self.amp.enabled(w) for w in self.amp.workers}  # the others were never on
            if c.batch:
                self._skip_redundant_amp(detection.stragglers, active, per_sample, held, events)
            for d in self.amp.decide(period, detection.stragglers, {w: s.per_sample_s for w, s in active.items()},
                                     {w: s.amp_reports for w, s in active.items()},
                                     {w: s.sizing_per_sample_s for w, s in active.items()},
                                     {w: s.sizing_rel_error for w, s in active.items()}):
                if c.batch and d.amp and on_before.get(d.worker, False):  # just verified: is it worth keeping?
                    d = self._keep_amp_under_batch(d, active, per_sample, held)
                amp[d.worker] = d.amp
                self.speeds.forget(d.worker)  # a known change of speed: the next measurement is taken as is
                events.append({"kind": "amp", "worker": d.worker, "amp": d.amp, "reason": d.reason})
                if c.batch and not d.amp:
                    for speeds in (per_sample, steady):  # off again: back to its speed without AMP
                        speeds[d.worker] *= speedups.get(d.worker, d.speedup)
                    if d.recovered:  # estimated with a speed-up measured while slow, which need not hold now (the probe)
                        estimated_now.add(d.worker)

        # A straggler AMP was just switched on for is resized now at its speed without AMP (auto must not lag batch
        # sizing alone by the verification's reports); its size is then held until verified.
        batch: dict[int, int] = {}
        if c.batch and len(active) - len(held & set(active)) >= 2:
            guarded = self._guard_batches(period, current, active, events)
            if guarded is not None:
                batch = guarded
                self._sized_on_estimate |= correcting  # corrected once batch sizing resumes
            else:
                batch = self._batch_sizes({w: s for w, s in active.items() if w not in held}, per_sample,
                                          {w: self.batch_sizes.get(w, self.base_batch) for w in held}, events, steady,
                                          correcting, frozenset(amp), now_s)
                self._sized_on_estimate |= estimated_now & set(batch)  # one set earlier stays due while its worker is held

        plan = self._plan(period, current, active, detection.stragglers, b_noise, events, self.amp.verifying(), now_s)
        if plan is not None:  # a new mode keeps how gradients travel: pacing and trees are the traffic guard's
            plan = with_tree(with_pace(plan, current.push_pace_bytes_per_s), current.tree_fanout)
        if layout is not None and layout.hosts:
            plan = self._mind_traffic(current, plan, active, b_noise, layout, events)
        if plan is None or not set(plan.workers) >= rejoined:
            plan = self._membership_plan(current, newly_lost, rejoined) or plan
        if plan is not None:
            plan = with_epoch(without_workers(plan, frozenset(self.lost)), current.epoch + 1)
        return ControlDecision(plan, amp, batch, detection.stragglers, frozenset(self.lost), events)

    def _mind_traffic(self, current: SyncPlan, plan: SyncPlan | None, active: Mapping[int, WorkerSummary], b_noise: float,
                      layout: PsLayout, events: list[dict[str, Any]]) -> SyncPlan | None:
        """Defer a proposed plan that would saturate a PS host; pace pushes when a PS NIC nears saturation."""
        in_force = without_workers(current, frozenset(self.lost))
        iter_time_s = {w: s.comm_s + s.per_sample_s * self.batch_sizes.get(w, s.batch_size) for w, s in active.items()}
        batch = {w: self.batch_sizes.get(w, s.batch_size) for w, s in active.items()}
        if any(w not in iter_time_s for w in in_force.workers):
            return plan
        penalty = self.config.selection.penalty
        unpaced_now = estimate(in_force, iter_time_s, batch, b_noise, penalty).gradients_per_s
        pace_now = current.push_pace_bytes_per_s
        paced_limit = pace_now * len(in_force.workers) / layout.total_bytes if pace_now and layout.total_bytes else float("inf")
        rate_now = min(unpaced_now, paced_limit)
        if plan is not None:
            proposed = estimate(plan, iter_time_s, batch, b_noise, penalty).gradients_per_s
            verdict = self.traffic.check(rate_now, min(proposed, paced_limit), layout)
            if not verdict.allow:
                events.append({"kind": "plan_deferred", "mode": plan.label, "reason": verdict.reason,
                               "predicted_util": {h: round(u, 3) for h, u in verdict.predicted_util.items()}})
                plan = None
        relief = self.traffic.relieve(pace_now, current.tree_fanout, layout, len(in_force.workers))
        if (relief.push_pace_bytes_per_s, relief.tree_fanout) != (pace_now, current.tree_fanout):
            pace = relief.push_pace_bytes_per_s
            events.append({"kind": "pace" if pace != pace_now else "tree", "push_pace_bytes_per_s": None if pace is None else round(pace),
                           "tree_fanout": relief.tree_fanout, "reason": relief.reason})
            return with_tree(with_pace(plan or current, pace), relief.tree_fanout)
        return plan

    def _membership_plan(self, current: SyncPlan, newly_lost: set[int], rejoined: set[int]) -> SyncPlan | None:
        """The plan after workers left or came back: lost ones leave the current plan; a rejoining one brings back the first."""
        gone = frozenset(self.lost)
        if rejoined and self.base_plan is not None:
            return without_workers(self.base_plan, gone)
        if newly_lost:
            return without_workers(current, gone)
        return None

    def _sizer(self, workers: list[int], held: Mapping[int, int], comm_s: Mapping[int, float]) -> tuple[Sizes, int]:
        """The batch solver over `workers` for the global batch left after the `held` workers' sizes."""
        c = self.config.batching
        global_batch = self.base_batch * (len(workers) + len(held)) - sum(held.values())

        def sizes_for(per_sample_s: Mapping[int, float], fixed_s: Mapping[int, float] | None = None) -> dict[int, int]:
            return solve_batch_sizes({w: per_sample_s[w] for w in workers}, global_batch, fixed_s=comm_s if fixed_s is None else fixed_s,
                                     min_batch=c.min_batch, max_batch=max(c.min_batch, int(self.base_batch * c.max_factor)))
        return sizes_for, global_batch

    def _guard_batches(self, period: int, current: SyncPlan, active: Mapping[int, WorkerSummary],
                       events: list[dict[str, Any]]) -> dict[int, int] | None:
        """None: batch sizing decides; else what it gives way to (star.policy.batch_guard): even batches
        when it backs off now, no change while backed off."""
        verdict = self.batch_guard.observe(period, {w: s.per_sample_s for w, s in active.items()},
                                           {w: s.batch_size for w, s in active.items()},
                                           {w: s.comm_s for w, s in active.items()}, self.base_batch)
        if verdict is not None:
            even = {w: self.base_batch for w in current.workers if w not in self.lost}
            self.batch_sizes.update(even)
            events.append({"kind": "batch_backoff", "sizes": {str(w): b for w, b in even.items()},
                           "sized_s": round(verdict.sized_s, 4), "even_s": round(verdict.even_s, 4),
                           "hold_periods": verdict.hold_periods,
                           "reason": verdict.explain(self.config.batching.guard.window)})
            return even
        return {} if self.batch_guard.holding(period) else None

    def _batch_sizes(self, active: Mapping[int, WorkerSummary], per_sample_s: Mapping[int, float], held: Mapping[int, int],
                     events: list[dict[str, Any]], steady_s: Mapping[int, float] | None = None,
                     correcting: frozenset[int] = frozenset(), amp_switched: frozenset[int] = frozenset(),
                     now_s: float | None = None) -> dict[int, int]:
        """Split the global batch left after the `held` workers' sizes over the `active` ones by speed: their
        smoothed reference speeds (star.policy.speeds), and only for a gain that repays the change.
        `steady_s`: the speeds over more reports, which a worker's first reference starts from. `correcting`: workers
        sized at an estimated speed, now measured: any resolved gain corrects them (no minimum; on noise, they churned).
        `amp_switched`: workers whose AMP this decision switched (a known factor): the sizes in force not waited for."""
        c = self.config.batching
        workers = sorted(active)
        for w in correcting:  # its reference is the estimate: the measurement replaces it, unconfirmed
            self.speeds.forget(w)
        unsettled = [w for w in workers if active[w].batch_size != self.batch_sizes.get(w, self.base_batch)]
        # A large slowdown of a worker already at its new size is not the sizes' doing: not waited for
        jumped = self.speeds.jumped({w: per_sample_s[w] for w in workers if w not in unsettled}) if unsettled else []
        switched = sorted(amp_switched & set(workers))
        if unsettled and not correcting and not jumped and not switched and self._settle_waits < c.settle_max_periods:
            # The sizes last sent are not measured yet: speeds taken under the old sizes would judge them
            # (and on shared cores a worker's speed depends on its host mates' batches). Not for an AMP switch: a
            # straggler given a big batch for its AMP speed, AMP now off, would hold every round back meanwhile
            # (simulated, a 1.65x static straggler on AMP sized 80 of 256, AMP off as recovered: rounds of 0.6 s
            # against 0.3 s for 2.4 s, until the sizes in force were measured).
            self._settle_waits += 1
            return {}
        self._settle_waits = 0
        leaps = set(self.speeds.jumped_again({w: per_sample_s[w] for w in workers}))  # before observe() follows them
        moved = self.speeds.observe({w: per_sample_s[w] for w in workers}, first=steady_s)
        per_sample = self.speeds.reference(workers)
        fixed = {w: active[w].comm_s for w in workers}
        sizes_for, global_batch = self._sizer(workers, held, fixed)
        try:
            proposed = sizes_for(per_sample)
        except BatchPlanError as exc:
            events.append({"kind": "batch_skipped", "reason": str(exc)})
            return {}
        current = {w: self.batch_sizes.get(w, self.base_batch) for w in workers}
        if moved or self._speeds_since_s is None or now_s is None:
            self._speeds_since_s = now_s
        held_iters = (now_s - self._speeds_since_s) / max(makespan_s(current, per_sample, fixed), 1e-9) if now_s is not None else 0.0
        gain, required = predicted_gain(current, proposed, per_sample, fixed), 0.0 if correcting else c.required_gain(held_iters)
        # Judged on the differences the measurements resolve: noise alone would pass the minimum gain
        # A step confirmed by a second jump in a row is resolved by that rule: its window's spread is the step, not
        # noise (right after a step, reports from both sides of it look like a 50-80% spread and would hide it).
        # Not a single jump: at 1,000 simulated workers, exempting those let noise drive resizes (transient 4-16% slower).
        z = noise_z_for(len(workers), c.noise_z)  # among many workers, the slowest fluke is far out
        resolved = resolvable_speeds(per_sample, {w: 0.0 if w in leaps else active[w].sizing_rel_error for w in workers}, z)
        resolved_gain = predicted_gain(current, proposed, resolved, fixed)
        if proposed == current or gain < required or resolved_gain < required or (correcting and resolved_gain <= 0):
            return {} if held else self._back_to_even(current, per_sample, fixed, events)
        self.batch_sizes.update(proposed)
        not_waited = ([f"worker(s) {jumped} slowed by more than {c.speed_jump:.0%} at theirs"] if jumped else []) \
            + ([f"AMP switched for worker(s) {switched}"] if switched else [])
        events.append({"kind": "batch_sizes", "sizes": {str(w): b for w, b in proposed.items()},
                       "per_sample_ms": {str(w): round(per_sample[w] * 1e3, 4) for w in workers},
                       "speeds_moved": {str(m.worker): [None if m.old_s is None else round(m.old_s * 1e3, 4),
                                                        round(m.new_s * 1e3, 4)] for m in moved},
                       **({"unsettled": unsettled, "jumped": jumped} if jumped else {}),
                       "predicted_gain": round(gain, 3), "resolved_gain": round(resolved_gain, 3),
                       "required_gain": round(required, 3),
                       "reason": f"balance iteration times under a global batch of {global_batch}: predicted "
                                 + (f"{gain:.1%} faster iterations; corrects sizes set at an estimated speed (AMP off "
                                    f"after a recovery) for worker(s) {sorted(correcting)}" if correcting else
                                    f"{gain:.1%} faster iterations ({resolved_gain:.1%} on the speed differences beyond "
                                    f"{z:.2g} standard error(s) of their measurement) >= {required:.0%} (min gain, "
                                    "or a change's cost repaid)")
                                 + (f"; not waiting for worker(s) {unsettled} to report at their new sizes: "
                                    + "; ".join(not_waited) if unsettled and not_waited else "")})
        return proposed

    def _back_to_even(self, current: dict[int, int], per_sample: Mapping[int, float], fixed: Mapping[int, float],
                      events: list[dict[str, Any]]) -> dict[int, int]:  # where the sizes in force no longer pay (batch.py)
        keep = self.config.batching.even_keep_gain
        back = None if keep is None else back_to_even(current, per_sample, fixed, self.base_batch, keep)
        if back is not None:
            self.batch_sizes.update(back.sizes)
            events.append(back.event(keep))
        return {} if back is None else back.sizes

    def _amp_added_gain(self, targets: list[int], plain_s: Mapping[int, float], active: Mapping[int, WorkerSummary],
                        held: set[int], speedup: float):
        """What AMP at `speedup` on each of `targets` adds to batch sizing alone (None: cannot be judged now)."""
        workers = sorted(w for w in active if w not in held)
        if not set(targets) <= set(workers) or not targets or len(workers) < 2:
            return None
        sizes_for, _ = self._sizer(workers, {w: self.batch_sizes.get(w, self.base_batch) for w in held},
                                   {w: active[w].comm_s for w in workers})
        try:
            return amp_gain_under_batch({w: plain_s[w] for w in workers}, {w: active[w].comm_s for w in workers},
                                        targets, speedup, sizes_for, {w: active[w].fixed_compute_s for w in workers})
        except BatchPlanError:
            return None

    def _skip_redundant_amp(self, stragglers: frozenset[int], active: Mapping[int, WorkerSummary],
                            per_sample: Mapping[int, float], held: set[int], events: list[dict[str, Any]]) -> None:
        """Do not try AMP on untried stragglers that batch sizes alone balance about as well as even a best-case AMP on all
        of them would (the assumed or best measured speed-up). Judged together (star.policy.combine); those left off are
        judged again with each straggler detected after them, and tried if still `unbalanced` at their size in force."""
        best, group = self.amp.expected_speedup(), self.amp.untried(stragglers & (active.keys() - held))
        added = self._amp_added_gain(group, per_sample, active, held, best)
        if added is None:
            return
        if added.gain >= self.config.amp_policy.min_added_gain:
            for w in self.amp.reconsider(group):
                events.append({"kind": "amp_reconsidered", "worker": w, "reason": (
                    f"AMP on workers {group} together would cut the predicted iteration {added.batch_alone_s * 1e3:.1f} -> "
                    f"{added.with_amp_s * 1e3:.1f} ms ({added.gain:.1%} >= {self.config.amp_policy.min_added_gain:.0%}) "
                    "beyond batch sizes alone: AMP may be tried")})
            return
        in_force = {w: (active[w].comm_s, per_sample[w] * self.batch_sizes.get(w, self.base_batch))
                    for w in group if self.amp.skipped(w)}
        for w in self.amp.reconsider(unbalanced(in_force, added.batch_alone_s, best, self.config.amp_policy.min_added_gain)):
            group.remove(w)  # left off for batch sizes to balance, which they have not done yet: AMP may be tried
            events.append({"kind": "amp_reconsidered", "worker": w, "reason": (
                f"left off for batch sizes to balance, but at its size in force its iteration takes "
                f"{sum(in_force[w]) * 1e3:.1f} ms against the balanced {added.batch_alone_s * 1e3:.1f}")})
        reason = added.explain(group, best, self.config.amp_policy.min_added_gain, measured=False)
        for w in self.amp.skip(group):
            events.append({"kind": "amp_skipped", "worker": w, "amp": False,
                           "reason": reason + (" (the best speed-up AMP measured on this job)" if self.amp.measured else "")})

    def _keep_amp_under_batch(self, d: AmpDecision, active: Mapping[int, WorkerSummary], per_sample: Mapping[int, float],
                              held: set[int]) -> AmpDecision:
        """A verified AMP switch stays unless it adds less than keep_added_gain to batch sizes alone (measured speed-up):
        lower than the bar for trying it, as the verification is paid, and undoing it holds the batch for another."""
        speedup = self.amp.speedup(d.worker)
        plain = {**per_sample, d.worker: per_sample[d.worker] * speedup}
        added = self._amp_added_gain([d.worker], plain, active, held, speedup)
        if added is None or added.gain >= self.config.amp_policy.keep_added_gain:
            return d
        self.amp.mark_redundant(d.worker)
        return AmpDecision(d.worker, False, added.explain([d.worker], speedup, self.config.amp_policy.keep_added_gain, measured=True),
                           speedup)

    def _speeds_acted_on(self, active: Mapping[int, WorkerSummary]) -> dict[int, float]:
        """Per-sample times plans are compared with: under batch sizing, the reference speeds the sizes were solved
        for (a change they have not followed yet must not send the job to a plan it leaves once they catch up)."""
        raw = {w: s.per_sample_s for w, s in active.items()}
        if not self.config.batch:
            return raw
        return {**raw, **self.speeds.reference([w for w in raw if w in self.speeds.tracks])}

    def _plan_inputs(self, active: Mapping[int, WorkerSummary], period: int) -> tuple[dict[int, float], dict[int, int]]:
        """What plans are priced with. Under batch sizing, the sizes it would give every worker at these speeds: staying
        on the plan in force lets it rebalance, so that is the price to beat (not the sizes in force while it waits)."""
        per_sample = self._speeds_acted_on(active)
        batch = {w: self.batch_sizes.get(w, s.batch_size) for w, s in active.items()}
        if self.config.batch and not self.batch_guard.holding(period):
            with contextlib.suppress(BatchPlanError):  # none fits: the sizes in force
                batch = self._sizer(sorted(active), {}, {w: s.comm_s for w, s in active.items()})[0](per_sample)
        return {w: s.comm_s + per_sample[w] * batch[w] for w, s in active.items()}, batch

    def _plan(self, period: int, current: SyncPlan, active: Mapping[int, WorkerSummary], stragglers: frozenset[int],
              b_noise: float, events: list[dict[str, Any]], verifying: frozenset[int] = frozenset(),
              now_s: float | None = None) -> SyncPlan | None:
        if not (self.config.exclude or self.config.selector):
            return None
        workers = tuple(w for w in range(self.num_workers) if w not in self.lost)
        times, batch = self._plan_inputs(active, period)
        slow_links, link_events = self.slow_links.decide({w: s.link_s for w, s in active.items()}, times)
        events += link_events
        stragglers |= slow_links  # held back by their links: plans that do not wait for them are weighed too
        if self.config.exclude:
            plan, reason = self.exclusion.decide(period, without_workers(current, frozenset(self.lost)), times, batch,
                                                 stragglers & set(workers), b_noise)
            if plan is not None:
                events.append({"kind": "plan_decision", "mode": plan.label, "stragglers": sorted(stragglers), "reason": reason})
            return plan
        previous = self.priced_times.record(times, now_s)  # a plan shaped by the slow set must win at these too
        if verifying & set(workers):
            return None  # a worker's speed is about to change (AMP being verified): plans compared now would be stale
        if not stragglers and self.base_plan is not None and same_shape(current, self.base_plan):
            return None  # the base plan is left only for a detected straggler, not for one period's slow reports
        args = (period, without_workers(current, frozenset(self.lost)), times, batch, stragglers, b_noise)
        if isinstance(self.selector, LearnedSelector):
            decision = self.selector.decide(*args, comm_s={w: s.comm_s for w, s in active.items()}, previous_iter_time_s=previous)
        else:
            decision = self.selector.decide(*args, previous_iter_time_s=previous)
        if decision.plan is not None:
            events.append({"kind": "plan_decision", "mode": decision.plan.label, "reason": decision.reason,
                           "b_noise": round(b_noise, 2),
                           "estimates": {e.plan.describe(): round(e.seconds_per_progress, 5) for e in decision.estimates}})
        return decision.plan
