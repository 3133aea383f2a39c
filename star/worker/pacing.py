"""Push pacing: keep one worker's pushes under the byte rate its plan allows.

When a PS host's NIC nears saturation the coordinator puts a per-worker push budget
into the plan (`SyncPlan.push_pace_bytes_per_s`); each worker then starts a push only
once its previous pushes have drained at that rate. Pure arithmetic on a clock the
caller passes, so it is unit-tested without sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PushPacer:
    _next_s: float | None = None  # earliest start of the next push under the current budget

    def wait_s(self, now_s: float, push_bytes: int, bytes_per_s: float | None) -> float:
        """Seconds to wait before a push of `push_bytes` starting at `now_s`; 0 when unpaced."""
        if not bytes_per_s or bytes_per_s <= 0:
            self._next_s = None
            return 0.0
        start = now_s if self._next_s is None else max(now_s, self._next_s)
        self._next_s = start + push_bytes / bytes_per_s
        return start - now_s
