"""AMP policy (after Korel): mixed precision on for detected stragglers, off when they recover.

Each toggle is verified: after a switch-on, once the worker has reported enough fresh
iterations, its compute time per sample must have fallen by at least `min_gain`;
otherwise the switch is undone. AMP is remembered as ineffective for that worker only when its
reports resolve the verdict: even `resolve_z` standard errors (from their spread) in AMP's favour
would not make up `min_gain`. A verdict within the noise is not final: AMP is tried again after
`retry_hold_periods` decisions, doubled per such retry. Why: where a straggler's speed fluctuates from
one iteration to the next, a before/after comparison of a few reports each is mostly that fluctuation,
and "never again" on one noisy trial left a straggler AMP had sped up 1.3x without it for the rest of a
run (5 Dec, a trace with two fluctuating stragglers: one of the two undone as "did not help" in 3 of 3
runs, e.g. 4.16 -> 6.18 ms/sample, while the other measured 1.19-1.36x).
A worker is toggled at most once per decision period. With batch sizing on, the
controller may also undo (or not try) AMP on a worker that batch sizes alone balance
about as well (`mark_redundant`): AMP is then left off until the worker recovers. Stragglers not
tried yet are judged together (`skip`, `reconsider`): one left off alone is judged again when
others join it, as where a whole host slows down.

The probe. A straggler on AMP is judged by its time with AMP times the speed-up measured
while it was slow, and that speed-up does not carry over: on digits (4 workers, 2 cores) AMP
measured 1.84x under a 3x slowdown and gave 1.43x once the slowdown ended, so the recovered
worker read 30% slow for the rest of the run and AMP never went off (a CI failure). So a
straggler on AMP that runs faster per sample than the median worker by the detector's margin
is let out of the slow set (`probe_ready`; the controller applies it), which switches AMP off
as recovered; its plain speed then shows. If it was still slow, it is
detected again within `relapse_window_periods` and AMP goes back on at once at its measured
speed-up (no verification). The first probe waits `probe_hold_periods` after the verification
(just measured at this slowdown, a fast worker is over-compensated, not recovered), and each
relapse doubles the wait, so a worker that AMP over-compensates is not toggled every few seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping

from star.errors import ConfigError


class AmpState(str, Enum):
    OFF = "off"
    VERIFYING = "verifying"  # just switched on; waiting for fresh timings
    ON = "on"  # switched on and shown to help
    INEFFECTIVE = "ineffective"  # tried, did not help beyond the noise of its reports: never again for this worker
    RETRY = "retry"  # tried, did not help, within the noise: off, tried again once its retry hold has passed
    REDUNDANT = "redundant"  # helps, but batch sizing alone balances the worker as well: off until it recovers


@dataclass(frozen=True)
class AmpConfig:
    """AMP policy settings."""

    min_gain: float = 0.1  # the per-sample time must fall by at least this fraction to keep AMP on
    verify_reports: int = 3  # fresh iterations (with AMP on) needed before judging a toggle
    assumed_speedup: float = 2.0  # with batch sizing on: AMP is not tried where even this speed-up would gain < min_added_gain
    # (once AMP was verified on some worker, the best speed-up measured replaces this assumption)
    min_added_gain: float = 0.03  # with batch sizing on: AMP stays only if it cuts the predicted iteration by this much
    # beyond batch sizes alone (it costs bf16 precision and a verification period with the worker's batch held)
    keep_added_gain: float = 0.0  # with batch sizing on: a verified AMP switch is undone only if it adds less than this
    # (the verification is paid by then; undoing it costs another, its batch held at an estimated speed meanwhile)
    relapse_window_periods: int = 10  # detected again within this many decisions of AMP going off as recovered:
    # a relapse (the probe found it still slow), AMP back on at the speed-up it measured, no verification
    probe_hold_periods: int = 10  # the first probe waits this many decisions after the verification; doubled per relapse
    probe_hold_max_periods: int = 160  # the longest a probe (or a retry) waits
    resolve_z: float = 2.0  # a failed verification is final only if min_gain stays out of reach this many standard
    # errors in AMP's favour (the errors from the spread of the worker's reports; unknown spread: every failure is final)
    retry_hold_periods: int = 10  # an unresolved failure: AMP is tried again after this many decisions, doubled per retry

    def __post_init__(self) -> None:
        for name in ("relapse_window_periods", "probe_hold_periods", "probe_hold_max_periods", "retry_hold_periods",
                     "resolve_z"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"control.amp_policy.{name}", getattr(self, name), "must be >= 0")


def reachable_within_noise(speedup: float, rel_error: float, min_gain: float, z: float) -> bool:
    """Whether a measured `speedup` that fell short of min_gain could still reach it `z` relative standard errors
    in its favour: the verdict "did not help" is then not resolved by the measurements."""
    return speedup * math.exp(z * rel_error) * (1 - min_gain) >= 1


def pooled_speedup(trials: list[tuple[float, float]]) -> tuple[float, float]:
    """The speed-up several trials of one worker measured together, and its relative error: their log speed-ups
    weighted by inverse variance. A trial of unknown error (0) stands alone."""
    if any(error <= 0 for _, error in trials):
        return math.exp(trials[-1][0]), 0.0
    weights = [1 / error ** 2 for _, error in trials]
    mean = sum(x * wt for (x, _), wt in zip(trials, weights)) / sum(weights)
    return math.exp(mean), 1 / math.sqrt(sum(weights))


@dataclass(frozen=True)
class AmpDecision:
    worker: int
    amp: bool
    reason: str
    speedup: float = 1.0  # switching AMP off: the speed-up it measured (< 1 if it slowed the worker), to restore its plain speed
    recovered: bool = False  # switching AMP off because the worker recovered: its plain speed is unknown until measured


@dataclass
class _WorkerAmp:
    state: AmpState = AmpState.OFF
    baseline_s: float = 0.0  # per-sample compute time just before switching on
    baseline_error: float = 0.0  # its relative standard error (0: unknown)
    speedup: float = 1.0  # measured: baseline / time with AMP (kept after a recovery, for a relapse)
    last_toggle_period: int = -1
    recovered_period: int = -1  # when AMP last went off because the worker recovered
    probe_hold_periods: int = 0  # how long the last wait for a probe was (doubled at a relapse)
    probe_after_period: int = -1  # the first decision at which the detector may let it out (probe_ready)
    untried: bool = False  # REDUNDANT without a try (skip): judged again when more stragglers are detected
    retry_hold_periods: int = 0  # how long the last wait for a retry was (doubled per unresolved failure)
    retry_after_period: int = -1  # RETRY: the first decision at which AMP may be tried again
    open_trials: list[tuple[float, float]] = field(default_factory=list)  # (log speed-up, its relative error) of the
    # trials whose verdict was left open: a retry is judged on them all, so evidence adds up and one lucky trial among
    # unlucky ones does not decide


@dataclass
class AmpPolicy:
    config: AmpConfig = field(default_factory=AmpConfig)
    workers: dict[int, _WorkerAmp] = field(default_factory=dict)
    measured: list[float] = field(default_factory=list)  # every verification's speed-up, on any worker of this job

    def expected_speedup(self) -> float:
        """What AMP can be expected to do for a straggler not tried yet: the best speed-up it has
        measured on this job's model (every worker runs it), else the configured assumption. So
        once AMP slowed a worker down, it is not tried on the next straggler with a verification
        that would cost that worker's speed again; a worker it did speed up keeps it eligible."""
        return max(self.measured) if self.measured else self.config.assumed_speedup

    def enabled(self, worker: int) -> bool:
        return self.workers.get(worker, _WorkerAmp()).state in (AmpState.VERIFYING, AmpState.ON)

    def speedups(self) -> dict[int, float]:
        """speedup() of every worker whose AMP is on and verified (the others' is 1)."""
        return {w: s.speedup for w, s in self.workers.items() if s.state is AmpState.ON}

    def speedup(self, worker: int) -> float:
        """How much AMP speeds this worker up (1 when off), to normalise its timings."""
        w = self.workers.get(worker)
        return w.speedup if w is not None and w.state is AmpState.ON else 1.0

    def verifying(self) -> frozenset[int]:
        """Workers whose AMP switch-on awaits verification: their speed-up is not known yet."""
        return frozenset(w for w, s in self.workers.items() if s.state is AmpState.VERIFYING)

    def probe_ready(self, period: int) -> frozenset[int]:
        """Workers on AMP that finishing early may let out of the slow set now (see the module docstring)."""
        return frozenset(w for w, s in self.workers.items() if s.state is AmpState.ON and period >= s.probe_after_period)

    def decide(
        self,
        period: int,
        stragglers: frozenset[int],
        per_sample_s: Mapping[int, float],
        amp_reports: Mapping[int, int],
        fresh_per_sample_s: Mapping[int, float] | None = None,
        fresh_error: Mapping[int, float] | None = None,
    ) -> list[AmpDecision]:
        """per_sample_s: each worker's recent raw compute seconds per sample (AMP as it ran);
        amp_reports: how many of its recent reports ran with AMP on; fresh_per_sample_s: the same
        over the newest reports, the baseline a switch-on is judged against. The steadier median
        lags the very slowdown that made the worker a straggler: judged against it, AMP that sped a
        gpt-10m straggler up 1.6x read as 373 -> 357 ms/sample and was undone. fresh_error: the
        relative standard error of fresh_per_sample_s, from its reports' spread (what tells a failed
        verification that is measured from one that is noise; absent: every failure is final)."""
        decisions = []
        for worker, time_s in sorted(per_sample_s.items()):
            w = self.workers.setdefault(worker, _WorkerAmp())
            if w.last_toggle_period == period:
                continue
            baseline_s = (fresh_per_sample_s or {}).get(worker, time_s)
            decision = self._decide_one(period, worker, w, worker in stragglers, time_s, amp_reports.get(worker, 0),
                                        baseline_s, (fresh_error or {}).get(worker, 0.0))
            if decision is not None:
                w.last_toggle_period = period
                decisions.append(decision)
        return decisions

    def _decide_one(self, period: int, worker: int, w: _WorkerAmp, slow: bool, time_s: float, amp_reports: int,
                    baseline_s: float, error: float) -> AmpDecision | None:
        c = self.config
        if w.state is AmpState.RETRY and period >= w.retry_after_period:
            w.state = AmpState.OFF  # its hold has passed: tried again below if it is still slow
        if w.state is AmpState.OFF and slow and 0 <= w.recovered_period and period - w.recovered_period <= c.relapse_window_periods:
            w.probe_hold_periods = min(max(c.probe_hold_periods, 2 * w.probe_hold_periods), c.probe_hold_max_periods)
            w.state, w.probe_after_period = AmpState.ON, period + w.probe_hold_periods
            return AmpDecision(worker, True, f"relapsed {period - w.recovered_period} decisions after recovering: AMP back on "
                                             f"at its measured {w.speedup:.2f}x; next recovery check in {w.probe_hold_periods} decisions")
        if w.state is AmpState.OFF and slow:  # a new spell (or a retry): verified afresh, probed from the start
            w.state, w.baseline_s, w.baseline_error = AmpState.VERIFYING, baseline_s, error
            w.probe_hold_periods, w.probe_after_period = 0, -1
            return AmpDecision(worker, True, f"straggler: per-sample compute {baseline_s * 1e3:.3f} ms; trying AMP")
        if w.state is AmpState.VERIFYING and amp_reports >= c.verify_reports:
            return self._verdict(period, worker, w, time_s, error)
        if w.state is AmpState.ON and not slow:
            w.state, w.recovered_period = AmpState.OFF, period
            return AmpDecision(worker, False, "recovered: straggler no longer detected", recovered=True)
        if w.state is AmpState.REDUNDANT and not slow:
            w.state, w.untried = AmpState.OFF, False  # AMP was off already: nothing to send
        return None

    def _verdict(self, period: int, worker: int, w: _WorkerAmp, time_s: float, error: float) -> AmpDecision:
        """A switch-on has its fresh reports: keep AMP (it sped the worker up by min_gain), write it off (it did not,
        and the reports resolve that), or undo it and try again later (within their noise). Trials left open before
        are pooled with this one."""
        c = self.config
        trial_speedup = w.baseline_s / time_s
        self.measured.append(trial_speedup)
        trial_error = math.hypot(w.baseline_error, error)
        trials = [*w.open_trials, (math.log(trial_speedup), trial_error)]
        speedup, pooled_error = pooled_speedup(trials)
        over = f" over {len(trials)} trials" if len(trials) > 1 else ""
        if speedup * (1 - c.min_gain) >= 1:
            w.state, w.speedup, w.open_trials = AmpState.ON, speedup, []
            # just measured at this slowdown: running fast now means AMP over-compensates, not a recovery
            w.probe_hold_periods, w.probe_after_period = c.probe_hold_periods, period + c.probe_hold_periods
            return AmpDecision(worker, True, f"verified: AMP sped this worker up {speedup:.2f}x{over}; stays on")
        measured = f"{w.baseline_s * 1e3:.3f} -> {time_s * 1e3:.3f} ms/sample" + (f"; {speedup:.2f}x{over}" if over else "")
        # `speedup`, < 1 where AMP slowed the worker: batch sizing restores its plain speed with it
        if not reachable_within_noise(speedup, pooled_error, c.min_gain, c.resolve_z):
            w.state, w.open_trials = AmpState.INEFFECTIVE, []
            return AmpDecision(worker, False, f"AMP did not help ({measured}); undone, marked ineffective", speedup=speedup)
        w.retry_hold_periods = min(max(c.retry_hold_periods, 2 * w.retry_hold_periods), c.probe_hold_max_periods)
        w.state, w.retry_after_period, w.open_trials = AmpState.RETRY, period + w.retry_hold_periods, trials
        return AmpDecision(worker, False, f"AMP did not help ({measured}), but within the noise of its reports "
                                          f"(±{pooled_error:.0%}): undone; tried again in {w.retry_hold_periods} decisions",
                           speedup=speedup)

    def mark_redundant(self, worker: int) -> None:
        """Leave (or switch) AMP off for this worker until it is no longer a straggler."""
        w = self.workers.setdefault(worker, _WorkerAmp())
        w.state, w.speedup, w.untried = AmpState.REDUNDANT, 1.0, False

    def untried(self, stragglers) -> list[int]:
        """The stragglers AMP has not been tried on in this spell: off, or left off untried by `skip`."""
        def never_tried(w: _WorkerAmp | None) -> bool:
            return w is None or w.state is AmpState.OFF or (w.state is AmpState.REDUNDANT and w.untried)
        return sorted(s for s in stragglers if never_tried(self.workers.get(s)))

    def skip(self, workers) -> list[int]:
        """Leave AMP off, untried, for those of `workers` that are off; returns them."""
        off = [w for w in workers if self.workers.get(w, _WorkerAmp()).state is AmpState.OFF]
        for w in off:
            self.workers.setdefault(w, _WorkerAmp())
            self.workers[w].state, self.workers[w].untried = AmpState.REDUNDANT, True
        return off

    def skipped(self, worker: int) -> bool:
        """Left off untried by `skip` (batch sizes were expected to balance it)."""
        w = self.workers.get(worker)
        return w is not None and w.state is AmpState.REDUNDANT and w.untried

    def reconsider(self, workers) -> list[int]:
        """Those of `workers` left off untried by `skip` may be tried again (back to off); returns them."""
        back = [w for w in workers if w in self.workers and self.workers[w].state is AmpState.REDUNDANT
                and self.workers[w].untried]
        for w in back:
            self.workers[w].state, self.workers[w].untried = AmpState.OFF, False
        return back

    def forget(self, worker: int) -> None:
        self.workers.pop(worker, None)
