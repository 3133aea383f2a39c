"""An unseen shape written on 5 Dec (07:40 UTC) before any run of it: two stragglers whose speed fluctuates, the kind
of job the PAI mini-batch-time notes describe as "multiple stragglers; the mini-batch time may fluctuate".
Workers 1 and 2 hold a slowdown level, redrawn every 12 iterations uniformly in [1.5, 3.5]; each of their iterations
is that level times a lognormal jitter (sigma 0.3). Workers 0 and 3 jitter lightly (sigma 0.1). A factor is never
below 1 (the replay can only slow a worker down). 4 workers, 80 iterations (digits runs take 36-46), numpy seed 7,
fixed before the first run. Run from the repository root."""
import numpy as np

from star.traces import Trace, write_simple_csv

W, N, BLOCK = 4, 80, 12
rng = np.random.default_rng(7)
rows = []
for worker in range(W):
    level = 1.0
    for it in range(N + 1):
        if worker in (1, 2):
            if it % BLOCK == 0:
                level = rng.uniform(1.5, 3.5)
            factor = level * np.exp(rng.normal(0.0, 0.3))
        else:
            factor = np.exp(rng.normal(0.0, 0.1))
        rows.append((it, worker, round(max(1.0, float(factor)), 3)))
write_simple_csv(Trace.from_rows(rows, source="fluct_two"), "benchmarks/results/strategies_unseen_fluct_two_v1/fluct_two.csv")
