"""Discrete-event simulation of a STAR job, driven by the real `Controller`.

Time advances in decision periods. Within a period the plan, AMP switches and batch
sizes are fixed, and the groups of the plan do not wait for each other, so each group
is advanced on its own, one round (one event) at a time, vectorised over its members:

- a synchronous group (quorum = size) closes a round at its slowest member's arrival;
- a k-of-N group closes at the quorum-th on-time arrival; a worker whose round already
  closed pushes late (applied alone, or dropped) and pulls again at once;
- singleton groups (ASGD, excluded stragglers) advance all together, one iteration per
  step; with an SSP bound they run one event at a time (exact, meant for small N).

These are the rules of `star.aggregate.Aggregator`, vectorised: the Aggregator applies
one push at a time, too slow for 1,000 workers. `tests/unit/test_sim_aggregation.py`
fuzzes this loop against the Aggregator itself (hypothesis: plans, 2-12 workers,
changing traces, PS update time, plan switches): the same gradients must be applied at
the same moments. Every update is logged with its gradients' pull times; at the end of a period
the log is sorted and each gradient's staleness = updates applied between its pull and
its apply, which the convergence model turns into progress. Then the coordinator's
control loop steps (`star.control_loop.ControlLoop.step`, as in the daemon): reports ->
WorkerSummary -> `Controller.decide` -> AMP / batch directives (they apply from each
worker's next iteration) and plan switches (open rounds are applied, gradients in
flight are refused and their workers pull again, as a real PS and worker do). The loop
gets the PS's B_noise estimate (`star.sim.noise_draws`) and, with `ps_hosts`, the PS
hosts' NICs (`star.sim.ps_hosts`): shard moves, pacing and saturation change transfers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from star.plan import LatePolicy, SyncPlan
from star.control_loop import ControlLoop, Reports
from star.policy.batch import directed_from_iteration
from star.policy.controller import for_strategy, with_task_staleness
from star.sim.config import SimConfig
from star.sim.convergence import ConvergenceModel
from star.sim.cost import CostModel
from star.sim.noise_draws import NoiseDraws
from star.sim.pending_batches import PendingBatches
from star.sim.ps_hosts import PsHosts, coordinator_view, paced
from star.sim.replay import FactorTable
from star.sim.update_log import ApplyHistory, UpdateLog
from star.report_book import ReportBook
from star.traces import Trace, load_trace

WATCH_CHECKS = 10  # times per decision period the simulator looks for a report over the slowdown watch
# (the daemon looks at every report; with iterations of 0.1-1 s, a tenth of a 1 s period is as soon)


@dataclass
class SimResult:
    result: dict[str, Any]
    curve: list[tuple[float, int, float]]  # (time_s since the first update, version, metric)
    events: list[dict[str, Any]] = field(default_factory=list)


class Simulation:
    def __init__(self, config: SimConfig, trace: Trace | None = None):
        self.config = c = config
        n = c.workers
        if trace is None and c.trace.path:
            trace = load_trace(c.trace.path)
        self.rng = np.random.default_rng(c.seed)
        self.cost = CostModel(c.cost, FactorTable(trace, n, c.trace.workers, c.trace.stretch), self.rng, n)
        self.conv = ConvergenceModel(c.convergence, n, c.cost.base_batch)
        # The selector weighs stale updates as the task's calibration measured them (as star launch does)
        self.control = with_task_staleness(for_strategy(c.control, c.plan.mode), c.convergence.staleness_penalty)
        self.loop = ControlLoop(self.control, n, c.cost.base_batch, c.placement)
        self.controller = self.loop.controller
        self.noise = NoiseDraws(c.convergence.b_noise, c.convergence.noise_norm_dof, c.seed)
        self.ps_hosts = PsHosts(c.ps_hosts, c.placement, c.cost, n) if c.ps_hosts.shards else None
        self.book = ReportBook(n)
        self.fixed_s = self.cost.fixed_s()
        self.push_s = self.cost.transfer_s  # seconds of a push as workers report it (ps_hosts: as transfers now take)
        self.ps_s = c.cost.ps_update_s
        self.amp_worth = c.convergence.amp_update_worth
        # Per-worker state of the computation in progress.
        self.arrive = np.zeros(n)  # when its gradient reaches the PS (inf: blocked by SSP)
        self.start = np.zeros(n)  # when it pulled (started)
        self.rnd = np.zeros(n, dtype=np.int64)  # round of its group it computes for
        self.iters = np.zeros(n, dtype=np.int64)  # iterations finished (pushed)
        self.reported = np.ones(n, dtype=bool)
        self.stale = np.zeros(n, dtype=bool)  # started under an older plan: its push will be refused
        self.cur_compute = np.zeros(n)
        self.cur_amp = np.zeros(n, dtype=bool)
        self.cur_batch = np.zeros(n, dtype=np.int64)  # samples of the computation in progress
        self.cur_weight = np.zeros(n, dtype=np.int64)  # the share of the round its gradient is weighted as (its placement)
        self.amp = np.zeros(n, dtype=bool)  # directives in force
        self.batch = np.full(n, c.cost.base_batch, dtype=np.int64)  # samples each next iteration computes
        self.placed = np.full(n, c.cost.base_batch, dtype=np.int64)  # the size of each one's place in the round (> batch: a cut)
        self.pending = PendingBatches()  # directed sizes not in force yet, queued as the workers queue them
        self.batch_from = np.zeros(n, dtype=np.int64)  # the iteration each worker's newest directive starts at
        self.clock = np.zeros(n, dtype=np.int64)  # SSP: pushes under the plan in force
        self.pulled = np.zeros(n)  # when the PS took the pull of the computation in progress (its plan: the one then)
        self.pull_at = np.full(n, np.inf)  # SSP: when a worker whose push was applied pulls again (inf: not pulling)
        self.counters = {"dropped_late": 0, "refused": 0, "late_applied": 0}
        self.events: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}
        self.history = ApplyHistory()
        self.progress = 0.0
        self.first_update_s: float | None = None
        self.curve: list[tuple[float, int, float]] = []
        self.tta_s: float | None = None
        self.tta_updates: int | None = None
        self.next_eval_k = 0
        self.controller_s = 0.0
        self.set_plan(c.plan.build(n, epoch=1))
        self._start_iteration(np.arange(n), np.zeros(n))

    # ---- plan -------------------------------------------------------------------
    def set_plan(self, plan: SyncPlan) -> None:
        self.plan = plan
        self.sync_groups: list[tuple[np.ndarray, int]] = []
        singles = []
        for group, quorum in zip(plan.groups, plan.quorum):
            if len(group) == 1:
                singles.append(group[0])
            else:
                self.sync_groups.append((np.asarray(group, dtype=np.int64), quorum))
        self.round = [0] * len(self.sync_groups)
        in_plan = np.zeros(self.config.workers, dtype=bool)
        in_plan[list(plan.workers)] = True
        self.singles = np.asarray(sorted(singles), dtype=np.int64)
        self.outsiders = np.flatnonzero(~in_plan)  # lost workers: their pushes are refused
        self.rnd[:] = 0
        self.clock[:] = 0
        self.pull_at[:] = np.inf  # a pull still pending was restarted by the switch (it counts as blocked)

    def _switch(self, plan: SyncPlan, now: float, log: UpdateLog) -> None:
        """A new epoch: apply the open rounds, refuse gradients in flight, restart SSP clocks."""
        for g, (members, _) in enumerate(self.sync_groups):
            arrived = members[(self.rnd[members] == self.round[g]) & (self.arrive[members] <= now) & ~self.stale[members]]
            if len(arrived):
                log.one(now + self.ps_s, self._samples(arrived).sum(), self.start[arrived])
                self.noise.round(self.cur_batch, arrived)  # the PS's B_noise estimate sees it
                self._start_iteration(arrived, np.full(len(arrived), now + self.ps_s))
        blocked = np.flatnonzero(np.isinf(self.arrive))  # by SSP, or (pull_at) waiting for their push's apply
        if len(blocked):
            pending = self.pull_at[blocked]
            self._start_iteration(blocked, np.where(np.isfinite(pending), np.maximum(now, pending), now))
        self.stale |= (self.arrive > now) & (self.pulled < now)  # pulled under the old plan; a pull at or after `now` is under the new one
        self.set_plan(plan)

    # ---- per-worker steps -------------------------------------------------------
    def _start_iteration(self, workers: np.ndarray, t0: np.ndarray, pulled: np.ndarray | None = None,
                         restart: bool = False) -> None:
        """Each worker starts computing at t0. `pulled`: when the PS took its pull (default t0); a pull
        released by a round's close is taken at the close, and answered once the update is applied.
        `restart`: the iterations they started at t0 restart there at a cut batch (CostModel.restart)."""
        self.pulled[workers] = t0 if pulled is None else pulled
        self.pending.take_due(workers, self.iters[workers], self.batch, self.placed)
        amp, batch = self.amp[workers], self.batch[workers]
        iterations = self.iters[workers]
        compute = (self.cost.restart(workers, iterations, amp, batch) if restart
                   else self.cost.start(workers, t0, iterations, amp, batch))
        self.cur_compute[workers] = compute
        self.cur_amp[workers] = amp
        self.cur_batch[workers] = batch
        self.cur_weight[workers] = self.placed[workers]
        self.start[workers] = t0
        arrive, pace = t0 + self.fixed_s + compute, self.plan.push_pace_bytes_per_s  # pace: the traffic guard's (ps_hosts)
        self.arrive[workers] = paced(arrive, self.arrive[workers], self.config.cost.model_bytes / pace) if pace else arrive
        self.reported[workers] = False

    def _released_at(self, members: np.ndarray, close: float, t: float) -> np.ndarray:
        """When the PS took the pulls of a round's members: the one whose push closed the round pulls
        after its push returns (t, the update applied); the others' pulls were waiting and are taken
        at the close."""
        return np.where(self.arrive[members] >= close, t, close)

    def _samples(self, workers: np.ndarray) -> np.ndarray:
        """Samples each worker's gradient is worth to the convergence model: the size of its place in the round (its
        batch, or the batch a cut at once replaced: the worker weights it so), x amp_update_worth under AMP. (With
        b_noise > 0 a cut round's noise term then reads the place too, a little kind to it; the calibrations have 0.)"""
        batch = self.cur_weight[workers].astype(float)
        return np.where(self.cur_amp[workers], batch * self.amp_worth, batch) if self.amp_worth != 1 else batch

    def _finish(self, workers: np.ndarray) -> None:
        """The push (and the report that follows it) of each worker's computation."""
        workers = workers[~self.reported[workers]]
        if len(workers) == 0:
            return
        self.iters[workers] += 1
        self.book.record(workers, self.arrive[workers], self.cur_compute[workers], self.push_s,
                         self.cur_batch[workers], self.cur_amp[workers], self.cost.reported_fixed_samples)
        self.reported[workers] = True

    def _resolve_refused(self, members: np.ndarray, end: float, rnd: int = 0) -> None:
        """Workers whose push is refused (old epoch, or not in the plan) pull again at once."""
        refused = members[self.stale[members] & (self.arrive[members] < end)]
        if len(refused):
            self._finish(refused)
            self.counters["refused"] += len(refused)
            self.stale[refused] = False
            self.rnd[refused] = rnd
            self._start_iteration(refused, self.arrive[refused].copy())

    # ---- groups -----------------------------------------------------------------
    def _close_round(self, g: int, winners: np.ndarray, close: float, log: UpdateLog) -> None:
        """Group g's round closes at `close` on `winners`' gradients: one update, applied `ps_s` later,
        and the winners pull the new version and start their next iteration."""
        self._finish(winners)
        t = close + self.ps_s
        log.one(t, self._samples(winners).sum(), self.start[winners])
        self.noise.round(self.cur_batch, winners)  # the PS's B_noise estimate sees it
        self.round[g] += 1
        self.rnd[winners] = self.round[g]
        self._start_iteration(winners, np.full(len(winners), t), self._released_at(winners, close, t))

    def _run_sync(self, g: int, members: np.ndarray, end: float, log: UpdateLog) -> None:
        while True:
            self._resolve_refused(members, end, self.round[g])
            close = self.arrive[members].max()
            if close >= end:
                self._finish(members[self.arrive[members] < end])
                return
            self._close_round(g, members, close, log)

    def _run_kofn(self, g: int, members: np.ndarray, quorum: int, end: float, log: UpdateLog) -> None:
        late_apply = self.plan.late_policy is LatePolicy.APPLY
        while True:
            r = self.round[g]
            self._resolve_refused(members, end, r)
            while True:
                arrive = self.arrive[members]
                on = self.rnd[members] == r
                on_arrivals = arrive[on]
                close = np.partition(on_arrivals, quorum - 1)[quorum - 1] if len(on_arrivals) >= quorum else np.inf
                late = members[~on & (arrive < min(close, end)) & ~self.stale[members]]
                if len(late) == 0:
                    break
                self._finish(late)
                if late_apply:
                    log.many(self.arrive[late] + self.ps_s, self._samples(late), self.start[late])
                    self.counters["late_applied"] += len(late)
                else:
                    self.counters["dropped_late"] += len(late)
                self.rnd[late] = r
                self._start_iteration(late, self.arrive[late] + (self.ps_s if late_apply else 0.0))
            if close >= end:
                self._finish(members[on & (arrive < end)])
                return
            candidates = members[on]
            winners = candidates[np.argsort(on_arrivals, kind="stable")[:quorum]]
            # Late workers are restarted in bulk against an estimate of the close; one that pulled again
            # at or after the actual close computes for the next round, as the Aggregator counts it.
            pulled_after_close = candidates[self.start[candidates] >= close]
            self._close_round(g, winners, close, log)
            self.rnd[pulled_after_close] = self.round[g]

    def _run_singles(self, members: np.ndarray, end: float, log: UpdateLog, apply: bool = True) -> None:
        if self.plan.staleness_bound is not None and apply:
            self._run_ssp(members, end, log)
            return
        while len(members):
            self._resolve_refused(members, end)
            due = members[self.arrive[members] < end]
            if len(due) == 0:
                return
            self._finish(due)
            t = self.arrive[due] + self.ps_s
            if apply:
                log.many(t, self._samples(due), self.start[due])
            else:
                self.counters["refused"] += len(due)
            self._start_iteration(due, t)
            members = due

    def _run_ssp(self, members: np.ndarray, end: float, log: UpdateLog) -> None:
        """One event at a time, pushes and pulls in time order. A worker pulls once its push's update
        is applied (ps_update_s after the push arrived), and that pull blocks while the worker is
        > bound pushes ahead of the slowest: the Aggregator's rule, judged when the pull is made."""
        bound = self.plan.staleness_bound
        self._resolve_refused(members, end)
        while True:
            i = members[np.argmin(self.arrive[members])]
            p = members[np.argmin(self.pull_at[members])]
            if self.pull_at[p] < self.arrive[i]:
                t = self.pull_at[p]
                if t >= end:
                    return
                self.pull_at[p] = np.inf
                if self.clock[p] - self.clock[members].min() <= bound:
                    self._start_iteration(np.array([p]), np.array([t]))
                continue  # else blocked (arrive and pull_at both inf) until the slowest catches up
            a = self.arrive[i]
            if a >= end:
                return
            if self.stale[i]:
                self._resolve_refused(np.array([i]), end)
                continue
            one = np.array([i])
            self._finish(one)
            t = a + self.ps_s
            log.many(np.array([t]), self._samples(one), self.start[one])
            slowest = self.clock[members].min()
            self.clock[i] += 1
            self.arrive[i] = np.inf
            self.pull_at[i] = t
            new_slowest = self.clock[members].min()
            if new_slowest > slowest:
                blocked = members[np.isinf(self.arrive[members]) & np.isinf(self.pull_at[members])
                                  & (self.clock[members] - new_slowest <= bound)]
                if len(blocked):
                    self._start_iteration(blocked, np.full(len(blocked), t), np.full(len(blocked), a))

    # ---- accounting -------------------------------------------------------------
    def _account(self, log: UpdateLog, end: float) -> None:
        """Staleness and progress of this period's updates; evaluation points; TTA."""
        if log.count:
            times = np.concatenate(log.times)
            order = np.argsort(times, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            v0 = self.history.size
            self.history.extend(times[order])
            owner = np.concatenate(log.owner)
            at_pull = self.history.version_at(np.concatenate(log.starts))
            stale = np.maximum(0, v0 + rank[owner] - at_pull)
            weight = np.concatenate(log.weight)
            mean_stale = np.bincount(rank[owner], weights=weight * stale, minlength=len(order)) / np.bincount(
                rank[owner], weights=weight, minlength=len(order))
            batch = np.concatenate(log.batch)[order]
            cum = self.progress + np.cumsum(self.conv.progress(batch, mean_stale))
            sorted_times = times[order]
            if self.first_update_s is None:
                self.first_update_s = float(sorted_times[0])
        else:
            cum = np.array([self.progress])
            sorted_times = np.array([-np.inf])
            v0 = self.history.size
        if self.first_update_s is None:
            return
        ep = self.config.convergence.eval_period_s
        if ep > 0:
            while self.first_update_s + self.next_eval_k * ep < end:
                tick = self.first_update_s + self.next_eval_k * ep
                j = int(np.searchsorted(sorted_times, tick, side="right")) - 1
                p = float(cum[j]) if j >= 0 and log.count else self.progress
                version = v0 + j + 1 if log.count else v0
                self.curve.append((round(tick - self.first_update_s, 6), version, float(self.conv.metric(p))))
                self.next_eval_k += 1
                if self.tta_s is None and self.conv.reached(p):
                    self.tta_s, self.tta_updates = tick - self.first_update_s, version
        elif log.count:
            hit = np.flatnonzero(cum >= self.config.convergence.updates_to_target - 1e-9)
            if self.tta_s is None and len(hit):
                self.tta_s = float(sorted_times[hit[0]]) - self.first_update_s
                self.tta_updates = v0 + int(hit[0]) + 1
            self.curve.append((round(end - self.first_update_s, 6), self.history.size, float(self.conv.metric(cum[-1]))))
        if log.count:
            self.progress = float(cum[-1])

    # ---- the coordinator's step -------------------------------------------------
    def _decide(self, now: float, log: UpdateLog, woken_by: tuple[int, ...] = ()) -> None:
        """The coordinator's control loop (star.control_loop, as the daemon runs it); its actions applied here.
        The loop numbers the periods it decided in, not the simulator's (result "decisions"): they differ
        by the periods before the first report, and the policies only use differences of period numbers."""
        tick = time.perf_counter()
        pushes = int(self.iters.sum())  # every iteration ends in a push (a refused one crosses the link too)
        ps, hosts = coordinator_view(now, self.noise.estimate(), self.ps_hosts, pushes)
        actions = self.loop.step(now, Reports(self.plan, self.book.summaries(now, self.amp), pushes), ps, hosts, woken_by)
        self.controller_s += time.perf_counter() - tick
        if actions.error is not None:
            raise actions.error
        events = [{"t": round(now, 4), "kind": e.kind, **e.fields} for e in actions.events]
        if self.ps_hosts is not None:  # the move first, as the daemon performs Actions
            self.fixed_s, self.push_s, moves = self.ps_hosts.perform(now, actions.move)
            events = moves + events
        for event in events:
            self.counts[event["kind"]] = self.counts.get(event["kind"], 0) + 1
            self.events.append(event)
        for worker, on in actions.directives.amp.items():
            if self.amp[worker] != on:
                self.book.amp_switched(worker, on)
            self.amp[worker] = on
        if actions.directives.batch_sizes:
            furthest = int(self.iters.max())
            at_once = set(woken_by) if self.control.batching.cut_at_once else set()
            for worker, size in actions.directives.batch_sizes.items():
                start = directed_from_iteration(int(self.batch_from[worker]), int(self.iters[worker]), furthest)
                self.batch_from[worker] = start
                self.pending.direct(worker, size, start, worker in at_once, int(self.placed[worker]))
            if self.control.batching.cut_at_once:
                self._cut_at_once([w for w in woken_by if w in actions.directives.batch_sizes], now)
        if actions.switch is not None:
            plan = actions.switch.plan
            self._switch(plan, now, log)
            self.counts["plan"] = self.counts.get("plan", 0) + 1
            self.events.append({"t": round(now, 4), "kind": "plan", "epoch": plan.epoch, "mode": plan.label,
                                "plan": plan.describe()})

    def _sizing_watch(self) -> tuple[list[int], int]:
        """The loop's sizing watch as the daemon arms it: the plan's unsized workers and the report count that
        makes them sizable ([] when the loop does not watch)."""
        min_reports = self.loop.sizing_watch()
        if not min_reports:
            return [], 0
        return self.book.unsized(self.plan.workers, self.amp, min_reports), min_reports

    def _cut_at_once(self, workers: list[int], now: float) -> None:
        """A woken decision's cuts for the workers whose reports woke it (Directives.cut_at_once): the iteration each
        started right after that report (and is still computing) restarts at its cut size, as a real worker computes
        it once the reply came; its later iterations keep the cut until the new batches are due. Other cuts wait."""
        sizes = {w: self.pending.cut_now(w, int(self.placed[w])) for w in workers}
        cut = np.array([w for w, size in sizes.items() if size is not None], dtype=np.int64)
        self.batch[cut] = [sizes[w] for w in cut.tolist()]
        computing = cut[self.arrive[cut] > now]
        if len(computing):
            self._start_iteration(computing, self.start[computing], self.pulled[computing], restart=True)

    def run(self) -> SimResult:
        c = self.config
        wall = time.perf_counter()
        period_s = self.control.decision_period_s
        now, period, reason = 0.0, 0, "max_iterations"
        next_tick = period_s
        log = UpdateLog()
        watch, since = self.loop.slowdown_watch(), self.book.count.copy()
        unsized, min_reports = self._sizing_watch()
        while True:
            checked = self.book.count.copy()
            end = min(next_tick, now + period_s / WATCH_CHECKS) if watch or unsized else next_tick
            for g, (members, quorum) in enumerate(self.sync_groups):
                if quorum == len(members):
                    self._run_sync(g, members, end, log)
                else:
                    self._run_kofn(g, members, quorum, end, log)
            self._run_singles(self.singles, end, log)
            self._run_singles(self.outsiders, end, log, apply=False)
            now = end
            self._account(log, end)
            if c.stop_at_target and self.tta_s is not None:
                reason = "target_reached"
                break
            if self.iters.max() >= c.iterations:
                break
            if now >= c.max_time_s:
                reason = "max_time"
                break
            log = UpdateLog()  # a plan switch's flushed rounds belong to the next period
            timed = now >= next_tick - 1e-9  # the period's end; else a check of the slowdown watch
            woken_by = () if timed else tuple(self.book.sizing_above(watch, self.amp, since, self.loop.confirming()))
            if not timed and unsized and not self.book.unsized(self.plan.workers, self.amp, min_reports):
                # the last unsized workers became sizable in this check: those that reported since the last one
                woken_by = tuple(sorted(set(woken_by) | {w for w in unsized if self.book.count[w] > checked[w]}))
            if not timed and not woken_by:
                continue
            if timed:
                next_tick += period_s
            self._decide(now, log, woken_by)
            period += 1
            watch, since = self.loop.slowdown_watch(), self.book.count.copy()  # armed for the reports from now on
            unsized, min_reports = self._sizing_watch()
        self.decisions = period
        return self._result(reason, time.perf_counter() - wall, now)

    def _result(self, reason: str, wall_s: float, now: float) -> SimResult:
        c = self.config
        reached = self.tta_s is not None
        updates = self.tta_updates if reached and c.stop_at_target else self.history.size
        final_metric = self.curve[-1][2] if self.curve else float(self.conv.metric(self.progress))
        result = {
            "task": "sim",
            "mode": c.plan.mode,
            "workers": c.workers,
            "reached": reached,
            "tta_s": None if self.tta_s is None else round(self.tta_s, 4),
            "final_metric": round(final_metric, 6),
            "iterations": int(self.iters.max()),
            "updates": int(updates),
            "progress": round(self.progress, 4),
            "sim_s": round(now, 4),
            "reason": reason,
            "straggler_detections": self.counts.get("straggler_detected", 0),
            "plan_switches": self.counts.get("plan", 0),
            "amp_toggles": self.counts.get("amp", 0),
            "batch_changes": self.counts.get("batch_sizes", 0),
            "late_applied": self.counters["late_applied"],
            "dropped_late": self.counters["dropped_late"],
            "refused_pushes": self.counters["refused"],
            "final_plan": self.plan.describe() if len(self.plan.workers) <= 64 else f"{self.plan.label} epoch={self.plan.epoch}",
            "decisions": self.decisions,
            "controller_s": round(self.controller_s, 4),
            "wall_s": round(wall_s, 4),
        }
        if self.ps_hosts is not None:
            result.update({k: self.counts.get(k, 0) for k in ("ps_moved", "plan_deferred", "pace")})
        if self.noise.on:
            result["b_noise_estimate"] = round(self.noise.value, 2)
        return SimResult(result, self.curve, self.events)


def simulate(config: SimConfig, trace: Trace | None = None) -> SimResult:
    return Simulation(config, trace).run()
