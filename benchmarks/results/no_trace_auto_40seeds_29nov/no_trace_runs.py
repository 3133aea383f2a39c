"""No-trace auto runs, to catch a resize on noise and keep its events."""
import json, shutil, sys
from pathlib import Path
from star.config import JobConfig, from_dict
from star.launch import launch_or_stop
out = Path("/tmp/noise_hunt")
for seed in range(int(sys.argv[1]), int(sys.argv[2])):
    d = out / f"seed{seed}"
    shutil.rmtree(d, ignore_errors=True)
    r = launch_or_stop(from_dict(JobConfig, {"task": "digits", "workers": 4, "ps": 2, "out": str(d), "seed": seed,
                                             "max_time_s": 150, "plan": {"mode": "auto"}}))
    print(seed, r["tta_s"], r.get("updates_to_target"), r.get("straggler_detections"), r.get("batch_resizes"), r.get("amp_toggles"), flush=True)
    if not (r.get("batch_resizes") or r.get("straggler_detections") or r.get("amp_toggles")):
        for sub in ("checkpoints", "tensorboard", "logs"):
            shutil.rmtree(d / sub, ignore_errors=True)
