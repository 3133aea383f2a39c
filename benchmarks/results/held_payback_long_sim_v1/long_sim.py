import sys, statistics, json
from pathlib import Path
from star.bench import BenchConfig, TraceSpec, run_sim
from star.sim import generators as g
from star.traces import write_simple_csv
out=Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True); U=float(sys.argv[2])
cases=[]
for s in [5,7,9]:
    p=out/f"static{s}.csv"; write_simple_csv(g.static(4,100,s,spread=0.8), p); cases.append((f"static{s}", TraceSpec(f"s{s}", p, None, 1.0)))
J="../shared/traces/alibaba-pai-2020/"
for f, ws in [("job_2_norm.csv","0,3,5,9"),("job_2_norm.csv","0,1,4,8"),("job_1_norm.csv","0,3,8,9"),("job_1_norm.csv","3,4,5,6")]:
    cases.append((f"{f[:5]} {ws}", TraceSpec(f[:5]+ws.replace(",",""), Path(J+f), ws, 0.1)))
for name, spec in cases:
    res={}
    for strat in ["ssgd","batch","auto"]:
        t=[]
        for seed in range(5):
            cfg=BenchConfig(traces=(), out=str(out), task="digits", workers=4, seed=seed)
            r=run_sim(cfg, strat, spec, out/f"{spec.name}_{strat}_{seed}", overrides={"convergence": {"updates_to_target": U}})
            t.append(r["tta_s"] if r.get("reached") else float("inf"))
        res[strat]=t
    print(name, {k: round(statistics.median(v),2) for k,v in res.items()}, "auto per seed", [round(x,1) for x in res["auto"]], flush=True)
