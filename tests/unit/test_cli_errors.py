"""Every `star` subcommand answers bad input with one line naming the flag and value, exit code 2, no traceback.

The subcommands are read from the parser, so a subcommand added later is covered by the
same bad inputs (each tried where the subcommand has that flag).
"""

from __future__ import annotations

import argparse
import signal

import pytest

from star.cli import build_parser, main

RUNAWAY_S = 60  # a bad input must be refused before any work starts; this bounds a case that is not


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def _cases(tmp_path) -> list[tuple[str, list[str], str]]:
    """(subcommand, argv, text the error line must contain) for every bad input a subcommand takes."""
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("a,b,c\n1,2,3\n")
    missing = str(tmp_path / "missing.csv")
    bad_inputs = [
        ("--task", "nope"),
        ("--trace", missing),
        ("--trace", str(bad_csv)),
        ("--trace-path", missing),
        ("--trace.path", missing),
        ("--job", str(tmp_path / "missing.toml")),
        ("--traces", missing),
        ("--traces", str(bad_csv)),
        ("--config", str(tmp_path / "missing.toml")),
        ("--seed", "nope"),
        ("--workers", "0"),
    ]
    cases = []
    for name, parser in _subcommands().items():
        flags = _flags(parser)
        required = []  # other required flags, set to harmless values
        for action in parser._actions:
            if action.required and action.option_strings:
                required += [action.option_strings[0], str(tmp_path / "out") if action.dest == "out" else "synthetic"]
        cases.append((name, [name, "--no-such-flag", *required], "--no-such-flag"))
        for flag, value in bad_inputs:
            if flag in flags:
                argv = [name, *required, flag, value] if flag not in required else [name, *_without(required, flag), flag, value]
                cases.append((name, argv, value))
    return cases


def _without(args: list[str], flag: str) -> list[str]:
    i = args.index(flag)
    return args[:i] + args[i + 2:]


def _timeout(signum, frame):
    raise TimeoutError("the bad input was not refused before work started")


