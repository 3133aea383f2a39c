"""Probe: new unseen shapes in the simulator (not committed)."""
import sys, json, tempfile
from pathlib import Path
import numpy as np
sys.path.insert(0, "/work/main")
from star.sim.generators import _trace
from star.traces import write_simple_csv

W, N = 4, 100

def global_slow(s):
    return _trace([r for w in range(W) for r in ((25, w, 2.0), (75, w, 1.0))], W, N, "global")
def two_stragglers(s):
    rng = np.random.default_rng(s); a, b = rng.choice(W, 2, replace=False)
    return _trace([(20, int(a), 2.0), (20, int(b), 4.0)], W, N, "two")
def extreme(s):
    w = int(np.random.default_rng(s).integers(W))
    return _trace([(25, w, 12.0), (75, w, 1.0)], W, N, "extreme")
def stepdown(s):
    w = int(np.random.default_rng(s).integers(W))
    return _trace([(20, w, 4.0), (45, w, 2.0), (70, w, 1.0)], W, N, "stepdown")
def spikes(s):
    rng = np.random.default_rng(s); rows = []
    for it in range(N):
        for w in range(W):
            if rng.random() < 0.05:
                rows += [(it, w, 8.0), (it + 1, w, 1.0)]
    rows = [r for r in rows if r[0] < N]
    # keep one row per (it, w): a spike start wins over a previous end at the same iteration
    d = {}
    for it, w, f in rows:
        d[(it, w)] = max(d.get((it, w), 0), f)
    return _trace([(it, w, f) for (it, w), f in d.items()], W, N, "spikes")
def half_slow(s):
    rng = np.random.default_rng(s); a, b = rng.choice(W, 2, replace=False)
    return _trace([(0, int(a), 2.0), (0, int(b), 2.0)], W, N, "half")
def late_onset(s):
    w = int(np.random.default_rng(s).integers(W))
    return _trace([(60, w, 3.0)], W, N, "late")
def slow_wave(s):
    w = int(np.random.default_rng(s).integers(W))
    return _trace([(it, w, 1.0 + 1.0 * (1 - np.cos(2 * np.pi * it / 40)) ) for it in range(0, N, 2)], W, N, "wave")

shapes = dict(global_slow=global_slow, two_stragglers=two_stragglers, extreme=extreme, stepdown=stepdown,
              spikes=spikes, half_slow=half_slow, late_onset=late_onset, slow_wave=slow_wave)

def make_spikes(p, factor):
    def f(s):
        rng = np.random.default_rng(s); d = {}
        for it in range(N):
            for w in range(W):
                if rng.random() < p:
                    d[(it, w)] = factor
                    if (it + 1, w) not in d and it + 1 < N:
                        d[(it + 1, w)] = 1.0
        return _trace([(it, w, f) for (it, w), f in d.items()], W, N, "spikes")
    return f
for p in (0.02, 0.05, 0.1):
    for fac in (3.0, 8.0):
        shapes[f"spikes_p{p}_x{fac:g}"] = make_spikes(p, fac)
from star.sim import generators as _g
shapes["flap32"] = lambda s: _g.flapping(W, N, s)
shapes["flap23"] = lambda s: _g.flapping(W, N, s, factor=2.0, slow=3, fast=3)
shapes["bursts"] = lambda s: _g.bursts(W, N, s)
shapes["transient3"] = lambda s: _g.transient(W, N, s)
