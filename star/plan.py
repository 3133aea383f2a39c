"""SyncPlan: the one description of every synchronisation mode.

Every mode (SSGD, ASGD, k-of-N, grouped, excluded stragglers, SSP) is a value of
the same type, so the parameter server needs exactly one state machine
(`star.aggregate`) and a mode switch is just a new value with a higher epoch.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Sequence

MODES = ("ssgd", "asgd", "kofn", "grouped", "ssp", "exclude")


class PlanError(ValueError):
    """A plan (or the spec it was built from) is inconsistent; the message names the field."""


class Scale(str, Enum):
    """How the sum of a round's gradients is scaled before the optimizer step."""

    PER_TOTAL_WORKERS = "per_total_workers"  # 1/N_total: one round of every group == one SSGD step
    PER_ARRIVALS = "per_arrivals"  # mean of the arrivals in the round


class LatePolicy(str, Enum):
    """What happens to a gradient that arrives after its round already closed (k-of-N)."""

    APPLY = "apply"  # applied on its own, its staleness recorded
    DROP = "drop"  # reported as dropped, never applied


@dataclass(frozen=True)
class SyncPlan:
    """How workers synchronise.

    groups: each group synchronises internally; groups never wait for each other.
    quorum: per group, how many of its gradients close a round.
    staleness_bound: SSP bound; a pull blocks while the puller is more than this many
        pushes ahead of the slowest worker in the plan, counting pushes since the
        plan took effect. None = unbounded.
    push_pace_bytes_per_s: a per-worker push budget (all shards together) that workers
        honour when a PS host's NIC nears saturation; None = unpaced. The aggregator
        ignores it: pacing changes when gradients arrive, not how they are combined.
    tree_fanout: tree aggregation for NIC relief. In each fully synchronous group
        (quorum == size, no staleness bound), workers are taken in sorted order in
        chunks of this size; the first of a chunk is the parent, which sums its
        children's gradients with its own and pushes once (see `tree_layout`).
        None = every worker pushes for itself. Like pacing, it changes how gradients
        travel, not how they combine, so the aggregator treats a change in place.
    """

    epoch: int
    groups: tuple[tuple[int, ...], ...]
    quorum: tuple[int, ...]
    staleness_bound: int | None = None
    scale: Scale = Scale.PER_TOTAL_WORKERS
    late_policy: LatePolicy = LatePolicy.APPLY
    push_pace_bytes_per_s: float | None = None
    tree_fanout: int | None = None
    label: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise PlanError(f"epoch must be >= 0, got {self.epoch}")
        if not self.groups:
            raise PlanError("groups must name at least one worker")
        if len(self.quorum) != len(self.groups):
            raise PlanError(f"quorum has {len(self.quorum)} entries for {len(self.groups)} groups")
        seen: dict[int, int] = {}  # worker -> index of the group it first appeared in
        for index, (group, quorum) in enumerate(zip(self.groups, self.quorum)):
            if not group:
                raise PlanError(f"groups[{index}] is empty")
            for worker in group:
                if worker < 0:
                    raise PlanError(f"groups[{index}] has negative worker id {worker}")
                if worker in seen:
                    first = seen[worker]
                    where = f"groups[{index}]" if first == index else f"groups[{first}] and groups[{index}]"
                    raise PlanError(f"worker {worker} appears more than once in groups (in {where})")
                seen[worker] = index
            if not 1 <= quorum <= len(group):
                raise PlanError(f"quorum[{index}]={quorum} must be in 1..{len(group)}")
        if self.staleness_bound is not None and self.staleness_bound < 0:
            raise PlanError(f"staleness_bound must be >= 0 or None, got {self.staleness_bound}")
        pace = self.push_pace_bytes_per_s
        if pace is not None and not (pace > 0 and pace != float("inf")):
            raise PlanError(f"push_pace_bytes_per_s must be a finite number > 0 or None, got {pace}")
        if self.tree_fanout is not None and (isinstance(self.tree_fanout, bool) or self.tree_fanout < 2):
            raise PlanError(f"tree_fanout must be an integer >= 2 or None, got {self.tree_fanout!r}")

    @functools.cached_property
    def workers(self) -> tuple[int, ...]:
        """Every worker of the plan, sorted (computed once: plans are immutable and read often at scale)."""
        return tuple(sorted(w for group in self.groups for w in group))

    @property
    def total_workers(self) -> int:
        return sum(len(group) for group in self.groups)

    def group_of(self) -> dict[int, int]:
        """worker id -> group index."""
        return {w: g for g, group in enumerate(self.groups) for w in group}

    def describe(self) -> str:
        groups = ";".join(",".join(map(str, g)) for g in self.groups)
        quorum = ",".join(map(str, self.quorum))
        ssp = "" if self.staleness_bound is None else f" ssp={self.staleness_bound}"
        pace = "" if self.push_pace_bytes_per_s is None else f" pace={self.push_pace_bytes_per_s:.0f}B/s"
        tree = "" if self.tree_fanout is None else f" tree={self.tree_fanout}"
        name = f"{self.label} " if self.label else ""
        return f"{name}epoch={self.epoch} groups=[{groups}] quorum=[{quorum}]{ssp} late={self.late_policy.value}{pace}{tree}"


