"""The control loop as a pure state machine: inputs of one decision period in, actions out.

Why: the coordinator daemon and the simulator both run "summaries -> Controller.decide
-> apply"; written twice, they drifted. `ControlLoop.step` is that loop once, with the
clock passed in and no I/O, gRPC or wall time inside, so the daemon and the simulator are
thin adapters (gather inputs, call `step`, perform the returned `Actions`) and unit tests
drive it with a fake clock.

One period, in the daemon's order:
  1. `admit(plan, newcomers)`: workers that joined mid-run enter the plan (elastic).
  2. the adapter watches its PSs and finishes shard moves (I/O), then
  3. `step(now_s, reports, ps, hosts)`: a PS shard move when a PS host stays saturated,
     then the controller's decision (membership, detector, AMP, batch sizes, plan).
A report that crosses `slowdown_watch()` (a large slowdown batch sizing follows at once) does not wait for
the period's end: the adapter calls `step(..., early=True)` when it arrives (the daemon on the report, the
simulator at its next check, `star.sim.engine.WATCH_CHECKS` per period). `finish()` ends the loop when
the job is over. Adapters perform an `Actions` in the order of its fields: move, events, directives, plan
switch.
"""

from __future__ import annotations

import enum
from types import MappingProxyType
from dataclasses import dataclass, field
from typing import Any, Mapping

from star.elastic import admission_plan, with_worker
from star.placement import HostState, PlacementConfig, ReplacementPolicy
from star.plan import SyncPlan
from star.policy.batch import batch_offsets
from star.policy.controller import ControlConfig, Controller, WorkerSummary
from star.policy.traffic import PsLayout


class LoopState(enum.Enum):
    """WAITING: some worker of the plan was never judged (no report yet, fewer than min_reports,
    a newcomer, a restarted coordinator): only membership (lost / rejoined workers) is decided.
    RUNNING: every worker of the plan has been judged; every policy decides.
    FINISHED: the job is over; the loop decides nothing more."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


# ---- inputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reports:
    """What the workers told the coordinator, as of one period."""

    plan: SyncPlan | None  # the plan in force (None: not sent yet)
    workers: Mapping[int, WorkerSummary] = field(default_factory=dict)  # per worker that has reported
    total_iterations: int = 0  # sum over workers of their latest iteration (for the iteration rate)


@dataclass(frozen=True)
class PsInput:
    """The PSs as last seen: the noise scale, and where their shards are (None while a PS is down)."""

    b_noise: float = 0.0  # gradient noise scale summed over shards (0: unknown)
    shard_hosts: tuple[str, ...] | None = None  # per shard: its host's label
    shard_bytes: tuple[float, ...] = ()  # per shard: bytes of one push


@dataclass(frozen=True)
class HostsInput:
    """The hosts with a fresh resource sample, and whether a shard move is already under way."""

    states: Mapping[str, HostState] = field(default_factory=dict)
    move_in_flight: bool = False


# ---- actions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One line of events.jsonl (the adapter adds its time)."""

    kind: str
    fields: Mapping[str, Any]


_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Directives:
    """Per worker, what changes in its directives (workers not listed keep theirs). Two read-only
    mappings, not one object per worker: a batch decision at 1,000 workers changes them all."""

    amp: Mapping[int, bool] = field(default_factory=lambda: _EMPTY)
    batch_sizes: Mapping[int, int] = field(default_factory=lambda: _EMPTY)
    batch_offsets: Mapping[int, int] = field(default_factory=lambda: _EMPTY)  # with new sizes: every worker's place
    # in each round's global batch (star.tasks.global_batch), so that the batches tile it

    def __bool__(self) -> bool:
        return bool(self.amp) or bool(self.batch_sizes)


@dataclass(frozen=True)
class PlanSwitch:
    """Send `plan` (its epoch is the next one) to every PS."""

    plan: SyncPlan


@dataclass(frozen=True)
class ShardMove:
    """Move PS shard `shard` to host `target_host`."""

    shard: int
    target_host: str
    reason: str


