"""The `star` flags: one per config field, a short `--help`, a full `--help-all`, and a
did-you-mean line for old or misspelled spellings."""

from __future__ import annotations

import argparse
import types

import pytest

import star.launch
from star.ps_server.config import PSConfig
from star.cli import build_parser, main
from star.cli_args import config_fields, option_for
from star.cli_names import JOB_COMMON, SIM_COMMON, short_names
from star.config import JobConfig, OptimizerConfig, from_dict
from star.coordinator import CoordinatorConfig
from star.sim.config import SimConfig
from star.worker.worker import WorkerConfig

CONFIG_COMMANDS = {"launch": (JobConfig, JOB_COMMON), "node": (JobConfig, JOB_COMMON), "sim": (SimConfig, SIM_COMMON),
                   "ps": (PSConfig, ()), "worker": (WorkerConfig, ()), "coordinator": (CoordinatorConfig, ())}
NOT_FIELDS = {"-h", "--help", "--help-all", "--config", "--quiet", "--ready-file"}


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


def test_launch_builds_daemon_argv_that_the_daemons_accept(tmp_path, monkeypatch):
    """The launcher's children get argv of each daemon's own flags (switches off included)."""
    trace = tmp_path / "t.csv"
    trace.write_text("iteration,worker,factor\n0,0,2\n")
    config = from_dict(JobConfig, {
        "workers": 2, "target": 0.5, "batch_size": 8, "metrics_port": 9000, "tensorboard": False, "stop_at_target": False,
        "max_workers": 3, "trace": {"path": str(trace), "workers": "1,0", "stretch": 0.5}, "plan": {"tree_fanout": 2},
        "control": {"amp": False, "selector": True, "traffic": {"guard": False, "pace": True, "relief": "tree"}},
        "placement": {"cpu_aware": False}})
    spawned: list[list[str]] = []
    group = types.SimpleNamespace(log_dir=tmp_path, spawn=lambda name, args: spawned.append(args) or types.SimpleNamespace())
    monkeypatch.setattr(star.launch, "_wait_ready", lambda *a: 1234)
    star.launch.start_coordinator(group, config, "127.0.0.1", ["127.0.0.1:1"], tmp_path, 1.0)
    star.launch.start_workers(group, config, [0, 1], "127.0.0.1:2")
    optimizer = OptimizerConfig(name="sgd", lr=0.1, momentum=0.9)
    spawned.append(star.launch.ps_command(config, optimizer, "127.0.0.1", 0, tmp_path / "r", tmp_path / "c", "job"))
    parsers = _subcommands()
    for argv in spawned:
        args, unknown = parsers[argv[0]].parse_known_args(argv[1:])
        assert unknown == [], argv
    assert "--no-control.traffic.guard" in spawned[0] and "--no-control.amp" in spawned[0]
