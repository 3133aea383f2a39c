"""A pull that every parameter-server shard answered under the same sync plan.

Why: the coordinator switches the PSs' plans one after another, so a pull can get one
shard under the new plan and another under the old. A gradient computed on such a
pull is refused by one PS and accepted by the other, which leaves this worker one
round ahead on one shard only; with tree aggregation that can hold a child's
gradient at a parent whose pull waits on the very round that needs it. Pulling again
for a moment, until the lagging shard has switched too, avoids both.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


def pull_under_one_plan(pull: Callable[[], None], pulled_epoch: Callable[[], int], patience_s: float,
                        stop: threading.Event, retry_s: float = 0.02) -> int:
    """Call `pull` until `pulled_epoch()` is one epoch (not -1: shards disagree), `patience_s`
    has passed (a PS that lags for longer is the coordinator's problem: go on) or `stop` is
    set. Returns the number of pulls made."""
    deadline = time.monotonic() + patience_s
    pulls = 0
    while True:
        pull()
        pulls += 1
        if pulled_epoch() != -1 or time.monotonic() >= deadline or stop.is_set():
            return pulls
        time.sleep(retry_s)
