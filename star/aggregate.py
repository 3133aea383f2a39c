"""The pure state machine that applies a SyncPlan to gradient arrivals.

Arrivals and pull requests go in; decisions (apply these gradients with this scale,
drop that one, release those blocked pulls) come out. No tensors, threads, clocks or
gRPC live here, so every mode and every switch between modes is unit-tested directly.
The parameter server holds the gradient payloads by id and carries the decisions out.

Protocol, per worker: pull (may block) -> compute -> push -> pull -> ...
- A pull records which round of its group the worker is computing for, and the
  parameter version it received.
- A push must follow a pull under the same plan epoch. It joins its group's open round
  if the round it was computed for is still open; otherwise it is *late* and is
  applied alone (staleness recorded) or dropped, by the plan's late policy.
- A round closes when `quorum` of its group's gradients arrived: their sum is applied
  (scaled per the plan) and the version is bumped.
- A pull blocks while the worker has a gradient in an open round, or (SSP) while the
  worker is more than `staleness_bound` pushes ahead of the slowest worker of the plan,
  counting pushes since the plan took effect.
- A tree push (a parent worker's gradient summed with its children's) counts as one
  gradient from each contributor: each must have pulled the same round and version in
  the pusher's group and not pushed since, else the whole push is refused.
- A new plan that changes only push pacing or tree aggregation (same groups, quorums,
  bound, scale, late policy) takes effect in place: open rounds stay open and pushes
  pulled under the previous epoch are still accepted, since how gradients combine did
  not change.
- Any other new plan (higher epoch) closes every open round first: gradients already received
  are applied under the old plan and their workers released; then the new plan rules,
  with every one of its workers' SSP clocks restarted at 0 (a worker that fell behind
  under an earlier plan does not hold the others back under this one, and a
  synchronous group cannot start with clocks further apart than its bound).

Invariant (property-tested): accepted == applied + dropped + pending, where every
accepted gradient ends up applied exactly once or dropped with a reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from star.plan import LatePolicy, Scale, SyncPlan, plan_from_dict, plan_to_dict


class RejectCode(str, Enum):
    FAILED_PRECONDITION = "failed_precondition"
    INVALID_ARGUMENT = "invalid_argument"


class PushRejected(Exception):
    """A push that changes no state; `reason` is a short key for counters."""

    def __init__(self, code: RejectCode, reason: str, message: str):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


class PushStatus(str, Enum):
    PENDING = "pending"  # waiting in an open round
    APPLIED = "applied"  # closed a round and was applied with it
    LATE_APPLIED = "late_applied"
    LATE_DROPPED = "late_dropped"
    SKIPPED_NONFINITE = "skipped_nonfinite"  # counted as an arrival, its payload dropped


@dataclass(frozen=True)
class Apply:
    """Sum these gradients, multiply by `scale`, take one optimizer step; version += 1."""

    gradient_ids: tuple[int, ...]
    scale: float
    staleness: tuple[int, ...]
    version_after: int
    late: bool = False


@dataclass(frozen=True)
class Drop:
    gradient_id: int
    reason: str


@dataclass
class Effects:
    """What the PS must do, in order: applies (then) release the listed pulls."""

    applies: list[Apply] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)
    released: list[int] = field(default_factory=list)

    def extend(self, other: "Effects") -> None:
        self.applies.extend(other.applies)
        self.drops.extend(other.drops)
        self.released.extend(other.released)


@dataclass(frozen=True)
class PushOutcome:
    gradient_id: int
    status: PushStatus
    effects: Effects


@dataclass(frozen=True)
class PullOutcome:
    ready: bool
    version: int
    epoch: int


@dataclass(frozen=True)
class _Arrival:
    gradient_id: int
    worker: int
    base_version: int
    usable: bool
    count: int = 1  # gradients summed in this payload (tree push: the pusher and its contributors)


@dataclass(frozen=True)
class _PullRecord:
    round: int
    version: int


def _only_transport_differs(a: SyncPlan, b: SyncPlan) -> bool:
    """Plans that combine gradients identically but pace or route pushes differently."""
    same = (a.groups, a.quorum, a.staleness_bound, a.scale, a.late_policy) == (b.groups, b.quorum, b.staleness_bound, b.scale, b.late_policy)
    return same and (a.push_pace_bytes_per_s, a.tree_fanout) != (b.push_pace_bytes_per_s, b.tree_fanout)


class Aggregator:
    """Applies one SyncPlan at a time to a stream of pulls and pushes."""

    def __init__(self, plan: SyncPlan | None = None):
        self.plan: SyncPlan | None = None
        self.version = 0
        self.counters: Counter[str] = Counter()
        self.staleness_histogram: Counter[int] = Counter()
        self.clock: dict[int, int] = {}  # worker of the plan -> pushes accepted under the plan in force
        self._group_of: dict[int, int] = {}
        self._round: list[int] = []
        self._open: list[list[_Arrival]] = []
        self._open_workers: list[set[int]] = []  # per group: workers with a gradient in the open round
        self._open_count: list[int] = []  # per group: gradients in the open round (a tree push brings several)
        self._clock_counts: Counter[int] = Counter()  # clock value -> how many workers of the plan have it
        self._slowest_clock = 0  # min(clock) over the plan's workers, kept in O(1) per push
        self._pulled: dict[int, _PullRecord] = {}
        self._waiting: set[int] = set()
        self._shape_epoch = -1  # first epoch of the plan's current shape: pushes from [shape_epoch, epoch] are valid
        self._next_id = 0
        if plan is not None:
            self.configure(plan)

    # ---- queries ---------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return -1 if self.plan is None else self.plan.epoch

    @property
    def pending(self) -> int:
        return sum(a.count for arrivals in self._open for a in arrivals)

    @property
    def waiting(self) -> frozenset[int]:
        return frozenset(self._waiting)

    @property
    def outstanding(self) -> frozenset[int]:
        """Workers that pulled under the plan in force and have not pushed since: gradients still to come."""
        return frozenset(self._pulled)

    def accounting(self) -> dict[str, int]:
        c = self.counters
        return {
            "accepted": c["accepted"],
            "applied": c["applied"],
            "dropped": c["dropped"],
            "pending": self.pending,
            "updates": self.version,
        }

    # ---- checkpoints -----------------------------------------------------------
    def export_state(self) -> dict:
        """What a checkpoint keeps: version, plan, counters. Gradients waiting in open rounds
        are not kept (their payloads live in the PS); `pending` records how many there were."""
        return {
            "version": self.version,
            "plan": None if self.plan is None else plan_to_dict(self.plan),
            "counters": dict(self.counters),
            "staleness_histogram": {str(k): v for k, v in self.staleness_histogram.items()},
            "pending": self.pending,
        }

    @classmethod
    def restore(cls, state: dict) -> "Aggregator":
        """An aggregator continuing from `export_state()`. The open rounds' gradients did not
        survive, so they are accounted as dropped ("lost_in_restart") and the invariant
        accepted == applied + dropped + pending still holds. Every worker must pull again."""
        aggregator = cls(plan_from_dict(state["plan"]) if state.get("plan") else None)
        aggregator.version = int(state["version"])
        aggregator.counters = Counter({str(k): int(v) for k, v in state.get("counters", {}).items()})
        aggregator.staleness_histogram = Counter({int(k): int(v) for k, v in state.get("staleness_histogram", {}).items()})
        lost = int(state.get("pending", 0))
        if lost:
            aggregator.counters["dropped"] += lost
            aggregator.counters["dropped_lost_in_restart"] += lost
        return aggregator

    # ---- pulls -----------------------------------------------------------------
    def pull(self, worker: int) -> PullOutcome:
        """A worker asks for parameters; blocked pulls are released later via Effects."""
        if self._pull_ready(worker):
            self._record_pull(worker)
            self._waiting.discard(worker)
            return PullOutcome(True, self.version, self.epoch)
        self._waiting.add(worker)
        return PullOutcome(False, self.version, self.epoch)

    def cancel_pull(self, worker: int) -> None:
        """The puller went away (deadline, disconnect); it no longer needs releasing."""
        self._waiting.discard(worker)

    def forget_pull(self, worker: int) -> None:
        """A released pull was never served (the shard is moving): no gradient will follow it here."""
        self._waiting.discard(worker)
        self._pulled.pop(worker, None)

    # ---- pushes ----------------------------------------------------------------
    def push(self, worker: int, epoch: int, base_version: int | None = None, usable: bool = True,
             contributors: tuple[int, ...] = ()) -> PushOutcome:
        """Validate, then account for one gradient (or, with `contributors`, a tree's sum of
        1 + len(contributors) gradients). Raises PushRejected with no state change."""
        record = self._validate_push(worker, epoch, base_version)
        self._validate_contributors(worker, record, contributors)
        plan = self.plan
        assert plan is not None
        gradient_id = self._next_id
        self._next_id += 1
        senders = (worker, *contributors)
        self.counters["accepted"] += len(senders)
        self.counters["pushes"] += 1
        if contributors:
            self.counters["tree_pushes"] += 1
        slowest_moved = False
        for sender in senders:
            slowest_moved |= self._tick(sender)
            del self._pulled[sender]
        group = self._group_of[worker]
        effects = Effects()
        arrival = _Arrival(gradient_id, worker, record.version, usable, len(senders))
        # Only the workers of a round this push closes can become ready, or (SSP) every
        # waiting worker when this push moved the slowest clock up: check just those.
        recheck: set[int] | None = None if plan.staleness_bound is not None and slowest_moved else set()

        if record.round == self._round[group]:
            self._open[group].append(arrival)
            self._open_workers[group].update(senders)
            self._open_count[group] += arrival.count
            if not usable:
                status = PushStatus.SKIPPED_NONFINITE
            else:
                status = PushStatus.PENDING
            if self._open_count[group] >= plan.quorum[group]:
                if recheck is not None:
                    recheck.update(self._open_workers[group])
                effects.extend(self._close_round(group))
                if usable:
                    status = PushStatus.APPLIED
        elif not usable:
            effects.drops.append(self._drop(arrival, "nonfinite"))
            status = PushStatus.SKIPPED_NONFINITE
        elif plan.late_policy is LatePolicy.APPLY:
            effects.applies.append(self._apply([arrival], scale=self._late_scale(plan, arrival.count), late=True))
            status = PushStatus.LATE_APPLIED
        else:
            effects.drops.append(self._drop(arrival, "late"))
            status = PushStatus.LATE_DROPPED
        effects.released.extend(self._release_ready(recheck))
        return PushOutcome(gradient_id, status, effects)

    # ---- plan changes ----------------------------------------------------------
    def configure(self, plan: SyncPlan) -> Effects:
        """Switch plans at a round boundary: close open rounds under the old plan first."""
        if self.plan is not None and plan.epoch <= self.plan.epoch:
            raise PushRejected(
                RejectCode.FAILED_PRECONDITION,
                "stale_plan",
                f"plan epoch {plan.epoch} is not newer than the plan in force (epoch {self.plan.epoch})",
            )
        if self.plan is not None and _only_transport_differs(self.plan, plan):
            self.plan = plan  # pacing or trees only: rounds, pulls and clocks carry on
            self.counters["plan_switches"] += 1
            return Effects()
        self._shape_epoch = plan.epoch
        effects = self.close_open_rounds()
        # SSP clocks count pushes under the plan in force: they restart at 0 with every plan.
        self.clock = dict.fromkeys(plan.workers, 0)
        self._clock_counts = Counter({0: len(self.clock)})
        self._slowest_clock = 0
        self.plan = plan
        self._group_of = plan.group_of()
        self._round = [0] * len(plan.groups)
        self._open = [[] for _ in plan.groups]
        self._open_workers = [set() for _ in plan.groups]
        self._open_count = [0] * len(plan.groups)
        self._pulled.clear()
        self.counters["plan_switches"] += 1
        effects.released.extend(self._release_ready())
        return effects

    def close_open_rounds(self) -> Effects:
        """Apply every open round with the gradients it has (a plan switch, a shard handed over):
        nothing accepted is left pending."""
        effects = Effects()
        for group in range(len(self._open)):
            if self._open[group]:
                effects.extend(self._close_round(group))
        return effects

    # ---- internals -------------------------------------------------------------
    def _validate_push(self, worker: int, epoch: int, base_version: int | None) -> _PullRecord:
        fp, inv = RejectCode.FAILED_PRECONDITION, RejectCode.INVALID_ARGUMENT
        if self.plan is None:
            raise PushRejected(fp, "no_plan", "no sync plan configured yet; the coordinator sends one at start")
        if epoch > self.plan.epoch:
            raise PushRejected(
                inv, "future_epoch", f"push epoch {epoch} is newer than the plan in force (epoch {self.plan.epoch})"
            )
        if epoch < self._shape_epoch:
            raise PushRejected(
                fp,
                "stale_epoch",
                f"push epoch {epoch} is older than the plan in force (epoch {self.plan.epoch}); pull again",
            )
        if worker not in self._group_of:
            raise PushRejected(fp, "not_in_plan", f"worker {worker} is not in the plan in force ({self.plan.describe()})")
        record = self._pulled.get(worker)
        if record is None:
            raise PushRejected(
                fp, "push_without_pull", f"worker {worker} pushed without a pull under epoch {epoch} (duplicate push?)"
            )
        if base_version is not None and base_version != record.version:
            raise PushRejected(
                inv,
                "base_version_mismatch",
                f"base_version {base_version} does not match the version {record.version} worker {worker} last pulled",
            )
        return record

    def _validate_contributors(self, worker: int, record: _PullRecord, contributors: tuple[int, ...]) -> None:
        """A tree push sums gradients computed on what `worker` pulled: each contributor must
        be a distinct worker of the same group that pulled that same round and version."""
        if not contributors:
            return
        inv = RejectCode.INVALID_ARGUMENT
        if len(set(contributors)) != len(contributors) or worker in contributors:
            raise PushRejected(inv, "bad_contributors", f"contributors {list(contributors)} repeat a worker (pusher {worker})")
        group = self._group_of[worker]
        for child in contributors:
            if self._group_of.get(child) != group:
                raise PushRejected(inv, "bad_contributors", f"contributor {child} is not in worker {worker}'s group under the plan in force")
            child_record = self._pulled.get(child)
            if child_record is None:
                raise PushRejected(RejectCode.FAILED_PRECONDITION, "push_without_pull",
                                   f"contributor {child} has no pull under the plan in force to push for (duplicate push?)")
            if child_record != record:
                raise PushRejected(inv, "base_version_mismatch",
                                   f"contributor {child} pulled round {child_record.round} version {child_record.version}, "
                                   f"worker {worker} round {record.round} version {record.version}")

    def _tick(self, worker: int) -> bool:
        """One more push by `worker` under this plan; True when that moved the slowest clock up."""
        old_clock = self.clock[worker]
        self.clock[worker] = old_clock + 1
        self._clock_counts[old_clock] -= 1
        if not self._clock_counts[old_clock]:
            del self._clock_counts[old_clock]
        self._clock_counts[old_clock + 1] += 1
        if old_clock == self._slowest_clock and old_clock not in self._clock_counts:
            self._slowest_clock = old_clock + 1
            return True
        return False

    def _pull_ready(self, worker: int) -> bool:
        if self.plan is None or worker not in self._group_of:
            return True
        if worker in self._open_workers[self._group_of[worker]]:
            return False
        bound = self.plan.staleness_bound
        if bound is None:
            return True
        return self.clock[worker] - self._slowest_clock <= bound

    def _record_pull(self, worker: int) -> None:
        if self.plan is not None and worker in self._group_of:
            group = self._group_of[worker]
            self._pulled[worker] = _PullRecord(self._round[group], self.version)

    def _release_ready(self, candidates: set[int] | None = None) -> list[int]:
        """Release the waiting pulls that are ready; `candidates` limits the search to
        the only workers whose readiness can have changed (None: every waiting worker)."""
        pool = self._waiting if candidates is None else self._waiting & candidates
        released = sorted(w for w in pool if self._pull_ready(w))
        for worker in released:
            self._waiting.discard(worker)
            self._record_pull(worker)
        return released

    def _close_round(self, group: int) -> Effects:
        plan = self.plan
        assert plan is not None
        arrivals = self._open[group]
        self._open[group] = []
        self._open_workers[group] = set()
        self._open_count[group] = 0
        self._round[group] += 1
        effects = Effects()
        usable = [a for a in arrivals if a.usable]
        for arrival in arrivals:
            if not arrival.usable:
                effects.drops.append(self._drop(arrival, "nonfinite"))
        if usable:
            if plan.scale is Scale.PER_ARRIVALS:
                scale = 1.0 / sum(a.count for a in usable)
            else:
                scale = 1.0 / plan.total_workers
            effects.applies.append(self._apply(usable, scale=scale, late=False))
        self.counters["rounds"] += 1
        return effects

    def _late_scale(self, plan: SyncPlan, count: int) -> float:
        return 1.0 / count if plan.scale is Scale.PER_ARRIVALS else 1.0 / plan.total_workers

    def _apply(self, arrivals: list[_Arrival], scale: float, late: bool) -> Apply:
        staleness = tuple(self.version - a.base_version for a in arrivals)
        for s, a in zip(staleness, arrivals):
            self.staleness_histogram[s] += a.count
        self.version += 1
        self.counters["applied"] += sum(a.count for a in arrivals)
        if late:
            self.counters["late_applied"] += 1
        return Apply(tuple(a.gradient_id for a in arrivals), scale, staleness, self.version, late)

    def _drop(self, arrival: _Arrival, reason: str) -> Drop:
        self.counters["dropped"] += arrival.count
        self.counters[f"dropped_{reason}"] += arrival.count
        return Drop(arrival.gradient_id, reason)
