"""The selector's staleness penalty comes from the task's calibration, unless the config sets one."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from star.errors import ConfigError
from star.plan import ssgd
from star.policy.controller import ControlConfig, with_task_staleness
from star.policy.selector import DEFAULT_STALENESS_PENALTY, HeuristicSelector, SelectorConfig, with_task_penalty
from star.sim.config import sim_config
from star.sim.engine import Simulation
from star.task_calibration import calibration_path, staleness_penalty


def test_a_built_in_task_with_a_shipped_calibration_gives_its_measured_penalty():
    shipped = resources.files("star.sim").joinpath("calibrations", "digits.toml").read_text()
    assert staleness_penalty("digits") == tomllib.loads(shipped)["convergence"]["staleness_penalty"] > 0


def test_a_task_without_a_calibration_gives_none_and_the_selector_the_default():
    assert calibration_path("no-such-task") is None and staleness_penalty("no-such-task") is None
    assert with_task_penalty(SelectorConfig(), None).penalty == DEFAULT_STALENESS_PENALTY


def test_the_tasks_penalty_fills_only_an_unset_one():
    assert with_task_penalty(SelectorConfig(), 0.9).penalty == 0.9
    assert with_task_penalty(SelectorConfig(staleness_penalty=0.3), 0.9).penalty == 0.3  # the user's wins
    assert with_task_staleness(ControlConfig(), 0.9).selection.penalty == 0.9


def test_a_negative_penalty_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="control.selection.staleness_penalty"):
        SelectorConfig(staleness_penalty=-0.1)


@pytest.mark.parametrize("penalty, expected", [(0.15, "kofn"), (0.88, None)])
def test_a_mild_straggler_sends_the_selector_to_k_of_n_only_where_stale_updates_are_cheap(penalty, expected):
    """1.5x straggler, even batches: k-of-N's 3 fresh + 1 stale gradient per round beats SSGD by 18% at 0.15,
    and loses to it at digits' measured 0.88."""
    selector = HeuristicSelector(SelectorConfig(staleness_penalty=penalty))
    decision = selector.decide(10, ssgd(range(4), epoch=1), {0: 0.3, 1: 0.3, 2: 0.3, 3: 0.45}, {w: 64 for w in range(4)},
                               frozenset({3}))
    assert (decision.plan.label if decision.plan else None) == expected


@pytest.mark.parametrize("convergence, expected", [({"staleness_penalty": 0.7}, 0.7), ({}, 0.15)])
def test_the_simulated_selector_weighs_staleness_as_the_simulated_task_does(convergence, expected):
    sim = Simulation(sim_config({"workers": 4, "plan": {"mode": "auto"}, "convergence": convergence}))
    assert sim.control.selection.penalty == expected


def test_a_task_without_a_shipped_calibration_is_refused_naming_the_task_and_the_way_out():
    from star.task_calibration import shipped_calibration

    assert shipped_calibration("digits").endswith("digits.toml")
    with pytest.raises(ConfigError, match="task='gpt-1m'.*--calibration"):
        shipped_calibration("gpt-1m")
