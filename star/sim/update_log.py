"""What the simulator logs of the updates it applies: per decision period, each update's time,
summed batch and its gradients' pull times (`UpdateLog`); over the run, every apply time in
order (`ApplyHistory`), from which a gradient's staleness is the updates applied between its
pull and its apply."""

from __future__ import annotations

import numpy as np


class UpdateLog:
    """Updates of one period: apply time, summed batch, and their gradients' pull times."""

    def __init__(self) -> None:
        self.times: list[np.ndarray] = []
        self.batch: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.owner: list[np.ndarray] = []  # per gradient entry: index of its update in this log
        self.weight: list[np.ndarray] = []  # per gradient entry: how many gradients share this pull time
        self.count = 0

    def one(self, t: float, batch: float, starts: np.ndarray) -> None:
        """One update summing the gradients pulled at `starts`."""
        lo, hi = starts.min(), starts.max()
        if lo == hi:
            s, w = np.array([lo]), np.array([float(len(starts))])
        else:
            s, counts = np.unique(starts, return_counts=True)
            w = counts.astype(float)
        self.times.append(np.array([t]))
        self.batch.append(np.array([batch], dtype=float))
        self.starts.append(s)
        self.weight.append(w)
        self.owner.append(np.full(len(s), self.count))
        self.count += 1

    def many(self, times: np.ndarray, batch: np.ndarray, starts: np.ndarray) -> None:
        """Single-gradient updates (ASGD pushes, late gradients)."""
        n = len(times)
        if n == 0:
            return
        self.times.append(times)
        self.batch.append(batch.astype(float))
        self.starts.append(starts)
        self.weight.append(np.ones(n))
        self.owner.append(np.arange(self.count, self.count + n))
        self.count += n


class ApplyHistory:
    """All apply times so far, sorted (amortised-doubling array), for versions at pull time."""

    def __init__(self) -> None:
        self._data = np.empty(1024)
        self.size = 0

    def extend(self, times: np.ndarray) -> None:
        need = self.size + len(times)
        if need > len(self._data):
            grown = np.empty(max(need, 2 * len(self._data)))
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size : need] = times
        self.size = need

    def version_at(self, t: np.ndarray) -> np.ndarray:
        """Updates applied at or before each time."""
        return np.searchsorted(self._data[: self.size], t, side="right")
