"""A DDP run refuses the options only parameter servers can honour, naming them (exit 2 from the CLI)."""

from __future__ import annotations

import pytest

from star.cli import main
from star.config import ConfigError, JobConfig, PlanConfig, from_dict
from star.ddp import rank_env
from star.ddp_rules import ddp_refusal, ps_only_options


def test_ps_only_options_are_found_at_any_depth_and_none_counts_as_absent():
    asked = {"plan": {"mode": "ddp", "k": 3, "groups": None}, "workers": 4, "resume": "x"}
    assert ps_only_options(asked) == [("plan.k", 3), ("resume", "x")]


def test_refusal_only_applies_to_ddp_runs():
    assert ddp_refusal({"plan": {"mode": "kofn", "k": 3}}) is None
    assert ddp_refusal({"plan": {"mode": "ddp"}, "workers": 2}) is None
    field, value, reason = ddp_refusal({"plan": {"mode": "ddp", "staleness": 2}})
    assert (field, value) == ("plan.staleness", 2) and "parameter servers" in reason


@pytest.mark.parametrize("plan", [{"k": 2}, {"groups": "0;1"}, {"staleness": 5}])
def test_a_ddp_job_config_with_a_ps_option_fails_naming_it(plan):
    with pytest.raises(ConfigError) as error:
        from_dict(JobConfig, {"workers": 2, "plan": {"mode": "ddp", **plan}})
    assert error.value.field == f"plan.{next(iter(plan))}"


def test_a_plain_ddp_job_config_is_accepted_but_has_no_sync_plan():
    config = from_dict(JobConfig, {"workers": 3, "plan": {"mode": "ddp"}})
    assert config.plan.mode == "ddp"
    with pytest.raises(ConfigError, match="plan.mode"):
        PlanConfig(mode="ddp").build(3)


@pytest.mark.parametrize("flags, field", [(["--k", "1"], "plan.k"), (["--staleness", "2"], "plan.staleness"),
                                          (["--groups", "0;1"], "plan.groups"), (["--ps", "2"], "ps"),
                                          (["--wire", "bfloat16"], "wire")])
def test_cli_ddp_with_a_ps_option_exits_2_naming_it_even_at_its_default(flags, field, capsys, tmp_path):
    code = main(["launch", "--mode", "ddp", "--workers", "2", "--out", str(tmp_path), *flags])
    err = capsys.readouterr().err
    assert code == 2
    assert field in err and "Traceback" not in err
    assert not (tmp_path / "logs").exists()  # refused before anything started


@pytest.mark.parametrize("task", ["gpt-7m", "nosuchtask"])
def test_cli_ddp_with_an_unknown_task_or_preset_exits_2_naming_it(task, capsys, tmp_path):
    code = main(["launch", "--mode", "ddp", "--workers", "2", "--task", task, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and task in err and "Traceback" not in err


def test_rank_environment_is_torchruns():
    env = rank_env("127.0.0.1", 29500, 1, 4)
    assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")} == {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4"}


class _Exited:
    def __init__(self, code):
        self.code = code

    def poll(self):
        return self.code


@pytest.mark.parametrize("result_written", [True, False])
def test_a_rank_that_dies_after_the_result_is_written_is_reported_not_failed(tmp_path, capsys, result_written):
    """gloo's teardown can abort a rank (exit -6) after rank 0 wrote result.json: the job's outcome stands.
    Before the result, the same exit fails the job."""
    from star.ddp import _wait
    from star.processes import LaunchError

    log = tmp_path / "worker1.log"
    log.write_text("terminate called without an active exception\n")
    if result_written:
        (tmp_path / "result.json").write_text("{}")
    ranks = [(0, _Exited(0), tmp_path / "worker0.log"), (1, _Exited(-6), log)]
    if result_written:
        _wait(ranks, tmp_path, None, timeout_s=5.0)
        assert "rank 1 exited with code -6 after the result was written" in capsys.readouterr().err
    else:
        with pytest.raises(LaunchError, match="rank 1 exited with code -6"):
            _wait(ranks, tmp_path, None, timeout_s=5.0)


@pytest.mark.parametrize("asked, field", [
    ({"control": {"batch": True}}, "control.batch"), ({"control": {"amp": False, "batch": True}}, "control.amp"),
    ({"max_workers": 6}, "max_workers"), ({"metrics_port": 0}, "metrics_port"),
])
def test_a_ddp_run_refuses_what_only_the_coordinator_does_naming_the_first_option(asked, field):
    """DDP has no coordinator: live decisions, elastic admission and its metrics endpoints would be ignored."""
    refusal = ddp_refusal({"plan": {"mode": "ddp"}, **asked})
    assert refusal is not None and refusal[0] == field and "coordinator" in refusal[2]
