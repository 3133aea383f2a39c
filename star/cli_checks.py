"""Boundary checks for `star` commands: a user's mistake becomes one line naming the flag and value.

Anything a command line names that must exist or parse (a task, a trace file) is checked
here before any process starts, so `star launch --task nope` fails in a second with exit
code 2 instead of a traceback from a child. `USER_ERRORS` are the exceptions `star.cli.main`
reports as one line (exit 2) should one escape a handler anyway.
"""

from __future__ import annotations

from star.checkpoint import CheckpointError, resolve_checkpoint_dir
from star.config import ConfigError
from star.tasks.registry import TaskSpecError
from star.trace_values import TraceError

# Expected failures caused by what the user gave; any other exception is a bug and keeps its traceback.
USER_ERRORS = (ConfigError, TaskSpecError, TraceError, CheckpointError, FileNotFoundError, NotADirectoryError,
               IsADirectoryError, PermissionError)


def describe_user_error(exc: BaseException) -> str:
    """One line for an expected failure: its message, with the OS's wording for file errors."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return " ".join(str(exc).split()) or type(exc).__name__


def check_task(field_name: str, spec: str) -> None:
    """The task must load (a built-in name or an importable 'package.module:function')."""
    from star.tasks import get_task

    try:
        get_task(spec)
    except (TaskSpecError, ImportError) as exc:
        raise ConfigError(field_name, spec, describe_user_error(exc)) from None


def check_trace(field_name: str, path: str | None):
    """A trace file, when given, must exist and be a trace in one of the known formats. Returns it (a
    star.traces.Trace; None without a path), for the checks and lines that read it next."""
    if not path:
        return None
    from star.traces import load_trace

    try:
        return load_trace(path)
    except (TraceError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(field_name, path, describe_user_error(exc)) from None


def check_trace_workers(field_name: str, trace, trace_workers: str | None, num_workers: int) -> None:
    """`trace_workers` must name one worker of `trace` (check_trace's) per run worker (without it, run workers past
    the trace's replay nothing). Checked here because otherwise every worker daemon refuses it on its own, and the
    launcher restarts each a few times before the job fails, ~20 s later."""
    if trace is None or trace_workers is None:
        return
    try:
        trace.for_run_workers(num_workers, trace_workers)
    except TraceError as exc:
        raise ConfigError(field_name, trace_workers, describe_user_error(exc)) from None


def check_out_dir(field_name: str, path: str) -> None:
    """The output directory must exist or be creatable (created here): found now, not as a child's traceback."""
    from pathlib import Path

    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(field_name, path, f"cannot be created: {exc.strerror or exc}") from None


EARLIER_RUN_MARKERS = ("result.json", "events.jsonl", "curve.csv")  # what an earlier run leaves in OUT, beside checkpoints


def check_out_free(field_name: str, out: str, resume: str | None, overwrite: bool, checkpoint_dir: str | None = None) -> None:
    """A launch must not replace an earlier run's files (its result, events, checkpoints) without being asked:
    OUT holding them is refused unless the launch resumes that very run or says --overwrite. Empty files and a
    manifest without shard checkpoints (a job that failed before training) hold nothing to lose."""
    from pathlib import Path

    if overwrite:
        return
    out_path = Path(out)
    checkpoints = Path(checkpoint_dir) if checkpoint_dir else out_path / "checkpoints"
    found = [name for name in EARLIER_RUN_MARKERS if (out_path / name).is_file() and (out_path / name).stat().st_size > 0]
    saved = any(checkpoints.glob("ps*/latest.json"))
    if saved:
        found.append(f"shard checkpoints in {checkpoints}")
    if not found:
        return
    if resume is not None and resolve_checkpoint_dir(resume).resolve() == checkpoints.resolve():
        return  # continuing the run that is there: its files are the resumed job's
    where = checkpoints if checkpoint_dir else out  # --resume takes OUT only where its checkpoints are OUT/checkpoints
    resumable = f"--resume {where} continues it, " if saved and (checkpoints / "manifest.json").exists() else ""
    raise ConfigError(field_name, out, f"holds an earlier run ({', '.join(found)}): {resumable}--overwrite replaces it, "
                                       "or choose another --out")