def ssgd(workers: Sequence[int], epoch: int = 0) -> SyncPlan:
    workers = _check_workers(workers)
    return SyncPlan(epoch, (workers,), (len(workers),), label="ssgd")


def asgd(workers: Sequence[int], epoch: int = 0, staleness_bound: int | None = None) -> SyncPlan:
    workers = _check_workers(workers)
    return SyncPlan(
        epoch,
        tuple((w,) for w in workers),
        tuple(1 for _ in workers),
        staleness_bound=staleness_bound,
        label="ssp" if staleness_bound is not None else "asgd",
    )


def kofn(workers: Sequence[int], k: int, epoch: int = 0, late_policy: LatePolicy = LatePolicy.APPLY) -> SyncPlan:
    workers = _check_workers(workers)
    if not 1 <= k <= len(workers):
        raise PlanError(f"k={k} must be in 1..{len(workers)}")
    return SyncPlan(epoch, (workers,), (k,), late_policy=late_policy, label="kofn")


def grouped(groups: Iterable[Sequence[int]], epoch: int = 0) -> SyncPlan:
    groups_t = tuple(tuple(g) for g in groups)
    return SyncPlan(epoch, groups_t, tuple(len(g) for g in groups_t), label="grouped")


def exclude(workers: Sequence[int], excluded: Iterable[int], epoch: int = 0) -> SyncPlan:
    """Dynamic Partial All-Reduce: healthy workers sync together; each excluded one runs alone."""
    workers = _check_workers(workers)
    excluded_set = set(excluded)
    unknown = excluded_set - set(workers)
    if unknown:
        raise PlanError(f"excluded workers {sorted(unknown)} are not in the plan's workers")
    healthy = tuple(w for w in workers if w not in excluded_set)
    if not healthy:
        return asgd(workers, epoch)
    groups = (healthy,) + tuple((w,) for w in workers if w in excluded_set)
    return SyncPlan(epoch, groups, tuple(len(g) for g in groups), label="exclude")


def parse_groups(text: str) -> tuple[tuple[int, ...], ...]:
    """'0,1;2,3' -> ((0, 1), (2, 3))."""
    try:
        groups = tuple(tuple(int(w) for w in part.split(",") if w.strip()) for part in text.split(";"))
    except ValueError as exc:
        raise PlanError(f"groups={text!r} is not of the form '0,1;2,3': {exc}") from None
    if not groups or any(not g for g in groups):
        raise PlanError(f"groups={text!r} has an empty group")
    return groups


