"""The `star` flags: one per config field, a short `--help`, a full `--help-all`, and a
did-you-mean line for old or misspelled spellings."""

from __future__ import annotations

import argparse
import types

import pytest

import star.launch
from star.child_configs import coordinator_config, job_as_run, ps_config, worker_config
from star.ps_server.config import PSConfig
from star.cli import build_parser, main
from star.cli_args import config_fields, option_for
from star.cli_children import daemon_config
from star.cli_names import JOB_COMMON, SIM_COMMON, short_names
from star.config import JobConfig, from_dict, to_toml
from star.coordinator_config import CoordinatorConfig
from star.sim.config import SimConfig
from star.tasks import get_task
from star.worker.config import WorkerConfig

CONFIG_COMMANDS = {"launch": (JobConfig, JOB_COMMON), "node": (JobConfig, JOB_COMMON), "sim": (SimConfig, SIM_COMMON),
                   "ps": (PSConfig, ()), "worker": (WorkerConfig, ()), "coordinator": (CoordinatorConfig, ())}
NOT_FIELDS = {"-h", "--help", "--help-all", "--config", "--quiet", "--ready-file", "--job"}


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(CONFIG_COMMANDS))
def test_every_config_field_has_exactly_one_option(command):
    cls, common = CONFIG_COMMANDS[command]
    parser = _subcommands()[command]
    flags = option_for(cls, common)
    for f in config_fields(cls):
        actions = [a for a in parser._actions if a.dest == f.dotted]
        assert len(actions) == 1, f.dotted
        expected = [flags[f.dotted]]
        if isinstance(actions[0], argparse.BooleanOptionalAction):  # a switch: its one name, and `--no-` that name
            expected.append("--no-" + flags[f.dotted][2:])
        assert actions[0].option_strings == expected, f.dotted
    others = {s for a in parser._actions for s in a.option_strings} - NOT_FIELDS
    assert len(others) == sum(len(a.option_strings) for a in parser._actions if a.dest in flags)


@pytest.mark.parametrize("cls, common", [(JobConfig, JOB_COMMON), (SimConfig, SIM_COMMON)])
def test_a_nested_field_without_a_short_name_is_spelled_as_its_toml_path(cls, common):
    short = short_names(common)
    nested = [f.dotted for f in config_fields(cls) if "." in f.dotted and f.dotted not in short]
    assert nested and all(option_for(cls, common)[d] == f"--{d}" for d in nested)
    assert option_for(JobConfig, JOB_COMMON)["control.detector.k"] == "--control.detector.k"
    assert option_for(JobConfig, JOB_COMMON)["control.batching.speed_band"] == "--control.batching.speed_band"


def test_default_help_lists_the_common_settings_only(capsys):
    text = _help(capsys, "launch", "--help")
    listed = {word.rstrip(",") for line in text.splitlines() for word in line.split() if word.startswith("-")}
    common = {option_for(JobConfig, JOB_COMMON)[d] for _, members in JOB_COMMON for d, _ in members}
    switches = {"--no-" + flag[2:] for flag in common if flag.startswith("--control-") or flag == "--tensorboard"}
    assert listed - {"--control.detector.k", "--help-all"} == common | switches | {"-h", "--help", "--config", "--quiet"}
    assert 20 <= len(common) <= 30 and len(text.splitlines()) < 100
    for group in ("job:", "synchronisation:", "slowdown trace:", "training:", "control switches", "output:"):
        assert group in text
    assert "--plan.late_policy" not in text and "--help-all" in text


@pytest.mark.parametrize("command, option", [("launch", "--help-all"), ("sim", "--help-all"), ("coordinator", "--help")])
def test_help_all_lists_every_field(command, option, capsys):
    """A daemon's own `--help` is already complete: it has no common settings to pick."""
    cls, common = CONFIG_COMMANDS[command]
    text = _help(capsys, command, option)
    flags = option_for(cls, common)
    missing = [flag for flag in flags.values() if f"  {flag} " not in text and f"  {flag}," not in text and f"  {flag}\n" not in text]
    assert not missing
    if command == "launch":
        for section in ("[plan]:", "[control.detector]:", "[control.batching]:", "[security]:", "[node]:"):
            assert section in text


def _every_field_listed(command: str) -> argparse.ArgumentParser:
    """The parser `--help-all` prints (the daemons' own parsers already list every field)."""
    parser = _subcommands()[command]
    help_all = next((a for a in parser._actions if "--help-all" in a.option_strings), None)
    if help_all is None:
        return parser
    full = argparse.ArgumentParser()
    help_all.build(full, True)
    return full


@pytest.mark.parametrize("command", sorted(CONFIG_COMMANDS))
def test_every_option_says_what_it_means_and_its_default(command):
    fields = {f.dotted for f in config_fields(CONFIG_COMMANDS[command][0])}
    actions = [a for a in _every_field_listed(command)._actions if a.dest in fields]
    assert len(actions) == len(fields)
    for action in actions:
        text = (action.help or "").lower()
        assert len(text) > len("(default: x)") and "default" in text, (action.dest, action.help)