def test_every_subcommand_refuses_bad_input_in_one_line_with_exit_code_2_and_no_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("STAR_PARENT_PID", raising=False)
    cases = _cases(tmp_path)
    assert {c[0] for c in cases} >= {"launch", "node", "sim", "bench", "worker", "coordinator", "ps"}
    assert sum(1 for c in cases if c[0] == "launch") >= 6  # --task, --trace x2, --config, --seed, --workers
    previous = signal.signal(signal.SIGALRM, _timeout)
    failures = []
    try:
        for name, argv, named in cases:
            signal.alarm(RUNAWAY_S)
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own errors
                code = exc.code
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # star node installs its own
            out, err = capsys.readouterr()
            lines = [line for line in err.splitlines() if line.strip()]
            if code != 2 or "Traceback" in out + err or not lines or named not in lines[-1]:
                failures.append(f"star {' '.join(argv)} -> exit {code}, stderr: {err.strip()[-300:]!r}")
            elif not lines[-1].startswith("usage") and not lines[0].startswith("usage") and len(lines) != 1:
                failures.append(f"star {' '.join(argv)} -> {len(lines)} lines on stderr: {err!r}")
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("argv", [["launch", "--task", "digits", "--trace"], ["sim", "--trace"]])
def test_a_missing_trace_file_is_named_with_its_flag(tmp_path, capsys, argv):
    missing = str(tmp_path / "missing.csv")
    assert main([*argv, missing, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "trace" in err and missing in err and "no such file" in err.lower(), err


def _four_worker_trace(tmp_path):
    path = tmp_path / "four.csv"
    path.write_text("iteration,worker,factor\n" + "".join(f"0,{w},1.0\n10,{w},2.0\n" for w in range(4)))
    return str(path)


@pytest.mark.parametrize("mapping, problem", [("0,1,2", "one entry per run worker"), ("0,1,2,7", "not in trace"),
                                              ("0,x,2,3", "not an integer")])
@pytest.mark.parametrize("argv", [["launch", "--task", "digits", "--workers", "4"], ["sim", "--workers", "4"],
                                  ["bench", "--sim", "--workers", "4"]])
def test_a_bad_trace_worker_mapping_is_refused_before_any_process_starts(tmp_path, capsys, argv, mapping, problem):
    """Each worker daemon refused it on its own before: the launcher restarted them until the job failed, ~20 s on."""
    trace_flag = "--traces" if argv[0] == "bench" else "--trace"
    out = tmp_path / "out"
    assert main([*argv, trace_flag, _four_worker_trace(tmp_path), "--trace-workers", mapping, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and mapping in err and problem in err, err
    assert not (out / "logs").exists()


@pytest.mark.parametrize("argv, named", [
    (["--workers", "8", "--trace-workers", "0,1,2,3"], "--trace-workers='0,1,2,3': trace_workers: needs one entry per run worker (8)"),
    (["--strategies", "ssgd,nope"], "plan.mode='nope'"), (["--task", "nope"], "--task='nope'"),
    (["--repeats", "0"], "--repeats=0"), (["--workers", "0"], "--workers=0"), (["--trace-stretch", "-1"], "trace.stretch=-1.0"),
    (["--level", "2"], "--level=2.0"),
])
def test_the_strategies_benchmark_refuses_bad_input_before_its_first_run(tmp_path, capsys, argv, named):
    """Before, a bad strategy name ended the benchmark after the clean run, and a bad mapping failed in the workers."""
    from benchmarks.strategies import main as strategies_main

    out = tmp_path / "out"
    assert strategies_main(["--trace", _four_worker_trace(tmp_path), *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and named in err, err
    assert not (out / "runs.csv").exists() and not (out / "clean").exists()


@pytest.mark.parametrize("argv, named", [
    (["--mid-start", "-5"], "--mid-start=-5"), (["--mid-start", "50", "--mid-end", "10"], "--mid-end=10"),
])
def test_the_strategies_benchmark_refuses_an_empty_or_negative_mid3x_window(tmp_path, capsys, argv, named):
    """Before, -5 ended in a traceback and 50..10 made the last worker slow from iteration 50 to the trace's end."""
    from benchmarks.strategies import main as strategies_main

    out = tmp_path / "out"
    assert strategies_main(["--trace", "mid3x", *argv, "--out", str(out)]) == 2
    assert named in capsys.readouterr().err
    assert not out.exists()


def test_an_output_directory_that_cannot_be_created_is_named_as_out(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["launch", "--task", "digits", "--out", str(blocker / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "out=" in err and "cannot be created" in err, err


@pytest.mark.parametrize("argv, named", [
    ([], "out=None"), (["--scenarios", "0", "--out", "OUT"], "scenarios=0"),
    (["--min-workers", "50", "--max-workers", "10", "--out", "OUT"], "max_workers=10"),
])
def test_train_selector_never_overwrites_the_shipped_model_by_default_and_checks_its_counts(tmp_path, capsys, argv, named):
    """Before, no --out rewrote star/policy/models/selector.json (even with --held-out -1), and a count of 0
    ended in a traceback after training started."""
    argv = [str(tmp_path / "m.json") if a == "OUT" else a for a in argv]
    assert main(["train-selector", *argv]) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()


def test_a_damaged_run_folder_is_named_by_star_report_in_one_line(tmp_path, capsys):
    (tmp_path / "result.json").write_text('{"task": "dig')  # cut short
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "result.json cannot be read" in err, err


@pytest.mark.parametrize("left, named", [("result.json", "result.json"), ("events.jsonl", "events.jsonl"),
                                          ("curve.csv", "curve.csv"), ("checkpoints/ps0/latest.json", "shard checkpoints")])
def test_a_launch_into_an_earlier_run_s_out_is_refused_and_leaves_its_files(tmp_path, capsys, left, named):
    """Before, a second launch into the same OUT deleted the first run's result, curve and events and
    wrote a new job's checkpoints over its checkpoint set, without a word."""
    earlier = tmp_path / left
    earlier.parent.mkdir(parents=True, exist_ok=True)
    earlier.write_text("the earlier run's\n")
    (tmp_path / "checkpoints").mkdir(exist_ok=True)
    (tmp_path / "checkpoints" / "manifest.json").write_text("{}")  # written at every start, trained or not
    assert main(["launch", "--task", "digits", "--workers", "1", "--ps", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds an earlier run" in err and named in err and "--overwrite" in err, err
    assert ("--resume" in err) == left.startswith("checkpoints"), err  # resuming is offered only where there is a checkpoint
    assert earlier.read_text() == "the earlier run's\n"


def test_a_job_that_failed_before_training_does_not_block_the_next_launch(tmp_path):
    """A job refused at start (a wrong CA) left a manifest and an empty event log: nothing to lose."""
    from star.cli_checks import check_out_free

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "manifest.json").write_text("{}")
    (tmp_path / "events.jsonl").write_text("")
    check_out_free("out", str(tmp_path), resume=None, overwrite=False)


def test_an_earlier_run_s_out_is_free_to_resume_that_run_or_with_overwrite(tmp_path):
    from star.cli_checks import check_out_free
    from star.config import ConfigError

    (tmp_path / "checkpoints" / "ps0").mkdir(parents=True)
    (tmp_path / "checkpoints" / "manifest.json").write_text("{}")
    (tmp_path / "checkpoints" / "ps0" / "latest.json").write_text("{}")
    (tmp_path / "result.json").write_text("{}")
    check_out_free("out", str(tmp_path), resume=str(tmp_path), overwrite=False)
    check_out_free("out", str(tmp_path), resume=str(tmp_path / "checkpoints"), overwrite=False)
    check_out_free("out", str(tmp_path), resume=None, overwrite=True)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ConfigError, match="holds an earlier run"):  # resuming another run into this one's OUT
        check_out_free("out", str(tmp_path), resume=str(other), overwrite=False)
    check_out_free("out", str(tmp_path / "fresh"), resume=None, overwrite=False)  # a new folder is always free


def test_a_checkpoint_dir_outside_out_with_shard_checkpoints_counts_as_an_earlier_run(tmp_path):
    from star.cli_checks import check_out_free
    from star.config import ConfigError

    elsewhere = tmp_path / "ckpt"
    (elsewhere / "ps1").mkdir(parents=True)
    (elsewhere / "manifest.json").write_text("{}")
    (elsewhere / "ps1" / "latest.json").write_text("{}")
    with pytest.raises(ConfigError, match="shard checkpoints in"):
        check_out_free("out", str(tmp_path / "run"), resume=None, overwrite=False, checkpoint_dir=str(elsewhere))
    check_out_free("out", str(tmp_path / "run"), resume=str(elsewhere), overwrite=False, checkpoint_dir=str(elsewhere))


def test_a_resume_into_the_same_out_keeps_the_earlier_run_s_curve_and_events_as_a_part(tmp_path):
    """Before, `--resume OUT --out OUT` deleted the stopped run's curve.csv and events.jsonl: half the job's history."""
    from star.launch import clear_run_files, earlier_part

    for name in ("result.json", "curve.csv", "events.jsonl"):
        (tmp_path / name).write_text(f"first run's {name}\n")
    clear_run_files(tmp_path, keep_as=earlier_part(tmp_path))
    assert (tmp_path / "part1" / "curve.csv").read_text() == "first run's curve.csv\n"
    assert not (tmp_path / "curve.csv").exists() and not (tmp_path / "result.json").exists()
    (tmp_path / "curve.csv").write_text("second run's\n")
    clear_run_files(tmp_path, keep_as=earlier_part(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part1", "part2"]
    (tmp_path / "events.jsonl").write_text("x\n")
    clear_run_files(tmp_path, keep_as=None)  # a fresh run (or --overwrite): deleted
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part1", "part2"]


def test_a_coordinator_without_parameter_servers_is_refused_in_one_line_before_writing_out(tmp_path, capsys):
    """It was a ValueError traceback (exit 1) that left events.jsonl and iterations.csv in OUT."""
    out = tmp_path / "run"
    assert main(["coordinator", "--task", "digits", "--workers", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "ps_addresses" in err, err
    assert not out.exists()


def test_a_refusal_points_resume_at_a_checkpoint_folder_outside_out(tmp_path):
    """With faults.checkpoint_dir elsewhere, `--resume OUT` would not find the checkpoints: the hint names their folder."""
    from star.cli_checks import check_out_free
    from star.config import ConfigError

    elsewhere = tmp_path / "ckpt"
    (elsewhere / "ps0").mkdir(parents=True)
    (elsewhere / "manifest.json").write_text("{}")
    (elsewhere / "ps0" / "latest.json").write_text("{}")
    with pytest.raises(ConfigError, match=f"--resume {elsewhere} continues it"):
        check_out_free("out", str(tmp_path / "run"), resume=None, overwrite=False, checkpoint_dir=str(elsewhere))


def test_star_node_refuses_resume_rather_than_clearing_the_checkpoints_it_names(tmp_path):
    """star node does not implement --resume; it accepted it, then cleared its shards' checkpoints at start."""
    from star.config import ConfigError, JobConfig
    from star.node import run_node

    (tmp_path / "checkpoints" / "ps0").mkdir(parents=True)
    kept = tmp_path / "checkpoints" / "ps0" / "latest.json"
    kept.write_text("{}")
    with pytest.raises(ConfigError, match="resume"):
        run_node(JobConfig(out=str(tmp_path), resume=str(tmp_path)), environ={})
    assert kept.exists()
