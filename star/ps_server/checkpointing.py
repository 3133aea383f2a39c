"""When and how a PS checkpoints its shard, and how it comes back from one.

The policy (every N updates or S seconds, and on shutdown) is `CheckpointSchedule`, a
pure class; `ShardCheckpointer` copies the state on the event loop (so the copy is
consistent with one parameter version) and writes it in a thread, so training does not
wait on the disk.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Callable

import torch

from star.aggregate import Aggregator
from star.checkpoint import ShardCheckpoint, latest_shard, save_shard, shard_dir
from star.errors import ConfigError
from star.ps_server.config import PSConfig
from star.logs import log

logger = logging.getLogger("ps")


@dataclass(frozen=True)
class CheckpointSchedule:
    """Checkpoint when `every_updates` updates or `every_s` seconds have passed since the last one,
    but never so often that writing takes more than `max_write_share` of the time: a big shard's
    write (seconds, in a thread) competes with training for the host's CPU and disk, so its
    checkpoints space out to at least last write's seconds / max_write_share apart."""

    every_updates: int = 0  # 0 = not by update count
    every_s: float = 0.0  # 0 = not by time
    max_write_share: float = 0.1  # at most this share of wall time spent writing checkpoints (1: no floor)

    def __post_init__(self) -> None:
        if not 0 < self.max_write_share <= 1:
            raise ConfigError("checkpoint_max_write_share", self.max_write_share, "must be in (0, 1]")

    def due(self, version: int, last_version: int, now_s: float, last_s: float, last_write_s: float = 0.0) -> bool:
        if version == last_version or now_s - last_s < last_write_s / self.max_write_share:
            return False
        by_count = self.every_updates > 0 and version - last_version >= self.every_updates
        by_time = self.every_s > 0 and now_s - last_s >= self.every_s
        return by_count or by_time


class ShardCheckpointer:
    """Writes one PS's checkpoints into `directory` (see star.checkpoint for the layout)."""

    def __init__(self, directory: str, job_id: str, schedule: CheckpointSchedule):
        self.directory = directory
        self.job_id = job_id
        self.schedule = schedule
        self.last_version = 0  # the version of the last checkpoint (a restored PS sets it)
        self.last_s = time.monotonic()
        self.written = 0
        self.last_write_s = 0.0  # how long the last write took (spaces the next one, CheckpointSchedule)
        self._writing: asyncio.Future | None = None
        self._version_file: int | None = None

    @classmethod
    def for_ps(cls, config: PSConfig) -> "ShardCheckpointer | None":
        """The checkpointer a PS's config asks for (None: no checkpoint_dir, never checkpoints)."""
        if not config.checkpoint_dir:
            return None
        schedule = CheckpointSchedule(config.checkpoint_every_updates, config.checkpoint_every_s,
                                      config.checkpoint_max_write_share)
        return cls(config.checkpoint_dir, config.job_id, schedule)

    def record_version(self, version: int) -> None:
        """Keep the live version in ps<i>/version (one pwrite per update, no fsync): after a crash
        the restarted PS knows exactly how many updates its checkpoint did not have."""
        if self._version_file is not None:
            os.pwrite(self._version_file, b"%20d\n" % version, 0)

    def open_version_file(self, ps_index: int) -> int | None:
        """Start recording; returns the version the previous incarnation recorded last (None: none)."""
        path = shard_dir(self.directory, ps_index) / "version"
        path.parent.mkdir(parents=True, exist_ok=True)
        previous = None
        try:
            previous = int(path.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            pass
        self._version_file = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        return previous

    def maybe_save(self, version: int, capture: Callable[[], ShardCheckpoint]) -> None:
        """Start a background write when one is due and none is running (`capture()` makes the copy)."""
        if self._writing is not None and not self._writing.done():
            return
        now = time.monotonic()
        if not self.schedule.due(version, self.last_version, now, self.last_s, self.last_write_s):
            return
        self.last_version, self.last_s = version, now
        self._writing = asyncio.get_running_loop().run_in_executor(None, self._write, capture())

    async def save_now(self, checkpoint: ShardCheckpoint) -> None:
        """The final checkpoint at shutdown: wait for a running write, then write this one."""
        if self._writing is not None:
            await asyncio.wait_for(asyncio.shield(self._writing), timeout=30.0)
        await asyncio.get_running_loop().run_in_executor(None, self._write, checkpoint)

    def _write(self, checkpoint: ShardCheckpoint) -> None:
        started = time.monotonic()
        path = save_shard(self.directory, checkpoint)
        self.written += 1
        self.last_version = checkpoint.version
        self.last_write_s = time.monotonic() - started
        log(logger, logging.INFO, "checkpoint written", path=str(path), version=checkpoint.version,
            seconds=round(self.last_write_s, 3))


def capture_shard(job_id: str, ps_index: int, num_ps: int, total_numel: int, shard, aggregator: Aggregator,
                  trained_s: float, registered: set[int] | None = None,
                  relay_addresses: dict[int, str] | None = None) -> ShardCheckpoint:
    """A consistent copy of the shard at the aggregator's current version (taken on the event loop).
    `registered` and `relay_addresses`: the workers it knows and their tree relays, kept when the shard
    moves (a checkpoint restore forgets them: workers register again)."""
    state = aggregator.export_state()
    state["trained_s"] = trained_s
    if registered is not None:
        state["registered"] = sorted(registered)
    if relay_addresses:
        state["relay_addresses"] = {str(w): a for w, a in sorted(relay_addresses.items())}
    optimizer = shard.optimizer.state_dict()
    optimizer = {"state": {k: {n: (v.clone() if isinstance(v, torch.Tensor) else v) for n, v in s.items()}
                           for k, s in optimizer["state"].items()},
                 "param_groups": optimizer["param_groups"]}
    return ShardCheckpoint(job_id, ps_index, num_ps, total_numel, shard.range.start, shard.range.end,
                           shard.param.detach().clone(), optimizer, state)


def restore_shard(directory: str, ps_index: int) -> ShardCheckpoint | None:
    """This PS's newest checkpoint in `directory`, or None (then it starts fresh)."""
    return latest_shard(directory, ps_index)
