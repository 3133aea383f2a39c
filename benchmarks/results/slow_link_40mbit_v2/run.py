import json, sys, time
from pathlib import Path
sys.path.insert(0, "/work/main")
from benchmarks.multihost import run_job
from benchmarks.netns import NetNamespaces
from star.config import JobConfig, from_dict
ARMS = {"batch": ("batch", {}), "auto": ("auto", {}), "auto-nosel": ("auto", {"selector": False})}
out = Path("/tmp/nosel/runs")
with NetNamespaces(nodes=4) as net:
    net.cap(1, rate_mbit=40.0)
    names = list(ARMS)
    for seed in range(3):
        for arm in names[seed % 3:] + names[:seed % 3]:
            mode, control = ARMS[arm]
            d = out / f"{arm}-seed{seed}"
            cfg = from_dict(JobConfig, {"task": "digits", "workers": 4, "ps": 2, "out": str(d / "job"), "max_time_s": 150.0,
                                        "seed": seed, "plan": {"mode": mode}, "transport": "socket", "control": control,
                                        "node": {"ps_ranks": "0,2"}, "placement": {"replace": False, "cpu_aware": False}})
            r = run_job(net, cfg, d, timeout_s=330)
            print(json.dumps({"arm": arm, "seed": seed, "tta_s": r["tta_s"], "updates": r["updates"]}), flush=True)