@pytest.mark.parametrize("argv, meant", [
    (["launch", "--plan-mode", "kofn"], "--mode"),
    (["launch", "--plan.mode", "kofn"], "--mode"),
    (["launch", "--trace-path", "t.csv"], "--trace"),
    (["launch", "--control.lost-after-s", "3"], "--control.lost_after_s"),
    (["launch", "--control-detector-k", "3"], "--control.detector.k"),
    (["launch", "--max_time_s", "3"], "--max-time-s"),
    (["launch", "--control.selector-kind", "learned"], "--control.selector_kind"),
    (["launch", "--no-control-traffic-guard"], "--no-control.traffic.guard"),
    (["node", "--optimizer.lr", "0.1"], "--lr"),
    (["sim", "--trace-path", "t.csv"], "--trace"),
    (["coordinator", "--control-decision-period-s", "1"], "--control.decision_period_s"),
])
def test_an_old_spelling_gets_a_did_you_mean_error(argv, meant, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in captured.out + captured.err
    assert f"unknown option {argv[1]}; did you mean {meant}?" in lines[0]


@pytest.mark.parametrize("typo, meant", [("--wrokers", "--workers"), ("--stalenes", "--staleness"), ("--trace-worker", "--trace-workers")])
def test_a_misspelled_flag_gets_the_closest_one(typo, meant, capsys):
    assert main(["launch", typo, "2"]) == 2
    assert f"did you mean {meant}?" in capsys.readouterr().err


def test_a_flag_is_not_abbreviated(capsys):
    assert main(["launch", "--work", "2"]) == 2
    assert "unknown option --work" in capsys.readouterr().err


def test_launch_starts_every_daemon_with_the_job_file_and_it_derives_the_config_of_its_pure_function(tmp_path, monkeypatch):
    """The launcher's children get `--job` and the runtime facts (switches off included, restarts too):
    each command line parses, and derives what star.child_configs gives."""
    trace = tmp_path / "t.csv"
    trace.write_text("iteration,worker,factor\n0,0,2\n")
    config = from_dict(JobConfig, {
        "workers": 2, "target": 0.5, "batch_size": 8, "metrics_port": 9000, "tensorboard": False, "stop_at_target": False,
        "max_workers": 3, "trace": {"path": str(trace), "workers": "1,0", "stretch": 0.5}, "plan": {"tree_fanout": 2},
        "control": {"amp": False, "selector": True, "traffic": {"guard": False, "pace": True, "relief": "tree"}},
        "placement": {"cpu_aware": False}})
    config = job_as_run(config, get_task(config.task))  # as star.launch writes it
    job_file = tmp_path / "config.toml"
    job_file.write_text(to_toml(config))
    children: list[types.SimpleNamespace] = []

    def spawn(name, args):
        children.append(types.SimpleNamespace(name=name, args=args, restart_args=None))
        return children[-1]

    group = types.SimpleNamespace(log_dir=tmp_path, spawn=spawn)
    monkeypatch.setattr(star.launch, "_wait_ready", lambda *a: 1234)
    addresses = ["127.0.0.1:1", "127.0.0.1:3"]
    star.launch.start_coordinator(group, job_file, "127.0.0.1", addresses, 1.0)
    star.launch.start_workers(group, job_file, [0, 1], "127.0.0.1:2", "127.0.0.1")
    star.launch.start_ps_daemons(group, lambda i, ready: star.launch.ps_command(job_file, "127.0.0.1", i, ready, tmp_path / "c", "job"),
                                 [1], "127.0.0.1", 1.0, tmp_path / "c")
    parsers = _subcommands()

    def derived(argv):
        args, unknown = parsers[argv[0]].parse_known_args(argv[1:])
        assert unknown == [] and args.job == str(job_file), argv
        return daemon_config(argv[0], args)

    coordinator, worker0, worker1, ps = children
    assert derived(coordinator.args) == coordinator_config(config, ps_addresses=addresses, host="127.0.0.1")
    assert derived(coordinator.restart_args) == coordinator_config(config, ps_addresses=addresses, host="127.0.0.1", port=1234,
                                                                   restore=True)
    assert derived(coordinator.args).control.traffic.guard is False and derived(coordinator.args).control.amp is False
    for w, worker in enumerate((worker0, worker1)):
        assert derived(worker.args) == derived(worker.restart_args) == worker_config(
            config, worker_id=w, coordinator="127.0.0.1:2", relay_host="127.0.0.1")
    expected_ps = ps_config(config, ps_index=1, host="127.0.0.1", job_id="job", checkpoint_dir=str(tmp_path / "c"))
    assert derived(ps.args) == expected_ps
    assert derived(ps.restart_args) == ps_config(config, ps_index=1, host="127.0.0.1", job_id="job",
                                                 checkpoint_dir=str(tmp_path / "c"), port=1234, restore_dir=str(tmp_path / "c"))
