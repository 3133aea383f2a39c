"""A restarted coordinator takes over a running job (wiring; the rules are in star.coordinator_state).

Called instead of sending the initial plan when the coordinator runs with `restore`: the
launcher restarts a crashed coordinator that way, on the same port, so workers and node
agents reach it again without being told. Workers never waited for it: they trained on
under the plan in force and dropped the reports they could not deliver.
"""

from __future__ import annotations

import collections
import logging

import grpc

from star.coordinator_state import (
    STATE_FILE,
    StateFileError,
    load_state,
    plain_state,
    plan_in_force,
    read_curve,
    restore_plain_state,
    write_state,
)
from star.tta import time_to_target
from star.events import read_events
from star.logs import log
from star.rpc import star_pb2 as pb

logger = logging.getLogger("coordinator")


def restore_coordinator(coordinator) -> bool:
    """Rebuild `coordinator` (a star.coordinator.Coordinator) from the PSs, its state file and curve.csv.

    Returns False when no PS holds a plan yet (the crash came before the first): the caller
    then starts the job as usual.
    """
    coordinator.ps.wait_ready(timeout_s=60.0)
    stats = coordinator.ps.stats_each()
    plan = plan_in_force(stats)
    if plan is None:
        return False
    service, events, out = coordinator.service, coordinator.events, coordinator.out
    if (out / "events.jsonl").exists():  # result.json's counts cover the whole job, not just this process
        events.counts.update(collections.Counter(e["kind"] for e in read_events(out / "events.jsonl")))
    state_note, state = "absent", None
    try:
        state = load_state(out / STATE_FILE)
    except StateFileError as exc:
        state_note = f"refused: {exc}"
        log(logger, logging.WARNING, "state file refused; starting from the PSs' state alone", reason=str(exc))
    if state is not None:
        state_note = "restored"
        for worker, d in state.get("directives", {}).items():
            service.directives[int(worker)] = pb.Directives(amp=bool(d["amp"]), batch_size=int(d["batch_size"]))
        restore_plain_state(coordinator.ps_watch, state.get("ps_watch", {}))
        coordinator.restored_control = (int(state.get("period", 0)), state.get("controller", {}))
    found, resend = coordinator.ps_watch.observe(stats, plan.epoch)  # a PS restored while no coordinator watched
    for event in found:
        event = dict(event)
        events.emit(event.pop("kind"), **event)
    if resend:
        coordinator.ps.configure_each(plan, only=resend)
    points = read_curve(out / "curve.csv")
    coordinator.restored_points = points
    with service.lock:
        service.plan = plan
        if points:
            service.state, service.latest = "running", points[-1]
            service.tta_s = time_to_target(points, coordinator.target, coordinator.task.higher_is_better)
    answered = [s.ps_index for s in stats if not isinstance(s, grpc.RpcError)]
    events.emit("coordinator_restored", epoch=plan.epoch, mode=plan.label, plan=plan.describe(), plan_from_ps=answered,
                state_file=state_note, directives=len(service.directives),
                policy_period=coordinator.restored_control[0] if coordinator.restored_control else None,
                curve_points=len(points), version=max((s.version for s in stats if not isinstance(s, grpc.RpcError)), default=0))
    return True


def save_state(coordinator, period: int, controller) -> None:
    """What a restarted coordinator needs beyond the PSs' state: directives, policy and PS-watch state."""
    with coordinator.service.lock:
        directives = {w: {"amp": d.amp, "batch_size": d.batch_size} for w, d in coordinator.service.directives.items()}
    try:
        write_state(coordinator.out / STATE_FILE, {"period": period, "directives": directives, "controller": plain_state(controller),
                                                   "ps_watch": plain_state(coordinator.ps_watch)})
    except OSError as exc:
        log(logger, logging.WARNING, "could not write the state file", error=str(exc))


def restore_control(coordinator, controller) -> int:
    """Give a restored coordinator's controller its saved state; returns the decision period to go on from (0: fresh)."""
    if coordinator.restored_control is None:
        return 0
    period, state = coordinator.restored_control
    restore_plain_state(controller, state)
    controller.judged.clear()  # judged anew from reports to this process: decisions wait for them, as at a start
    return period
