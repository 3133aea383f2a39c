"""The two traces of 29 Nov, late afternoon (run from the repository root): every worker 2x slower over iterations
10-30 (a shared slowdown, no straggler), and two stragglers of different speeds (worker 1 2x, worker 3 4x, from
iteration 8 on). Iteration-indexed step changes, 4 workers, 60 iterations (digits runs take 36-46)."""
from star.traces import Trace, write_simple_csv

R = "benchmarks/results"
W, N = 4, 60
global_rows = [(it, w, f) for w in range(W) for it, f in ((0, 1.0), (10, 2.0), (30, 1.0), (N, 1.0))]
write_simple_csv(Trace.from_rows(global_rows, source="global"), f"{R}/strategies_unseen_global_v1/global_2x_10to30.csv")
two_rows = [(0, w, 1.0) for w in range(W)] + [(8, 1, 2.0), (8, 3, 4.0)] + [(N, w, {1: 2.0, 3: 4.0}.get(w, 1.0)) for w in range(W)]
write_simple_csv(Trace.from_rows(two_rows, source="two"), f"{R}/strategies_unseen_two_v1/two_2x_4x_from8.csv")
