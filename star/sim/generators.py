"""Seeded synthetic straggler scenarios as star.traces.Trace objects, and 10 -> N stretching.

Every generator takes (workers, iterations, seed) and returns a Trace whose rows are
step changes (a factor holds until the worker's next row, as star.traces replays
them), so a scenario with 1,000 workers stays small. Write one out with
`star.traces.write_simple_csv` to replay it in a real `star launch`.
"""

from __future__ import annotations

import numpy as np

from star.traces import Trace

SCENARIOS = ("static", "transient", "rotating", "heavy_tail", "contention")
# Shapes kept out of SCENARIOS (so out of `star bench`'s "synthetic" set), written to check auto on traces unlike the
# ones its rules were tuned on: `star bench --traces synthetic:NAME` and `python -m benchmarks.unseen_traces` replay them.
HELD_OUT = ("flapping", "ramp", "jitter", "bursts", "spikes", "recovering", "pauses")


def _trace(rows: list[tuple[int, int, float]], workers: int, iterations: int, name: str) -> Trace:
    """Every worker gets a row at 0 and one at `iterations` (so the span is the run's length)."""
    have = {(it, w) for it, w, _ in rows}
    rows = list(rows)
    rows += [(0, w, 1.0) for w in range(workers) if (0, w) not in have]
    last: dict[int, float] = {}
    for it, w, f in sorted(rows):
        last[w] = f
    rows += [(iterations, w, last[w]) for w in range(workers) if (iterations, w) not in have]
    return Trace.from_rows(rows, source=name)


def _straggler(workers: int, seed: int, worker: int | None) -> int:
    """The one slow worker of a single-straggler shape: `worker`, or drawn from the seed."""
    return int(np.random.default_rng(seed).integers(workers)) if worker is None else worker


def static(workers: int, iterations: int, seed: int = 0, spread: float = 0.5) -> Trace:
    """Static heterogeneity: each worker a fixed factor drawn from [1, 1 + spread]."""
    rng = np.random.default_rng(seed)
    factors = 1.0 + spread * rng.random(workers)
    return _trace([(0, w, float(f)) for w, f in enumerate(factors)], workers, iterations, "static")


def transient(workers: int, iterations: int, seed: int = 0, factor: float = 3.0, start_frac: float = 0.25,
              end_frac: float = 0.75, worker: int | None = None) -> Trace:
    """One straggler, `factor`x slower for the middle of the run (worker drawn from the seed if None)."""
    w = _straggler(workers, seed, worker)
    start, end = int(iterations * start_frac), int(iterations * end_frac)
    rows = [(0, w, 1.0)] if start > 0 else []  # slow from the start: its first row is the slow one
    return _trace(rows + [(start, w, factor), (end, w, 1.0)], workers, iterations, "transient")


def rotating(workers: int, iterations: int, seed: int = 0, factor: float = 3.0, period: int = 100,
             slow_fraction: float = 0.1) -> Trace:
    """Every `period` iterations a fresh random set of stragglers (slow_fraction of the workers)."""
    rng = np.random.default_rng(seed)
    count = max(1, int(round(workers * slow_fraction)))
    state = np.ones(workers)
    rows = [(0, w, 1.0) for w in range(workers)]
    for start in range(0, iterations, period):
        new = np.ones(workers)
        new[rng.choice(workers, count, replace=False)] = factor
        rows += [(start, int(w), float(new[w])) for w in np.flatnonzero(new != state) if start > 0]
        if start == 0:
            rows = [(0, w, float(new[w])) for w in range(workers)]
        state = new
    return _trace(rows, workers, iterations, "rotating")


def heavy_tail(workers: int, iterations: int, seed: int = 0, alpha: float = 2.5, block: int = 10,
               cap: float = 20.0) -> Trace:
    """Per-worker Pareto noise: a new factor 1 + Pareto(alpha)/10 (capped) every `block` iterations."""
    rng = np.random.default_rng(seed)
    starts = np.arange(0, iterations, block)
    factors = np.minimum(1.0 + rng.pareto(alpha, (workers, len(starts))) / 10.0, cap)
    rows = [(int(s), w, float(factors[w, j])) for w in range(workers) for j, s in enumerate(starts)]
    return _trace(rows, workers, iterations, "heavy_tail")


