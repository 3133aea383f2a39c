"""Batch sizing's check on itself: do the sizes in force beat even batches on the speeds measured?

Batch sizing sizes workers for the speeds it measured, and its sizes take effect an iteration or
more later (star.policy.batch.first_iteration_of_new_batches). Where speeds move faster than that
(bursts of contention that hop from host to host), it hands samples to workers that have already
slowed down: in the simulator at 1,000 workers on `contention` it resized 32 times in 37
iterations, each time predicting a 20-55% gain, and reached the target 14% after even batches
(SSGD). So every decision taken under uneven sizes records two iteration times from the same
measured per-sample speeds: the one the sizes in force give (the slowest worker's per-sample time
× its batch + its communication) and the one even batches would have given. When, over `window`
such decisions, the sized iterations were longer than the even ones by more than `margin`, batch
sizing backs off: even batches for `hold_periods` decisions, doubled at each further back-off.

A worker's per-sample time rises as its batch shrinks (a fixed part per iteration), which inflates
the even estimate of a sized-down straggler: the check errs towards keeping batch sizing. Pure.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Mapping

from star.errors import ConfigError


@dataclass(frozen=True)
class BatchGuardConfig:
    """When batch sizing gives way to even batches."""

    window: int = 20  # decisions under uneven sizes judged together
    margin: float = 0.05  # back off when sized iterations were longer than even ones by more than this
    hold_periods: int = 10  # decisions of even batches after the first back-off; doubled at each further one
    hold_max_periods: int = 160

    def __post_init__(self) -> None:
        for name, ok in (("window", self.window >= 1), ("margin", self.margin >= 0),
                         ("hold_periods", self.hold_periods >= 1), ("hold_max_periods", self.hold_max_periods >= 1)):
            if not ok:
                raise ConfigError(f"control.batching.guard.{name}", getattr(self, name), "out of range")


@dataclass(frozen=True)
class GuardVerdict:
    sized_s: float  # summed over the window: the iterations under the sizes in force
    even_s: float  # the same speeds at even batches
    hold_periods: int  # even batches for this many decisions from now

    @property
    def ratio(self) -> float:
        return self.sized_s / self.even_s

    def explain(self, decisions: int) -> str:
        return (f"over the last {decisions} decisions under uneven batches, the sized iterations took "
                f"{self.sized_s:.3f} s against {self.even_s:.3f} s at even batches ({self.ratio:.2f}x): even batches "
                f"for {self.hold_periods} decisions")


def iteration_s(per_sample_s: Mapping[int, float], batch: Mapping[int, int], comm_s: Mapping[int, float]) -> float:
    """A synchronous round's time: its slowest worker's compute at its batch plus its communication."""
    return max(per_sample_s[w] * batch[w] + comm_s[w] for w in per_sample_s)


@dataclass
class BatchGuard:
    config: BatchGuardConfig = field(default_factory=BatchGuardConfig)
    sized_s: deque = field(default_factory=deque)
    even_s: deque = field(default_factory=deque)
    hold_until_period: int = -1
    hold_periods: int = 0  # the last hold (0: never backed off)

    def holding(self, period: int) -> bool:
        """Whether batch sizing is backed off (even batches) at this decision."""
        return period < self.hold_until_period

    def observe(self, period: int, per_sample_s: Mapping[int, float], batch: Mapping[int, int],
                comm_s: Mapping[int, float], base_batch: int) -> GuardVerdict | None:
        """Record one decision's measurements (each worker's per-sample time at the batch it reported);
        a verdict when batch sizing must back off now."""
        if self.holding(period) or all(b == base_batch for b in batch.values()):
            return None
        self.sized_s.append(iteration_s(per_sample_s, batch, comm_s))
        self.even_s.append(iteration_s(per_sample_s, {w: base_batch for w in batch}, comm_s))
        while len(self.sized_s) > self.config.window:
            self.sized_s.popleft()
            self.even_s.popleft()
        sized, even = sum(self.sized_s), sum(self.even_s)
        if len(self.sized_s) < self.config.window or sized <= even * (1 + self.config.margin):
            return None
        c = self.config
        self.hold_periods = min(max(c.hold_periods, 2 * self.hold_periods), c.hold_max_periods)
        self.hold_until_period = period + self.hold_periods
        self.sized_s.clear()
        self.even_s.clear()
        return GuardVerdict(sized, even, self.hold_periods)
