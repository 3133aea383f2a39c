"""Real daemons on 127.0.0.1 with ephemeral ports, always cleaned up (even when a test fails)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from star.processes import ProcessGroup, _wait_ready
from star.rpc.common import address

pytestmark = pytest.mark.integration


class Cluster:
    """Starts PS daemons for a test; stops every child on teardown."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        (tmp_path / "logs").mkdir(exist_ok=True)
        self.group = ProcessGroup(tmp_path / "logs")
        self._count = 0

    def start_ps(self, num_ps: int = 1, *extra: str, optimizer: tuple[str, ...] = ("--optimizer.name", "sgd", "--optimizer.lr", "0.1")) -> list[str]:
        return self.spawn_ps(num_ps, *extra, optimizer=optimizer)()

    def spawn_ps(self, num_ps: int = 1, *extra: str, optimizer: tuple[str, ...] = ("--optimizer.name", "sgd", "--optimizer.lr", "0.1")):
        """Start PS daemons now; returns a call that waits until they serve and gives their addresses.
        (Spawn from the test's own thread: a child's PDEATHSIG fires when the *thread* that started it ends.)"""
        children = []
        for i in range(num_ps):
            self._count += 1
            ready = self.tmp_path / "logs" / f"ps{i}-{self._count}.ready"
            child = self.group.spawn(
                f"ps{i}-{self._count}",
                ["ps", "--ps-index", str(i), "--num-ps", str(num_ps), "--ready-file", str(ready), *optimizer, *extra],
            )
            children.append((child, ready))
        return lambda: [address("127.0.0.1", _wait_ready(self.group, c, r, 60.0)) for c, r in children]

    def stop(self) -> None:
        self.group.shutdown(grace_s=3.0)


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def read_result(out: Path) -> dict:
    return json.loads((out / "result.json").read_text())


def star_command() -> list[str]:
    return [sys.executable, "-m", "star.cli"]


@pytest.fixture(scope="session", autouse=True)
def sweep_segments_of_killed_processes():
    """Tests that kill -9 a worker or a PS leave its shared-memory segments behind by design (the next PS or
    launcher start sweeps them; tested). Sweep once more when the session ends, so the machine is left clean."""
    yield
    from star.shm import sweep

    sweep()