def contention(workers: int, iterations: int, seed: int = 0, hosts: int = 4, bursts: int = 5,
               length: int = 50, factor: float = 2.0) -> Trace:
    """Contention bursts: workers share `hosts` hosts (w mod hosts); a burst slows a whole host for `length`
    iterations, and a host under overlapping bursts stays slow until the last of them ends. (Before 29 Nov the
    first burst's end reset its host even while later bursts still ran; traces written then keep that shape.)"""
    rng = np.random.default_rng(seed)
    spans: dict[int, list[tuple[int, int]]] = {}
    for _ in range(bursts):
        host = int(rng.integers(hosts))
        start = int(rng.integers(max(1, iterations - length)))
        spans.setdefault(host, []).append((start, start + length))
    rows = []
    for host, intervals in spans.items():
        for start, end in merged_intervals(intervals):
            rows += [(it, w, f) for w in range(host, workers, hosts) for it, f in ((start, factor), (end, 1.0))]
    return _trace(rows, workers, iterations, "contention")


def flapping(workers: int, iterations: int, seed: int = 0, factor: float = 3.0, slow: int = 2, fast: int = 2,
             start: int = 4, worker: int | None = None) -> Trace:
    """One worker alternates: `factor`x slower for `slow` iterations, full speed for `fast`, from `start` on: a speed
    that changes faster than decisions act (worker drawn from the seed if None)."""
    w = _straggler(workers, seed, worker)
    rows = [(0, w, 1.0)]
    for begin in range(start, iterations, slow + fast):
        rows += [(begin, w, factor), (begin + slow, w, 1.0)]
    return _trace([r for r in rows if r[0] < iterations], workers, iterations, "flapping")


def ramp(workers: int, iterations: int, seed: int = 0, factor: float = 3.0, over: int = 40, step: int = 2,
         worker: int | None = None) -> Trace:
    """One worker slows gradually, from full speed to `factor`x over the first `over` iterations (a step every
    `step`), then stays there: a drift with no single jump for a detector to see."""
    w = _straggler(workers, seed, worker)
    rows = [(it, w, 1.0 + (factor - 1.0) * min(it, over) / over) for it in range(0, min(over, iterations) + 1, step)]
    return _trace([r for r in rows if r[0] < iterations], workers, iterations, "ramp")


def jitter(workers: int, iterations: int, seed: int = 0, amplitude: float = 0.4) -> Trace:
    """No straggler: every worker's every iteration slowed by its own factor drawn from [1, 1 + amplitude], a delay
    no remedy can predict (SSGD pays the slowest draw of each round)."""
    factors = 1.0 + amplitude * np.random.default_rng(seed).random((iterations, workers))
    return _trace([(it, w, float(factors[it, w])) for it in range(iterations) for w in range(workers)],
                  workers, iterations, "jitter")


def bursts(workers: int, iterations: int, seed: int = 0, factor: float = 3.0, length: int = 3, every: int = 10,
           start: int = 5) -> Trace:
    """Short bursts: every `every` iterations one random worker is `factor`x slower for `length` iterations, gone
    about as soon as a decision could act on it."""
    rng = np.random.default_rng(seed)
    rows = []
    for begin in range(start, iterations, every):
        w = int(rng.integers(workers))
        rows += [(begin, w, factor), (begin + length, w, 1.0)]
    return _trace([r for r in rows if r[0] < iterations], workers, iterations, "bursts")


