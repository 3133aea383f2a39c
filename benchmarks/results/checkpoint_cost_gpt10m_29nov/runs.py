"""STAR SSGD clean on gpt-10m (4 workers, 2 PSs) with the PSs' default checkpoints every 10 s against none, interleaved:
seconds per round the way benchmarks.ddp_vs_star measures them (its s_per_iter on curve.csv)."""
import json, shutil, sys
from pathlib import Path
from benchmarks.ddp_vs_star import s_per_iter
from star.config import JobConfig, from_dict
from star.launch import launch_or_stop
out = Path(sys.argv[3])
for seed in range(int(sys.argv[1]), int(sys.argv[2])):
    for every_s in (10.0, 0.0):
        d = out / f"seed{seed}_ckpt{int(every_s)}"
        shutil.rmtree(d, ignore_errors=True)
        r = launch_or_stop(from_dict(JobConfig, {"task": "gpt-10m", "workers": 4, "ps": 2, "out": str(d), "seed": seed,
                                                 "max_time_s": 60, "plan": {"mode": "ssgd"}, "threads_per_process": 1,
                                                 "faults": {"checkpoint_every_s": every_s}}))
        print(json.dumps({"seed": seed, "checkpoint_every_s": every_s, "s_per_iter": s_per_iter(d / "curve.csv"),
                          "updates": r.get("updates")}), flush=True)
        shutil.rmtree(d, ignore_errors=True)
