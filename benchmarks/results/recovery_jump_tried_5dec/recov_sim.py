"""Simulated shapes where a sustained straggler recovers well before the target (the mid3x shape): auto and batch."""
import sys, json, tempfile
from pathlib import Path
from benchmarks.unseen_traces import Case, run_case
from star.sim import generators as g
from star.traces import write_simple_csv
shapes = {}
for factor in (2.0, 3.0, 5.0):
    for (a, b) in ((0.1, 0.25), (0.1, 0.3), (0.15, 0.3)):
        for seed in (1, 2, 3):
            shapes[f"transient {factor}x {a}-{b} s{seed}"] = (lambda s=seed, f=factor, a=a, b=b: g.transient(4, 100, s, factor=f, start_frac=a, end_frac=b))
out = {}
with tempfile.TemporaryDirectory() as d:
    for name, make in shapes.items():
        case = Case(name, lambda path, make=make: write_simple_csv(make(), path))
        out[name] = run_case(case, 3, 4, Path(d))
        print(name, {k: round(v, 3) for k, v in out[name].items()}, flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
