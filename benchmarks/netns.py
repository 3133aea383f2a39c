"""A throwaway multi-host network on one machine: network namespaces joined by a bridge.

    with NetNamespaces(nodes=3) as net:
        net.cap(1, rate_mbit=20, delay_ms=5)      # host 1 gets a slow link (tc tbf + netem)
        process = net.popen(1, [sys.executable, "-c", "..."], log)

Each node is a namespace with one interface `eth0` (address `net.address(rank)`),
wired by a veth pair to a bridge that lives in a hub namespace of its own, so no
traffic ever touches the machine's real interfaces: every address used is inside
namespaces this object created, and `close()` (or leaving the `with`) kills every
process in them and deletes them. Needs root and iproute2; `unavailable()` says why not.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO, Sequence


def unavailable() -> str | None:
    """Why namespaces cannot be used here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    probe = f"stprobe{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


class NetNamespaces:
    def __init__(self, nodes: int, subnet: str | None = None):
        self.nodes = nodes
        self.tag = secrets.token_hex(3)
        self.hub = f"st{self.tag}hub"
        # A private /24 that exists only inside these namespaces (a new one per instance).
        self.subnet = subnet or f"10.213.{int(self.tag, 16) % 250 + 1}"
        self.processes: list[subprocess.Popen] = []
        self.created: list[str] = []

    def name(self, rank: int) -> str:
        return f"st{self.tag}n{rank}"

    def address(self, rank: int) -> str:
        return f"{self.subnet}.{rank + 1}"

    def __enter__(self) -> "NetNamespaces":
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            # A plain `kill` of a benchmark must still delete its namespaces: SIGTERM unwinds like Ctrl-C.
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create(self) -> None:
        _ip("netns", "add", self.hub)
        self.created.append(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for rank in range(self.nodes):
            ns = self.name(rank)
            _ip("netns", "add", ns)
            self.created.append(ns)
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"v{rank}", "netns", self.hub)
            _ip("-n", ns, "addr", "add", f"{self.address(rank)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", self.hub, "link", "set", f"v{rank}", "master", "br0")
            _ip("-n", self.hub, "link", "set", f"v{rank}", "up")

    def cap(self, rank: int, rate_mbit: float, delay_ms: float = 0.0) -> dict[str, float]:
        """Make host `rank`'s link slow in both directions: a tbf rate limit, under a netem delay when the
        kernel has netem (many containers do not). Returns what was applied."""
        applied = {"rate_mbit": rate_mbit, "delay_ms": 0.0}
        burst = max(32_000, int(rate_mbit * 1e6 / 8 / 100))  # at least 10 ms worth of bytes
        for ns, dev in ((self.name(rank), "eth0"), (self.hub, f"v{rank}")):
            base = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev]
            tbf = ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "400ms"]
            delayed = delay_ms > 0 and subprocess.run(
                [*base, "root", "handle", "1:", "netem", "delay", f"{delay_ms}ms"], capture_output=True).returncode == 0
            if delayed:
                applied["delay_ms"] = delay_ms
            subprocess.run([*base, *(["parent", "1:", "handle", "2:"] if delayed else ["root"]), *tbf], check=True,
                           capture_output=True)
        return applied

    def popen(self, rank: int, argv: Sequence[str], log: IO | Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start a process inside node `rank`'s namespace, its output to `log`."""
        handle = open(log, "w") if isinstance(log, Path) else log
        process = subprocess.Popen(["ip", "netns", "exec", self.name(rank), *argv], stdout=handle, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        if isinstance(log, Path):
            handle.close()
        self.processes.append(process)
        return process

    def close(self) -> None:
        """Kill every process in the namespaces, then delete them."""
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for ns in reversed(self.created):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.created.clear()

    def exists(self) -> bool:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return any(line.split()[0] in (self.hub, *(self.name(r) for r in range(self.nodes)))
                   for line in listed.splitlines() if line.strip())
