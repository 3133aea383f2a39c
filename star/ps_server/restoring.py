"""A PS's shard as a checkpoint and back: capture, restore (after a crash or a live move), the final save.

`Restoring` is mixed into `star.ps_server.server.ParameterServer` and uses its config, shard and aggregator.
"""

from __future__ import annotations

import logging
import time

from star.ps_server.checkpointing import capture_shard
from star.ps_server.shard import ShardState
from star.aggregate import Aggregator
from star.checkpoint import ShardCheckpoint
from star.config import ConfigError
from star.flat import shard_ranges
from star.logs import log

logger = logging.getLogger("ps")


class Restoring:
    def capture(self) -> ShardCheckpoint:
        """A consistent copy of this shard (parameters, optimizer, aggregator) at the current version."""
        assert self.shard is not None and self.total_numel is not None
        trained_s = self._trained_s()
        return capture_shard(self.config.job_id, self.config.ps_index, self.config.num_ps, self.total_numel, self.shard,
                             self.aggregator, trained_s)

    def _trained_s(self) -> float:
        """Training time up to the current version (when it was applied here): the seconds a stopping job
        spends after its last update are not training time, and a resumed job must not count them."""
        applied = self.observers.applied_at(self.aggregator.version)
        if applied is not None and self._first_update is not None:
            return max(0.0, applied - self._first_update)
        return max(0.0, self._since_first_update())

    def restore(self, checkpoint: ShardCheckpoint, version_at_exit: int | None = None, moved: bool = False,
                resumed: bool = False) -> None:
        """Continue from a checkpoint: same parameters, optimizer state, version and plan.
        Workers must register and pull again (a restored PS knows no worker). `version_at_exit`
        (what the previous incarnation recorded last) gives the updates the checkpoint lacks; `resumed` (a
        stopped job started again) holds the clock at the checkpoint's training time until the first update."""
        c = self.config
        if (checkpoint.ps_index, checkpoint.num_ps) != (c.ps_index, c.num_ps):
            raise ConfigError("restore", checkpoint.ps_index,
                              f"checkpoint is shard {checkpoint.ps_index} of {checkpoint.num_ps}, this PS is {c.ps_index} of {c.num_ps}")
        expected = shard_ranges(checkpoint.total_numel, c.num_ps)[c.ps_index]
        if (expected.start, expected.end) != (checkpoint.range_start, checkpoint.range_end):
            raise ConfigError("restore", (checkpoint.range_start, checkpoint.range_end), f"does not match the shard range {expected}")
        self.total_numel = checkpoint.total_numel
        self.shard = ShardState(expected, checkpoint.param, c.optimizer)
        self.shard.optimizer.load_state_dict(checkpoint.optimizer)
        self.aggregator = Aggregator.restore(checkpoint.aggregator)
        lost = max(0, (version_at_exit or checkpoint.version) - checkpoint.version)
        if moved:  # a live hand-over: nothing was lost, and the workers it knew stay known
            self.aggregator.counters["moved_in"] += 1
            self.aggregator.counters["moved_in_at_version"] = checkpoint.version
            self.registered = {int(w) for w in checkpoint.aggregator.get("registered", [])}
            self.relay_addresses = {int(w): str(a) for w, a in checkpoint.aggregator.get("relay_addresses", {}).items()}
        else:
            self.aggregator.counters["restores"] += 1
            self.aggregator.counters["updates_lost_in_restart"] += lost
        trained_s = float(checkpoint.aggregator.get("trained_s", 0.0))
        self._first_update = time.monotonic() - trained_s if checkpoint.version > 0 else None
        if resumed and checkpoint.version > 0:  # the stopped job's pause and this start-up are not training time
            self._first_update, self._clock_held_s = None, trained_s
        if self.checkpointer is not None:
            self.checkpointer.last_version = checkpoint.version
        log(logger, logging.INFO, "restored from checkpoint", version=checkpoint.version, epoch=self.aggregator.epoch,
            updates_lost=lost, pending_gradients_lost=checkpoint.aggregator.get("pending", 0))

    async def final_checkpoint(self) -> None:
        if self.checkpointer is not None and self.shard is not None and self.moved_to is None:  # a moved shard is not ours
            await self.checkpointer.save_now(self.capture())