def spikes(workers: int, iterations: int, seed: int = 0, factor: float = 5.0, rate: float = 0.05) -> Trace:
    """Independent one-iteration spikes: each worker's each iteration is `factor`x slower with probability `rate`.
    Nothing to predict: a cut made on a spike lands after it."""
    slow = np.random.default_rng(seed).random((iterations, workers)) < rate
    rows = {}
    for it, w in zip(*np.nonzero(slow)):
        rows[(int(it), int(w))] = factor
        if it + 1 < iterations and not slow[it + 1, w]:
            rows[(int(it) + 1, int(w))] = 1.0
    return _trace([(it, w, f) for (it, w), f in rows.items()], workers, iterations, "spikes")


def recovering(workers: int, iterations: int, seed: int = 0, factor: float = 3.0, over: int = 30, step: int = 3,
               worker: int | None = None) -> Trace:
    """One worker starts `factor`x slower and speeds up in steps to full speed over the first `over` iterations (a
    step every `step`): a straggler that recovers gradually (a cold cache warming, a neighbour's job winding down),
    the mirror of `ramp`, so a remedy must also be taken back without a jump to see."""
    w = _straggler(workers, seed, worker)
    rows = [(it, w, factor - (factor - 1.0) * min(it, over) / over) for it in range(0, min(over, iterations) + 1, step)]
    return _trace([r for r in rows if r[0] < iterations], workers, iterations, "recovering")


def pauses(workers: int, iterations: int, seed: int = 0, factor: float = 3.0, every: int = 8) -> Trace:
    """Job-wide stalls: every worker `factor`x slower together for one iteration in every `every` (a checkpoint,
    a shared file system), at a phase drawn from the seed. No straggler: SSGD pays them and no remedy can help,
    so a strategy that acts here only adds its own cost."""
    phase = int(np.random.default_rng(seed).integers(every))
    rows = []
    for it in range(phase, iterations, every):
        rows += [(it, w, factor) for w in range(workers)]
        rows += [(it + 1, w, 1.0) for w in range(workers) if it + 1 < iterations]
    return _trace(rows, workers, iterations, "pauses")


def merged_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Half-open [start, end) intervals joined where they overlap or touch, in order."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def generate(scenario: str, workers: int, iterations: int, seed: int = 0) -> Trace:
    """A named scenario with its default parameters."""
    makers = {"static": static, "transient": transient, "rotating": rotating, "heavy_tail": heavy_tail,
              "contention": contention, "flapping": flapping, "ramp": ramp, "jitter": jitter, "bursts": bursts,
              "spikes": spikes, "recovering": recovering, "pauses": pauses}
    if scenario not in makers:
        raise ValueError(f"scenario={scenario!r} is not one of {', '.join(SCENARIOS + HELD_OUT)}")
    return makers[scenario](workers, iterations, seed)


def stretch_workers(trace: Trace, workers: int, seed: int = 0) -> Trace:
    """N workers from a smaller trace: run worker i replays source worker i mod n, rotated by a
    seeded phase shift (so copies of one source worker do not straggle in lockstep).

    Replay wraps at the trace span, so a rotated worker's factor at iteration i is the
    source's factor at (i + shift) mod span; the first n workers replay the source exactly.
    """
    sources = trace.workers
    span = trace.max_iteration
    rng = np.random.default_rng(seed)
    phases = rng.integers(0, span, workers)
    phases[: len(sources)] = 0
    rows: list[tuple[int, int, float]] = []
    for w in range(workers):
        pairs = [(it, f) for it, f in trace.steps[sources[w % len(sources)]] if it < span] or [(0, 1.0)]
        shift = int(phases[w])
        its = [it for it, _ in pairs]

        def factor_at(i: int) -> float:
            return pairs[max(int(np.searchsorted(its, i, side="right")) - 1, 0)][1]

        moved = {0: factor_at(shift)}
        for it, f in pairs:
            moved.setdefault((it - shift) % span, f)
        moved[span] = factor_at((span - 1 + shift) % span)
        rows += [(it, w, f) for it, f in moved.items()]
    return Trace.from_rows(rows, source=f"{trace.source} x{workers}")
