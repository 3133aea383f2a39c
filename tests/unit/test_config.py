"""Configs: TOML and flags map onto frozen dataclasses; bad values fail naming the field."""

from __future__ import annotations

import argparse

import pytest

from star.cli import main
from star.cli_args import add_config_args, config_from_args
from star.cli_names import JOB_COMMON
from star.config import ConfigError, JobConfig, from_dict, load_toml, to_toml
from star.tta import EvalPoint, time_to_target


@pytest.mark.parametrize(
    "data, field",
    [
        ({"workers": 0}, "workers"),
        ({"ps": 0}, "ps"),
        ({"max_time_s": -1}, "max_time_s"),
        ({"nonfinite": "ignore"}, "nonfinite"),
        ({"plan": {"mode": "fastest"}}, "plan.mode"),
        ({"plan": {"k": 9}}, "plan.k"),
        ({"plan": {"groups": "0,1;x"}}, "plan.groups"),
        ({"plan": {"mode": "grouped", "groups": "0,1;2"}}, "plan."),
        ({"optimizer": {"lr": -0.1}}, "optimizer.lr"),
        ({"optimizer": {"name": "lbfgs"}}, "optimizer.name"),
        ({"optimizer": {"async_momentum": "off"}}, "optimizer.async_momentum"),
        ({"trace": {"stretch": 0}}, "trace.stretch"),
        ({"trace": {"path": "/nonexistent.csv"}}, "trace.path"),
        ({"workers": "four"}, "workers"),
        ({"plan": {"colour": "red"}}, "plan.colour"),
        ({"target": float("nan")}, "target"),
        ({"target": float("inf")}, "target"),
        ({"batch_size": (1 << 24) + 1}, "batch_size"),
        ({"workers": 65537}, "workers"),
        ({"workers": 4, "max_workers": 70000}, "max_workers"),
        ({"plan": {"mode": "ssgd", "k": 2}}, "plan.k"),
        ({"plan": {"mode": "auto", "groups": "0,1;2,3"}}, "plan.groups"),
        ({"plan": {"mode": "asgd", "staleness": 5}}, "plan.staleness"),
        ({"trace": {"workers": "0,1,2,3"}}, "trace.workers"),
        ({"trace": {"stretch": 0.5}}, "trace.stretch"),
        ({"node": {"rank": 2, "nodes": 2}}, "node.rank"),
    ],
)
def test_bad_config_fails_naming_the_field(data, field):
    with pytest.raises(ConfigError) as error:
        from_dict(JobConfig, data)
    assert field in str(error.value)


@pytest.mark.parametrize("plan", [{"mode": "kofn", "k": 2}, {"mode": "grouped", "groups": "0,1;2,3"},
                                  {"mode": "ssp", "staleness": 5}])
def test_a_plan_shape_option_is_accepted_by_the_mode_that_reads_it(plan):
    assert from_dict(JobConfig, {"workers": 4, "plan": plan}).plan.build(4).label in ("kofn", "grouped", "ssp")


def test_a_directory_given_as_the_trace_is_refused_as_one(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        from_dict(JobConfig, {"trace": {"path": str(tmp_path)}})


def test_toml_round_trip_keeps_every_field(tmp_path):
    config = from_dict(JobConfig, {"workers": 3, "plan": {"mode": "kofn", "k": 2}, "optimizer": {"lr": 0.2}})
    path = tmp_path / "job.toml"
    path.write_text(to_toml(config))
    assert from_dict(JobConfig, load_toml(path)) == config


def test_flags_override_toml(tmp_path):
    parser = argparse.ArgumentParser()
    add_config_args(parser, JobConfig, JOB_COMMON)
    base = {"workers": 8, "plan": {"mode": "asgd"}}
    trace = tmp_path / "t.csv"
    trace.write_text("iteration,worker,factor\n0,0,1.0\n10,0,2.0\n")
    args = parser.parse_args(["--mode", "kofn", "--k", "3", "--trace", str(trace), "--trace-stretch", "0.5"])
    config = config_from_args(JobConfig, args, base)
    assert (config.workers, config.plan.mode, config.plan.k, config.trace.stretch) == (8, "kofn", 3, 0.5)


@pytest.mark.parametrize("flag", ["--faults.max_restarts", "--faults.max-restarts", "--faults-max-restarts"])
def test_a_nested_flag_is_its_toml_path_and_other_spellings_are_pointed_to_it(flag, capsys):
    """The one spelling sets the field; an old one is refused with a line naming the one spelling."""
    if flag == "--faults.max_restarts":
        parser = argparse.ArgumentParser()
        add_config_args(parser, JobConfig, JOB_COMMON)
        assert config_from_args(JobConfig, parser.parse_args([flag, "0"])).faults.max_restarts == 0
    else:
        assert main(["launch", flag, "0"]) == 2
        assert f"unknown option {flag}; did you mean --faults.max_restarts?" in capsys.readouterr().err


def test_plan_config_builds_the_documented_defaults():
    job = from_dict(JobConfig, {"workers": 4, "plan": {"mode": "kofn"}})
    assert job.plan.build(4).quorum == (3,)
    grouped = from_dict(JobConfig, {"workers": 4, "plan": {"mode": "grouped"}}).plan.build(4)
    assert grouped.groups == ((0, 1), (2, 3))
    assert from_dict(JobConfig, {"plan": {"mode": "ssp"}}).plan.build(4).staleness_bound == 2


@pytest.mark.parametrize(
    "metrics, higher, expected",
    [([0.5, 0.96, 0.97], True, 2.0), ([0.5, 0.9], True, None), ([3.0, 1.9, 1.5], False, 2.0), ([float("nan"), 0.99], True, 2.0)],
)
def test_time_to_target_is_the_first_evaluation_at_or_past_the_target(metrics, higher, expected):
    points = [EvalPoint(float(i + 1), i, m) for i, m in enumerate(metrics)]
    assert time_to_target(points, 0.95 if higher else 2.0, higher) == expected
