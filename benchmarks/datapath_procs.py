"""The processes of `benchmarks.datapath`: PS daemons, worker drivers and gloo ranks, on this host or
each in a network namespace of its own (`benchmarks.netns`), driven over pipes and always stopped.

A driver (worker or gloo rank) is a child running `benchmarks.datapath --role ...` that reads one
command per line on stdin ("go": one timed round, "check", "end") and answers one line on stdout.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

RPC_TIMEOUT_S = 120.0
MODULE = [sys.executable, "-m", "benchmarks.datapath"]
CHECKOUT = Path(__file__).resolve().parents[1]  # benchmarks/ is not installed: the children find it here


class Driver:
    """One child answering commands line by line."""

    def __init__(self, name: str, argv: Sequence[str], prefix: Sequence[str], log: Path):
        self.name = name
        path = os.pathsep.join(p for p in (str(CHECKOUT), os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=path)
        self.log = open(log, "w")
        self.process = subprocess.Popen([*prefix, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        text=True, env=env, start_new_session=True)

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def read(self, timeout_s: float = RPC_TIMEOUT_S + 30.0) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.log.flush()
            tail = Path(self.log.name).read_text(errors="replace").strip().splitlines()[-6:]
            raise RuntimeError(f"{self.name} gave no answer (exit code {self.process.poll()}); its last messages:\n"
                               + "\n".join(tail))
        return line.strip()

    def stop(self, grace_s: float) -> int | None:
        if self.process.poll() is None:
            try:
                self.send("end")
            except (BrokenPipeError, OSError):
                pass
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _kill_group(self.process)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self.log.close()
        return self.process.returncode


def _kill_group(process: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=5.0)
            return
        except subprocess.TimeoutExpired:
            continue


class Processes:
    """Every child of one benchmark run; `close()` stops them all (on success and on failure)."""

    def __init__(self, work_dir: Path, prefixes: Sequence[Sequence[str]] | None = None, hosts: Sequence[str] | None = None):
        """`prefixes[n]`/`hosts[n]`: how to start a process on node n and its address (default: this host)."""
        self.work_dir = work_dir
        self.prefixes, self.hosts = prefixes, hosts
        self.daemons: list[subprocess.Popen] = []
        self.drivers: list[Driver] = []

    def prefix(self, node: int) -> list[str]:
        return list(self.prefixes[node]) if self.prefixes else []

    def host(self, node: int) -> str:
        return self.hosts[node] if self.hosts else "127.0.0.1"

    def start_ps(self, num_ps: int, timeout_s: float = 120.0) -> list[str]:
        """PS i on node i; returns their addresses once each serves."""
        children = []
        for i in range(num_ps):
            ready = self.work_dir / f"ps{i}.ready"
            ready.unlink(missing_ok=True)
            argv = [sys.executable, "-m", "star.cli", "ps", "--ps-index", str(i), "--num-ps", str(num_ps),
                    "--host", self.host(i), "--port", "0", "--ready-file", str(ready), "--job-id", f"datapath{os.getpid()}",
                    "--optimizer.name", "sgd", "--optimizer.lr", "0.1"]
            with open(self.work_dir / f"ps{i}.log", "w") as log:
                process = subprocess.Popen([*self.prefix(i), *argv], stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
            self.daemons.append(process)
            children.append((i, process, ready))
        addresses = []
        deadline = time.monotonic() + timeout_s
        for i, process, ready in children:
            while not ready.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"ps{i} did not start serving; see {self.work_dir / f'ps{i}.log'}")
                time.sleep(0.05)
            addresses.append(f"{self.host(i)}:{json.loads(ready.read_text())['port']}")
        return addresses

    def driver(self, name: str, node: int, argv: Sequence[str]) -> Driver:
        driver = Driver(name, [*MODULE, *argv, "--parent-pid", str(os.getpid())], self.prefix(node), self.work_dir / f"{name}.log")
        self.drivers.append(driver)
        return driver

    def close(self, grace_s: float) -> list[int | None]:
        codes = [d.stop(grace_s) for d in self.drivers]
        for process in self.daemons:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in self.daemons:
            try:
                process.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                _kill_group(process)
        return codes


def die_with_parent(parent_pid: int) -> None:
    """In a driver: get SIGTERM when the benchmark dies (PR_SET_PDEATHSIG); set in the child itself
    (a Popen preexec_fn is unsafe once the parent has threads). Through `ip netns exec` the parent is
    that wrapper, which exec()s, so the check still holds."""
    import ctypes

    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)
    if os.getppid() != parent_pid:
        raise SystemExit("datapath: parent exited before this driver started")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops drivers


def sleep_until(instant: float) -> None:
    """Wait for a time.monotonic() instant (the clock every process on the host, and in its
    namespaces, shares): how every measured process starts a round at the same moment."""
    delay = instant - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def ps_worker_main(worker: int, workers: int, addresses: list[str], numel: int, transport: str, wire: str,
                   doorbell: bool = True, grad_segment: bool = True) -> None:
    """A worker driver: registers, (worker 0) initialises the PSs and sets an SSGD plan over every
    worker; "go START" pushes its gradient at the monotonic instant START and pulls the parameters,
    answering "push_s pull_s transport headers segment" (push_s counted from START; headers: doorbell, socket or
    grpc; segment: on when every PS sums this worker's gradient from its segment).
    `grad_segment`: the gradient lives in a shared-memory segment, as a CPU training worker's does (its
    backward writes there), so a same-host push copies nothing; before each round the gradient is written
    again, untimed, as a backward would (and as the gloo ranks refill their buffer)."""
    import contextlib

    import torch

    from star.rpc.ps_client import PSClient
    from star.shm import GradSegment, grad_segment_name

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(worker)
    params = torch.randn(numel, generator=generator)
    source = torch.randn(numel, generator=generator).mul_(1e-3)
    segment = GradSegment.create(grad_segment_name("datapath", worker), numel, len(addresses))[0] \
        if grad_segment and transport != "grpc" else None
    grads = segment.area if segment is not None else source.clone()
    with contextlib.ExitStack() as stack:
        if segment is not None:
            stack.callback(segment.close)
        client = stack.enter_context(PSClient(addresses, worker_id=worker, transport=transport, wire=wire,
                                              doorbell=doorbell, grad_segment=segment))
        _drive_worker(client, worker, workers, params, grads, source)


def _drive_worker(client, worker: int, workers: int, params, grads, source) -> None:
    """The worker driver's command loop (see ps_worker_main)."""
    import torch

    from star.plan import ssgd

    numel = params.numel()
    client.wait_ready(60.0)
    replies = client.register(numel, timeout_s=RPC_TIMEOUT_S)  # a loaded host may take long to answer
    if worker == 0:
        client.init_if_needed(params, replies, timeout_s=RPC_TIMEOUT_S)
        client.configure(ssgd(list(range(workers)), epoch=1), timeout_s=RPC_TIMEOUT_S)
    print("ready", flush=True)
    iteration = 0
    for line in sys.stdin:
        command = line.strip()
        if command == "end":
            break
        if command == "pull":  # the first pull (untimed): every worker after the plan is set
            client.pull(params, timeout_s=RPC_TIMEOUT_S)
            print("ok", flush=True)
        elif command.startswith("go "):
            t0 = float(command.split()[1])
            grads.copy_(source)  # this round's gradient, as a backward writes it (untimed)
            sleep_until(t0)
            # With a batch size, as a training worker pushes: the PS then estimates the gradient noise
            # of each round, part of the round's cost that a job pays (before 26 Nov this pushed none).
            client.push(grads, iteration=iteration, timeout_s=RPC_TIMEOUT_S, batch_size=1)
            t1 = time.monotonic()
            client.pull(params, timeout_s=RPC_TIMEOUT_S)
            t2 = time.monotonic()
            iteration += 1
            headers = "doorbell" if all(bell is not None for bell in client.doorbells) else \
                "socket" if all(channel is not None for channel in client.sockets) else "grpc"
            zero_copy = "on" if all(client.grad_mapped) else "off"
            print(f"{t1 - t0!r} {t2 - t1!r} {client.transport_used} {headers} {zero_copy}", flush=True)
        elif command == "check":
            versions = {v.version for v in client.views}
            good = versions == {iteration} and bool(torch.isfinite(params).all())
            print("ok" if good else f"versions {sorted(versions)} after {iteration} rounds", flush=True)
        else:
            raise SystemExit(f"datapath worker {worker}: unknown command {command!r}")


def gloo_rank_main(rank: int, world: int, master: str, numel: int) -> None:
    """A gloo rank: "go START" runs one all-reduce at the monotonic instant START (answering its seconds
    from START, as the PS workers do), "check" its sum."""
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{master}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=RPC_TIMEOUT_S))
    try:
        buffer = torch.empty(numel)
        print("ready", flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "end":
                break
            if command == "check":
                print("ok" if bool((buffer == float(world)).all()) else "wrong sum", flush=True)
            elif command.startswith("go "):
                t0 = float(command.split()[1])
                buffer.fill_(1.0)  # the same finite values every time (untimed)
                sleep_until(t0)
                dist.all_reduce(buffer)
                print(repr(time.monotonic() - t0), flush=True)
            else:
                raise SystemExit(f"datapath gloo rank {rank}: unknown command {command!r}")
    finally:
        dist.destroy_process_group()