def halves(workers: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    workers = tuple(workers)
    if len(workers) < 2:
        return (workers,)
    middle = (len(workers) + 1) // 2
    return (workers[:middle], workers[middle:])


def plan_for_mode(
    mode: str,
    num_workers: int,
    *,
    k: int | None = None,
    groups: str | Sequence[Sequence[int]] | None = None,
    staleness: int = 2,
    excluded: Iterable[int] = (),
    epoch: int = 0,
) -> SyncPlan:
    """Build the plan a launch `--mode` names, with the documented defaults."""
    workers = tuple(range(num_workers))
    if mode == "ssgd":
        return ssgd(workers, epoch)
    if mode == "asgd":
        return asgd(workers, epoch)
    if mode == "ssp":
        return asgd(workers, epoch, staleness_bound=staleness)
    if mode == "kofn":
        return kofn(workers, k if k is not None else max(1, num_workers - 1), epoch)
    if mode == "grouped":
        if groups is None:
            parsed = halves(workers)
        elif isinstance(groups, str):
            parsed = parse_groups(groups)
        else:
            parsed = tuple(tuple(g) for g in groups)
        if sorted(w for g in parsed for w in g) != list(workers):
            raise PlanError(f"groups={parsed} must name every worker 0..{num_workers - 1} exactly once")
        return grouped(parsed, epoch)
    if mode == "exclude":
        return exclude(workers, excluded, epoch)
    raise PlanError(f"mode={mode!r} is not one of {', '.join(MODES)}")


def with_epoch(plan: SyncPlan, epoch: int) -> SyncPlan:
    return dataclasses.replace(plan, epoch=epoch)


def with_pace(plan: SyncPlan, push_pace_bytes_per_s: float | None) -> SyncPlan:
    """The same plan with workers' pushes paced (None: unpaced)."""
    return dataclasses.replace(plan, push_pace_bytes_per_s=push_pace_bytes_per_s)


def with_tree(plan: SyncPlan, tree_fanout: int | None) -> SyncPlan:
    """The same plan with workers aggregating in trees of `tree_fanout` (None: every worker pushes)."""
    return dataclasses.replace(plan, tree_fanout=tree_fanout)


def tree_layout(plan: SyncPlan) -> dict[int, tuple[int, ...]]:
    """parent -> its children under `plan.tree_fanout`; workers in neither push for themselves.

    Only fully synchronous groups (quorum == size) of two or more form trees, and only
    without an SSP bound: there every gradient of a round is awaited anyway, so a parent
    holding its children's gradients until its own is ready delays nothing. In a k-of-N
    or asynchronous group it would hold back gradients that could have closed a round.
    """
    fanout = plan.tree_fanout
    if fanout is None or plan.staleness_bound is not None:
        return {}
    layout: dict[int, tuple[int, ...]] = {}
    for group, quorum in zip(plan.groups, plan.quorum):
        if quorum != len(group) or len(group) < 2:
            continue
        members = sorted(group)
        for start in range(0, len(members), fanout):
            chunk = members[start : start + fanout]
            if len(chunk) >= 2:
                layout[chunk[0]] = tuple(chunk[1:])
    return layout


def plan_to_dict(plan: SyncPlan) -> dict:
    """A JSON-able form (checkpoints, events): plain lists, ints and strings only."""
    return {
        "epoch": plan.epoch,
        "groups": [list(g) for g in plan.groups],
        "quorum": list(plan.quorum),
        "staleness_bound": plan.staleness_bound,
        "scale": plan.scale.value,
        "late_policy": plan.late_policy.value,
        "push_pace_bytes_per_s": plan.push_pace_bytes_per_s,
        "tree_fanout": plan.tree_fanout,
        "label": plan.label,
    }


def plan_from_dict(data: dict) -> SyncPlan:
    """Inverse of plan_to_dict; raises PlanError naming the bad field."""
    try:
        return SyncPlan(
            epoch=int(data["epoch"]),
            groups=tuple(tuple(int(w) for w in g) for g in data["groups"]),
            quorum=tuple(int(q) for q in data["quorum"]),
            staleness_bound=None if data.get("staleness_bound") is None else int(data["staleness_bound"]),
            scale=Scale(data.get("scale", Scale.PER_TOTAL_WORKERS.value)),
            late_policy=LatePolicy(data.get("late_policy", LatePolicy.APPLY.value)),
            push_pace_bytes_per_s=None if data.get("push_pace_bytes_per_s") is None else float(data["push_pace_bytes_per_s"]),
            tree_fanout=None if data.get("tree_fanout") is None else int(data["tree_fanout"]),
            label=str(data.get("label", "")),
        )
    except KeyError as exc:
        raise PlanError(f"plan is missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, PlanError):
            raise
        raise PlanError(f"malformed plan {data!r}: {exc}") from None


def _check_workers(workers: Sequence[int]) -> tuple[int, ...]:
    workers = tuple(workers)
    if not workers:
        raise PlanError("workers must not be empty")
    if len(set(workers)) != len(workers):
        raise PlanError(f"workers {workers} has duplicates")
    return workers


def without_workers(plan: SyncPlan, gone: frozenset[int]) -> SyncPlan:
    """The plan minus lost workers (empty groups disappear, quorums shrink to fit).
    When every worker is gone the plan stays as it is: there is nobody to synchronise."""
    if set(plan.workers) <= gone:
        return plan
    groups, quorum = [], []
    for group, q in zip(plan.groups, plan.quorum):
        kept = tuple(w for w in group if w not in gone)
        if kept:
            groups.append(kept)
            quorum.append(min(q, len(kept)))
    return dataclasses.replace(plan, groups=tuple(groups), quorum=tuple(quorum))
