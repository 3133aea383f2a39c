"""The DDP baseline's evaluator follows STAR's evaluation rule: the same version grid, the same smoothed target."""

from __future__ import annotations

import pytest
import torch

from star.config import JobConfig, from_dict
from star.ddp_rank import Evaluations
from star.events import EventLog


class ScriptedTask:
    """Held-out losses in a given order, one per evaluation (lower is better)."""

    higher_is_better = False

    def __init__(self, losses: list[float]):
        self.losses = list(losses)

    def evaluate(self, model: torch.nn.Module) -> float:
        return self.losses.pop(0)


def evaluations(tmp_path, losses: list[float], every_updates: int = 2, smoothing: int = 3) -> Evaluations:
    config = from_dict(JobConfig, {"task": "digits", "workers": 2, "out": str(tmp_path),
                                   "evaluation": {"every_updates": every_updates, "smoothing": smoothing}})
    return Evaluations(ScriptedTask(losses), torch.nn.Linear(2, 1), config, 3.3, tmp_path, EventLog(tmp_path / "events.jsonl"))


def offered_versions(ev: Evaluations, steps: int) -> list[int]:
    """Offer versions 1..steps, the evaluator taking each snapshot at once; the versions it evaluated."""
    model = torch.nn.Linear(2, 1)
    for version in range(1, steps + 1):
        ev.offer(float(version), version, model)
        ev.evaluate_one()
    return [p.version for p in ev.curve.points]


@pytest.mark.parametrize("every_updates, versions", [(2, [1, 2, 4, 6, 8]), (3, [1, 3, 6]), (1, list(range(1, 9)))])
def test_the_ddp_evaluator_evaluates_the_versions_of_stars_grid(tmp_path, every_updates, versions):
    assert offered_versions(evaluations(tmp_path, [5.0] * 10, every_updates), 8) == versions


def test_a_grid_version_waits_while_the_ddp_evaluator_is_busy_with_the_one_before(tmp_path):
    """Under load (CI: two ranks and the evaluator on 2 cores) step 4 ended before the evaluator had taken
    version 2, and was skipped: the curve read versions 1, 2, 5, off STAR's grid."""
    ev = evaluations(tmp_path, [5.0] * 10)
    model = torch.nn.Linear(2, 1)
    ev.offer(1.0, 1, model)
    ev.evaluate_one()  # version 1 taken; the evaluator is busy with it while steps 2-4 end
    for version in (2, 3, 4):
        ev.offer(float(version), version, model)
    while ev.evaluate_one():
        pass
    assert [p.version for p in ev.curve.points] == [1, 2, 4]


def test_a_ddp_evaluator_far_behind_skips_a_third_grid_version_and_takes_the_next_one_due(tmp_path):
    ev = evaluations(tmp_path, [5.0] * 10)
    model = torch.nn.Linear(2, 1)
    for version in (1, 2, 3, 4):  # 1 and 2 wait; 4 finds two waiting and is skipped
        ev.offer(float(version), version, model)
    ev.evaluate_one()
    ev.evaluate_one()
    ev.offer(5.0, 5, model)
    ev.evaluate_one()
    assert [p.version for p in ev.curve.points] == [1, 2, 5]


def test_the_ddp_target_needs_the_mean_of_the_last_three_evaluations_as_in_star(tmp_path):
    """Losses at versions 1, 2, 4, 6, 8, 10: one evaluation under 3.3 (at 6) is not the target; the
    mean of 6, 8 and 10 is (3.29 + 3.28 + 3.28) / 3 = 3.283."""
    ev = evaluations(tmp_path, [4.7, 4.2, 3.4, 3.29, 3.28, 3.28])
    offered_versions(ev, 10)
    assert ev.tta_s == 10.0


def test_the_last_steps_snapshot_is_evaluated_when_the_evaluator_stops(tmp_path):
    ev = evaluations(tmp_path, [5.0, 4.0])
    model = torch.nn.Linear(2, 1)
    ev.offer(1.0, 1, model)
    ev.evaluate_one()
    ev.offer(3.0, 3, model, final=True)  # off the grid (next due: 2), but the run's last state
    ev.finish()
    assert [(p.version, p.metric) for p in ev.curve.points] == [(1, 5.0), (3, 4.0)]
