"""An unseen shape written on 5 Dec (08:45 UTC) before any real run of it: most of the job straggles. From iteration
5 on, workers 1, 2 and 3 run 2x, 2.5x and 3x slower, each iteration times a lognormal jitter (sigma 0.2); worker 0
jitters by sigma 0.05. A factor is never below 1. 4 workers, 80 iterations, numpy seed 11, fixed before the first
run. With three of four slow, the median worker is slow: the detector's reference moves. Run from the repository root."""
import numpy as np

from star.traces import Trace, write_simple_csv

LEVELS = {0: 1.0, 1: 2.0, 2: 2.5, 3: 3.0}
rng = np.random.default_rng(11)
rows = []
for worker, level in LEVELS.items():
    for it in range(81):
        factor = (level if it >= 5 else 1.0) * float(np.exp(rng.normal(0.0, 0.2 if level > 1 else 0.05)))
        rows.append((it, worker, round(max(1.0, factor), 3)))
write_simple_csv(Trace.from_rows(rows, source="three_slow"), "benchmarks/results/strategies_unseen_three_slow_v1/three_slow.csv")
