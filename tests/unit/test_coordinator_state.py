"""A restarted coordinator's recovery: the state file round trip, refusing a bad one, the plan from PS stats."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import grpc
import pytest

from star.coordinator import CoordinatorService
from star.coordinator_config import CoordinatorConfig
from star.coordinator_restore import restore_coordinator
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
from star.evaluator import CurveWriter
from star.tta import EvalPoint
from star.events import EventLog, read_events
from star.plan import kofn, ssgd
from star.policy.amp import AmpState, _WorkerAmp
from star.policy.controller import ControlConfig, Controller, for_strategy
from star.ps_watch import PsWatch
from star.rpc import star_pb2 as pb
from star.rpc.common import plan_to_proto


def _controller() -> Controller:
    return Controller(for_strategy(ControlConfig(), "auto"), 4, 32)


def _busy_controller() -> Controller:
    controller = _controller()
    controller.lost.add(3)
    controller.judged.update({0, 1, 2})
    controller.batch_sizes.update({0: 40, 1: 24})
    controller.detector.stragglers.add(1)
    controller.detector._slow_streak[1] = 3
    controller.amp.workers[1] = _WorkerAmp(AmpState.ON, baseline_s=0.002, speedup=1.4, last_toggle_period=7)
    controller.selector._last_switch = 17
    controller.base_plan = ssgd([0, 1, 2, 3], epoch=1)
    return controller


def test_policy_state_survives_a_state_file_round_trip(tmp_path):
    before = _busy_controller()
    write_state(tmp_path / STATE_FILE, {"period": 21, "controller": plain_state(before)})
    payload = load_state(tmp_path / STATE_FILE)
    after = _controller()
    restore_plain_state(after, payload["controller"])
    assert payload["period"] == 21
    assert after.lost == {3} and after.judged == {0, 1, 2} and after.batch_sizes == before.batch_sizes
    assert after.detector.stragglers == {1} and after.detector._slow_streak == {1: 3}
    assert after.amp.workers[1] == before.amp.workers[1] and after.amp.enabled(1)
    assert after.selector._last_switch == 17
    assert after.base_plan == before.base_plan
    assert after.config is not None and after.config == before.config  # settings are the new process's own


def test_state_file_is_replaced_atomically_and_leaves_no_temporary_file(tmp_path):
    write_state(tmp_path / STATE_FILE, {"period": 1})
    write_state(tmp_path / STATE_FILE, {"period": 2})
    assert load_state(tmp_path / STATE_FILE) == {"period": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE_FILE]


def test_missing_state_file_is_none(tmp_path):
    assert load_state(tmp_path / STATE_FILE) is None


@pytest.mark.parametrize("damage, message", [
    (lambda text: text[: len(text) // 2], "truncated or corrupt"),
    (lambda text: text.replace('"period": 5', '"period": 6'), "checksum mismatch"),
    (lambda text: json.dumps({"format": 99, "payload": {}}), "format 1"),
    (lambda text: "", "truncated or corrupt"),
])
def test_a_truncated_or_corrupt_state_file_is_refused_naming_the_file(tmp_path, damage, message):
    path = tmp_path / STATE_FILE
    write_state(path, {"period": 5, "controller": plain_state(_busy_controller())})
    path.write_text(damage(path.read_text()))
    with pytest.raises(StateFileError, match=message) as caught:
        load_state(path)
    assert str(path) in str(caught.value)


def test_a_state_file_naming_a_class_outside_star_is_refused(tmp_path):
    controller = _controller()
    with pytest.raises(StateFileError, match="not one of star's"):
        restore_plain_state(controller, {"detector": {"object": "os:system", "fields": {}}})


def _stats(index: int, plan=None, version: int = 10) -> pb.PsStats:
    stats = pb.PsStats(ps_index=index, version=version, plan_epoch=plan.epoch if plan else 0)
    if plan is not None:
        stats.plan_in_force.CopyFrom(plan_to_proto(plan))
    return stats


def test_the_plan_in_force_is_the_newest_any_ps_holds():
    old, new = ssgd([0, 1, 2], epoch=3), kofn([0, 1, 2], 2, epoch=4)
    unreachable = grpc.RpcError()
    assert plan_in_force([_stats(0, old), unreachable, _stats(1, new)]) == new
    assert plan_in_force([_stats(0, old)]).groups == old.groups
    assert plan_in_force([_stats(0), unreachable]) is None


class _FakePs:
    def __init__(self, stats):
        self.stats, self.configured = stats, []

    def wait_ready(self, timeout_s):
        pass

    def stats_each(self):
        return self.stats

    def configure_each(self, plan, only=None):
        self.configured.append((plan.epoch, sorted(only or ())))
        return {}


def _coordinator(tmp_path, stats):
    events = EventLog(tmp_path / "events.jsonl")
    return SimpleNamespace(ps=_FakePs(stats), service=CoordinatorService(CoordinatorConfig(workers=3), events),
                           events=events, out=tmp_path, ps_watch=PsWatch(), target=0.9,
                           task=SimpleNamespace(higher_is_better=True), restored_control=None, restored_points=[],
                           stop=threading.Event())


def test_a_restarted_coordinator_takes_the_plan_from_the_ps_and_state_and_curve_from_its_files(tmp_path):
    plan = kofn([0, 1, 2], 2, epoch=5)
    curve = CurveWriter(tmp_path / "curve.csv")
    for point in (EvalPoint(1.0, 3, 0.5), EvalPoint(2.0, 6, 0.95)):
        curve.add(point)
    curve.close()
    write_state(tmp_path / STATE_FILE, {"period": 9, "directives": {"1": {"amp": True, "batch_size": 40}},
                                        "controller": plain_state(_busy_controller()), "ps_watch": {}})
    older = ssgd([0, 1, 2], epoch=4)
    coordinator = _coordinator(tmp_path, [_stats(0, plan), _stats(1, older)])
    assert restore_coordinator(coordinator)
    service = coordinator.service
    assert service.plan == plan and service.state == "running" and service.tta_s == 2.0
    assert service.directives[1].amp and service.directives[1].batch_size == 40
    assert coordinator.restored_control[0] == 9 and [p.version for p in read_curve(tmp_path / "curve.csv")] == [3, 6]
    assert coordinator.ps.configured == [(5, [1])]  # the PS that lags gets the plan in force again
    restored = [e for e in read_events(tmp_path / "events.jsonl") if e["kind"] == "coordinator_restored"]
    assert restored[0]["state_file"] == "restored" and restored[0]["epoch"] == 5 and restored[0]["curve_points"] == 2


def test_a_corrupt_state_file_is_refused_and_the_coordinator_starts_from_the_ps_state_alone(tmp_path):
    (tmp_path / STATE_FILE).write_text('{"format": 1, "sha256": "0", "payl')
    plan = ssgd([0, 1, 2], epoch=2)
    coordinator = _coordinator(tmp_path, [_stats(0, plan), _stats(1, plan)])
    assert restore_coordinator(coordinator)
    assert coordinator.service.plan == plan and coordinator.restored_control is None and not coordinator.service.directives
    restored = [e for e in read_events(tmp_path / "events.jsonl") if e["kind"] == "coordinator_restored"][0]
    assert restored["state_file"].startswith("refused: ") and STATE_FILE in restored["state_file"]


def test_a_coordinator_that_crashed_before_the_first_plan_starts_the_job_afresh(tmp_path):
    coordinator = _coordinator(tmp_path, [_stats(0), _stats(1)])
    assert not restore_coordinator(coordinator)
    assert coordinator.service.plan is None
