"""The launcher's child processes: spawn, restart, stop in order, wait until serving.

Shared by `star launch` and the node agent (which starts and stops PSs on a host for
the coordinator), so neither imports the other.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from star.cli_names import flag_name


class LaunchError(RuntimeError):
    """The job could not run to its end (a child crashed, a daemon never came up)."""


class InterruptedBeforeResult(LaunchError):
    """Ctrl-C or SIGTERM stopped the job before it wrote result.json."""


def finish_result(out: Path, interrupted: bool, started_s: float, faults: dict | None = None, **facts) -> dict:
    """The job's OUT/result.json, completed with what only the launcher knows (wall time, whether it
    was interrupted, `facts`, and `faults` merged into its faults) and written back; refuses, saying
    why, when the job wrote none."""
    result_path = out / "result.json"
    if not result_path.exists():
        if interrupted:
            raise InterruptedBeforeResult("interrupted before a result was written")
        raise LaunchError(f"no result written to {result_path}")
    result = json.loads(result_path.read_text())
    if faults:
        result.setdefault("faults", {}).update(faults)
    result.update(wall_s=round(time.monotonic() - started_s, 3), interrupted=interrupted, out=str(out), **facts)
    result_path.write_text(json.dumps(result, indent=2))
    return result


PARENT_PID_ENV = "STAR_PARENT_PID"


@contextlib.contextmanager
def signals_stop_the_job():
    """Within it, Ctrl-C (SIGINT) and SIGTERM to a launcher raise KeyboardInterrupt once, so the job is
    shut down in order; a second signal during that shutdown is ignored rather than breaking it with a
    traceback. Yields the Event the first signal sets (for loops that might swallow the exception).
    Off the main thread, where Python cannot install handlers, it only yields the Event."""
    stop_requested = threading.Event()

    def on_signal(signum, frame):
        if stop_requested.is_set():
            return
        stop_requested.set()
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield stop_requested
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        signal.signal(signum, on_signal)
    try:
        yield stop_requested
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def die_with_parent() -> None:
    """Called first thing in every child: get SIGTERM when the launcher dies, even by SIGKILL.

    Done in the child (not as a Popen preexec_fn, which runs Python between fork and
    exec and can hang when the parent has gRPC threads).
    """
    parent = os.environ.get(PARENT_PID_ENV)
    if not parent:
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != int(parent):  # the launcher died before prctl took effect
        os._exit(143)


JOB_FILE = "config.toml"  # in a launcher's OUT: the job config every child derives its own from (star.child_configs)


def child_args(role: str, job_file: Path, **runtime: object) -> list[str]:
    """`star ROLE --job FILE` and the runtime facts the job file cannot hold, each as the flag of its config
    field (ps_index=1 -> --ps-index 1, a tuple comma-joined, True -> the bare switch; None is left out)."""
    args = [role, "--job", str(job_file)]
    for name, value in runtime.items():
        flag = "--" + flag_name(name, {})
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (tuple, list)):
            args += [flag, ",".join(map(str, value))]
        else:
            args += [flag, str(value)]
    return args


def with_flag(args: list[str], flag: str, value: str) -> list[str]:
    """`args` with `flag` set to `value`: replaced where it is given, else added (a restart's port, say)."""
    args = list(args)
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    return args


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    log_path: Path
    restart_args: list[str] | None = None  # how to start it again after a crash; None = a crash ends the job
    restarts: int = 0
    critical: bool = True  # False: its crash is its owner's business (e.g. a PS taking a shard over), not the job's


class ProcessGroup:
    """The job's children; stopped in reverse start order (workers, coordinator, PSs).

    Each child runs in a session of its own, out of the launcher's process group: a terminal's Ctrl-C, or a
    SIGTERM sent to the whole group (`timeout`, `kill -- -PGID`), reaches the launcher alone, which then stops
    the children in that order. Had the PSs received it too, they would have shut down before the coordinator
    read their accounting for result.json. A launcher that dies outright still takes its children with it
    (`die_with_parent`)."""

    def __init__(self, log_dir: Path, env: dict[str, str] | None = None):
        """`env` is added to every child's environment: how secrets (the job token) reach children, never argv."""
        self.log_dir = log_dir
        self.extra_env = dict(env or {})
        self.children: list[Child] = []
        self.lock = threading.RLock()  # the launcher's monitor and a node agent both start and stop children

    def spawn(self, name: str, args: list[str], log_mode: str = "w") -> Child:
        log_path = self.log_dir / f"{name}.log"
        handle = open(log_path, log_mode)
        env = dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
            **{PARENT_PID_ENV: str(os.getpid())},
            **self.extra_env,
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "star.cli", *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # out of the launcher's process group: see the class docstring
        )
        handle.close()
        child = Child(name, process, log_path)
        with self.lock:
            self.children.append(child)
        return child

    def restart(self, child: Child) -> Child:
        """Start a crashed child again with its restart_args, appending to its log."""
        assert child.restart_args is not None
        with open(child.log_path, "a") as handle:
            handle.write(f"\n--- restarted by star launch after exit code {child.process.returncode} ---\n")
        with self.lock:
            fresh = self.spawn(child.name, child.restart_args, log_mode="a")
            self.children.remove(fresh)
            fresh.restart_args, fresh.restarts = child.restart_args, child.restarts + 1
            self.children[self.children.index(child)] = fresh
        return fresh

    def crashed(self) -> Child | None:
        with self.lock:
            for child in self.children:
                code = child.process.poll()
                if code is not None and code != 0 and child.critical:
                    return child
        return None

    def live_workers(self) -> int:
        with self.lock:
            return sum(1 for c in self.children if c.name.startswith("worker") and c.process.poll() is None)

    def stop_child(self, child: Child, grace_s: float = 5.0) -> int:
        """Stop one child on purpose (SIGTERM, then SIGKILL) and forget it; returns its exit code."""
        with self.lock:
            if child in self.children:
                self.children.remove(child)
        if child.process.poll() is None:
            child.process.send_signal(signal.SIGTERM)
            try:
                child.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                child.process.kill()
        return child.process.wait()

    def shutdown(self, grace_s: float = 5.0, ps_grace_s: float = 40.0) -> None:
        """SIGTERM workers, then the coordinator, then PSs (which write a final checkpoint, so they get
        `ps_grace_s`: longer than a checkpoint write may wait for the one before it); SIGKILL stragglers."""
        for group, wait_s in (("worker", grace_s), ("coordinator", grace_s), ("ps", ps_grace_s)):
            with self.lock:
                members = [c for c in self.children if c.name.startswith(group)]
            for child in members:
                if child.process.poll() is None:
                    child.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + wait_s
            for child in members:
                try:
                    child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.process.kill()
                    child.process.wait()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _wait_ready(group: ProcessGroup, child: Child, ready_file: Path, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready_file.exists():
            return int(json.loads(ready_file.read_text())["port"])
        code = child.process.poll()
        if code is not None:
            raise LaunchError(f"{child.name} exited with code {code} before serving:\n{_tail(child.log_path)}")
        time.sleep(0.05)
    raise LaunchError(f"{child.name} did not start serving within {timeout_s:.0f} s; see {child.log_path}")