@dataclass(frozen=True)
class Actions:
    """What one call asks the adapter to do, in field order."""

    move: ShardMove | None = None
    events: tuple[Event, ...] = ()
    directives: Directives = field(default_factory=Directives)
    switch: PlanSwitch | None = None
    error: Exception | None = None  # the controller raised: `events` says so, nothing else was decided

    @property
    def empty(self) -> bool:
        return self.move is None and not self.events and not self.directives and self.switch is None


NOTHING = Actions()
NO_PS = PsInput()
NO_HOSTS = HostsInput()


class Rate:
    """Iterations per second between two calls."""

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None
        self.value = 0.0

    def update(self, now_s: float, total: int) -> float:
        if self._last is not None and now_s > self._last[0]:
            self.value = max(0.0, (total - self._last[1]) / (now_s - self._last[0]))
        self._last = (now_s, total)
        return self.value


# ---- the loop ------------------------------------------------------------------------------


class ControlLoop:
    """Owns the policies' state (the Controller, PS re-placement, the iteration rate) and the
    decision period counter; every effect on the world is returned as Actions."""

    def __init__(self, config: ControlConfig, num_workers: int, base_batch: int, placement: PlacementConfig | None = None):
        self.config = config
        self.controller = Controller(config, num_workers, base_batch)
        self.replacement = ReplacementPolicy(placement or PlacementConfig())
        self.rate = Rate()
        self.period = 0  # decisions taken (a restored coordinator sets its saved count)
        self.state = LoopState.WAITING
        # Whose reports may bring the next decision forward: everyone's (None) after a timed decision; after an
        # early one, only the workers that woke it (their next report confirms the step that their first, half of
        # which was from before it, cut on half its evidence); after a second, nobody's until the next timed one.
        self._confirming: frozenset[int] | None = None

    def finish(self) -> None:
        self.state = LoopState.FINISHED

    def admit(self, plan: SyncPlan | None, newcomers: set[int] | frozenset[int]) -> Actions:
        """Workers that joined mid-run enter the plan in force (star.elastic): one event and a plan switch."""
        if self.state is LoopState.FINISHED or not newcomers or plan is None:
            return NOTHING
        c = self.controller
        new_plan = admission_plan(plan, set(newcomers), set(c.lost))
        if new_plan is None:
            return NOTHING
        for worker in sorted(newcomers):
            c.batch_sizes.setdefault(worker, c.base_batch)
            if c.base_plan is not None:  # a later rejoin goes back to a plan that has the newcomer
                c.base_plan = with_worker(c.base_plan, worker)
        c.num_workers = max(c.num_workers, max(newcomers) + 1)
        event = Event("worker_admitted", {"workers": sorted(newcomers), "epoch": new_plan.epoch,
                                          "plan": new_plan.describe(), "reason": "joined mid-run"})
        self.state = LoopState.WAITING  # the newcomer is judged before the policies act again
        return Actions(events=(event,), switch=PlanSwitch(new_plan))

    def slowdown_watch(self) -> Mapping[int, float]:
        """Per worker, the per-sample time (batch sizing's median of its newest reports) above which a report
        should bring the next decision forward: a slowdown that batch sizing follows at once (star.policy.speeds),
        acted on when its report arrives instead of up to a decision period later, while the worker holds the
        round back at a batch sized for its old speed. Empty unless every worker is judged and batch sizing
        is on. After an early decision, until the next timed one, only the workers that woke it are watched, and
        after a second, nobody: reports bring at most two decisions forward per period, and one spiking worker's
        report cannot bring another's forward (at 1,000 workers on a spiky trace that made batch sizing 3%
        slower)."""
        if self.state is not LoopState.RUNNING or self._confirming == frozenset() or not self.config.batch:
            return _EMPTY
        c = self.controller
        return {w: s for w, s in c.speeds.jump_thresholds().items()
                if w not in c.lost and (self._confirming is None or w in self._confirming)}

    def confirming(self) -> frozenset[int]:
        """The workers whose early decision was the first since the last timed one: their next report confirms
        the step that decision cut on half its evidence (star.report_book.ReportBook.sizing_above)."""
        return self._confirming or frozenset()

    def sizing_watch(self) -> int | None:
        """The report count (min_reports, under a worker's current AMP setting) at which the report that makes
        the last unsized worker of the plan sizable brings the next decision forward. At the start the straggler
        is the last to have its reports, and after an AMP switch the switched worker is held at its size until
        it has them: in both cases the round waits on a worker at a size that batch sizing could now correct,
        and a period's end is up to a second of such rounds away. None when batch sizing is off, once the job
        is over, and after an early decision until the next timed one."""
        if self.state is LoopState.FINISHED or self._confirming is not None or not self.config.batch:
            return None
        return self.config.min_reports

    def step(self, now_s: float, reports: Reports, ps: PsInput = NO_PS, hosts: HostsInput = NO_HOSTS,
             woken_by: tuple[int, ...] = ()) -> Actions:
        """One decision at `now_s` (seconds on the adapter's clock): at the end of a period, or early, when reports
        from the workers `woken_by` crossed the slowdown watch."""
        if self.state is LoopState.FINISHED:
            return NOTHING
        early = self._early_event(woken_by, reports)
        self._confirming = None if not woken_by else frozenset(woken_by) if self._confirming is None else frozenset()
        iterations_per_s = self.rate.update(now_s, reports.total_iterations)
        layout = (PsLayout(ps.shard_hosts, ps.shard_bytes, hosts.states)
                  if ps.shard_hosts is not None and hosts.states else None)
        move = self._move(now_s, layout, hosts, iterations_per_s)
        plan = reports.plan
        if not reports.workers or plan is None:
            return Actions(move=move) if move is not None else NOTHING
        try:
            decision = self.controller.decide(self.period, plan, reports.workers, ps.b_noise, layout, now_s)
        except Exception as exc:  # noqa: BLE001 - a policy bug must not silently end all control
            event = Event("control_error", {"error": repr(exc), "reason": "decision skipped; control goes on"})
            return Actions(move=move, events=(event,), error=exc)
        self.period += 1
        if self.state is LoopState.WAITING and self._all_judged(plan):  # once judged, a worker stays judged
            self.state = LoopState.RUNNING
        events = early + tuple(Event(e["kind"], {k: v for k, v in e.items() if k != "kind"}) for e in decision.events)
        offsets = batch_offsets(self.controller.batch_sizes) if decision.batch_sizes else {}
        directives = Directives(MappingProxyType(decision.amp), MappingProxyType(decision.batch_sizes), MappingProxyType(offsets))
        switch = PlanSwitch(decision.plan) if decision.plan is not None else None
        return Actions(move=move, events=events, directives=directives, switch=switch)

    def _early_event(self, woken_by: tuple[int, ...], reports: Reports) -> tuple[Event, ...]:
        """The lines in events.jsonl that say why this decision did not wait for its period's end."""
        if not woken_by:
            return ()
        watch = self.slowdown_watch()
        slowed = sorted(set(woken_by) & set(watch))
        sized = sorted(set(woken_by) - set(watch))
        events = []
        if slowed:
            events.append(Event("early_decision", {
                "workers": slowed,
                "per_sample_ms": {str(w): round(reports.workers[w].sizing_per_sample_s * 1e3, 4) for w in slowed if w in reports.workers},
                "watch_ms": {str(w): round(watch[w] * 1e3, 4) for w in slowed},
                "reason": "their newest reports show a slowdown that batch sizing follows at once: decided on arrival, "
                          "not at the period's end"}))
        if sized:
            events.append(Event("early_decision", {
                "workers": sized, "min_reports": self.config.min_reports,
                "reason": "with their reports every worker of the plan has min_reports under its current AMP setting, "
                          "so batch sizing can act on all of them: decided on arrival, not at the period's end"}))
        return tuple(events)

    def _all_judged(self, plan: SyncPlan) -> bool:
        c = self.controller
        return all(w in c.judged for w in plan.workers if w not in c.lost)

    def _move(self, now_s: float, layout: PsLayout | None, hosts: HostsInput, iterations_per_s: float) -> ShardMove | None:
        """Re-placement: a shard off a PS host that stays saturated (one move at a time)."""
        if layout is None or len(hosts.states) <= 1 or hosts.move_in_flight:
            return None
        traffic = [size * iterations_per_s for size in layout.shard_bytes]
        move = self.replacement.decide(now_s, layout.shard_hosts, hosts.states, traffic, self.controller.traffic.pressured)
        return None if move is None else ShardMove(move.shard, move.target, move.reason)
