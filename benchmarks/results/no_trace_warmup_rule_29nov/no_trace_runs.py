"""No-trace auto runs that keep every run's reports (iterations.csv) and events, for replay under both rules."""
import shutil, sys
from pathlib import Path
from star.config import JobConfig, from_dict
from star.launch import launch_or_stop
out = Path(sys.argv[3])
for seed in range(int(sys.argv[1]), int(sys.argv[2])):
    d = out / f"seed{seed}"
    shutil.rmtree(d, ignore_errors=True)
    r = launch_or_stop(from_dict(JobConfig, {"task": "digits", "workers": 4, "ps": 2, "out": str(d), "seed": seed,
                                             "max_time_s": 150, "plan": {"mode": "auto"}}))
    print(seed, r["tta_s"], r.get("updates_to_target"), r.get("straggler_detections"), r.get("batch_resizes"), r.get("amp_toggles"), flush=True)
    for sub in ("checkpoints", "tensorboard", "logs"):
        shutil.rmtree(d / sub, ignore_errors=True)
