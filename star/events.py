"""The JSONL event log: every decision and notable happening, so a run can be explained later."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable


class EventLog:
    """Append-only, flushed per line, safe to call from several threads."""

    def __init__(self, path: str | Path | None, clock=time.monotonic):
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._handle = open(path, "a", buffering=1) if path else None
        self.counts: dict[str, int] = {}
        self.listeners: list[Callable[[dict[str, Any]], None]] = []  # called with every event, after it is written

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"t": round(self._clock() - self._start, 4), "kind": kind, **fields}
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if self._handle is not None:
                self._handle.write(json.dumps(event, default=str) + "\n")
        for listener in self.listeners:
            listener(event)
        return event

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None


def read_events(path: str | Path, skip_damaged: bool = False) -> list[dict[str, Any]]:
    """Every event of a log. `skip_damaged`: leave out a line that is not a JSON object (the half-written last
    line a killed process leaves) instead of raising."""
    events = []
    with open(path) as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                if not skip_damaged:
                    raise
                continue
            if isinstance(event, dict) or not skip_damaged:
                events.append(event)
    return events
