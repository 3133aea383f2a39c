import sys, statistics, tempfile
from pathlib import Path
from star.bench import BenchConfig, TraceSpec, run_sim
R = "benchmarks/results"; T = "../shared/traces/alibaba-pai-2020"
cases = {
 "mid3x": (f"{R}/strategies_mid3x_v14/mid3x.csv", None, 1.0),
 "rotating": (f"{R}/synthetic_traces/rotating_p20.csv", "0,1,2,3", 1.0),
 "static": (f"{R}/synthetic_traces/static.csv", None, 1.0),
 "heavy_tail": (f"{R}/synthetic_traces/heavy_tail.csv", None, 1.0),
 "job1": (f"{T}/job_1_norm.csv", "0,6,7,8", 0.025),
 "job2": (f"{T}/job_2_norm.csv", "1,3,5,9", 0.04),
 "heavy": (f"{R}/synthetic_traces/heavy_4x5_then_12x.csv", "0,1,2,3", 1.0),
 "transient": (f"{R}/synthetic_traces/transient_seed1.csv", "0,1,2,3", 1.0),
}
seeds = range(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
tmp = Path(tempfile.mkdtemp())
print(f"{'trace':11s} {'clean':>6s} {'ssgd':>6s} {'batch':>6s} {'auto':>6s}  mit_b  mit_a  a/b")
tot = []
for name, (path, tw, st) in cases.items():
    spec = TraceSpec(name, Path(path), tw, st)
    med = {}
    for strat in ("clean", "ssgd", "batch", "auto"):
        v = []
        for s in seeds:
            cfg = BenchConfig(traces=(), out=str(tmp), task="digits", workers=4, seed=s)
            r = run_sim(cfg, "ssgd" if strat == "clean" else strat, None if strat == "clean" else spec, tmp / name / strat / str(s))
            v.append(r["tta_s"])
        med[strat] = statistics.median(v)
    c, s_, b, a = med["clean"], med["ssgd"], med["batch"], med["auto"]
    mit = lambda x: (s_ - x) / (s_ - c) if s_ - c > 0.3 * c else float("nan")
    print(f"{name:11s} {c:6.2f} {s_:6.2f} {b:6.2f} {a:6.2f}  {mit(b):5.2f}  {mit(a):5.2f}  {a/min(b,s_):.3f}")
