"""Elastic membership: a worker that joins mid-run is admitted into the plan.

A job started with `max_workers` above `workers` accepts worker ids up to max_workers-1. A
worker the plan has never had (started by hand, or by a new host) is queued at its Join and
admitted at the next decision period: it joins the smallest group of the plan in force (a
fully synchronous group stays fully synchronous), the controller takes it as a member (its
batch size starts at the even share; the batch policy, when on, recomputes everyone's), and
every PS gets the new plan (`star.control_loop.ControlLoop.admit` decides it, the
coordinator sends it). Losing a worker for good is the controller's `worker_lost` (it
leaves the plan, its blocked peers are released). Both show in events.jsonl.
"""

from __future__ import annotations

import dataclasses

from star.plan import SyncPlan, with_epoch


def with_worker(plan: SyncPlan, worker: int) -> SyncPlan:
    """`plan` with one more worker, in its smallest group (lowest index on ties); a group whose
    quorum was all of it keeps waiting for all of it; with every worker on its own (ASGD) the
    newcomer is too. The epoch is left to the caller."""
    if worker in plan.workers:
        return plan
    if all(len(group) == 1 for group in plan.groups):  # every worker on its own (ASGD): so is the newcomer
        return dataclasses.replace(plan, groups=(*plan.groups, (worker,)), quorum=(*plan.quorum, 1))
    index = min(range(len(plan.groups)), key=lambda g: (len(plan.groups[g]), g))
    groups, quorum = list(plan.groups), list(plan.quorum)
    if quorum[index] == len(groups[index]):
        quorum[index] += 1
    groups[index] = tuple(sorted((*groups[index], worker)))
    return dataclasses.replace(plan, groups=tuple(groups), quorum=tuple(quorum))


def admission_plan(current: SyncPlan, newcomers: set[int], lost: set[int]) -> SyncPlan | None:
    """The plan after admitting `newcomers` (those not lost meanwhile), with the next epoch; None if nothing changes."""
    plan = current
    for worker in sorted(newcomers - lost):
        plan = with_worker(plan, worker)
    return None if plan is current else with_epoch(plan, current.epoch + 1)
