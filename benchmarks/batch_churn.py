"""Batch-size churn and TTA of `batch` and `auto` in the simulator (which drives the real Controller):
the current batch/AMP mechanism against the earlier one's settings, on noisy compute times.

    python -m benchmarks.batch_churn --seeds 8 --out benchmarks/results/batch_churn

"old" = raw speeds (speed_alpha 1, no band, no confirmation), a 10% min gain with no change cost,
and AMP tried on every straggler regardless of batch sizing (assumed_speedup 1000). Prints one
row per (trace, noise CV, strategy): median simulated TTA over seeds and the resizes per run.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.strategies import middle_half_trace
from star.sim.config import sim_config
from star.sim.engine import simulate

OLD = {"batching": {"speed_alpha": 1.0, "speed_band": 0.0, "speed_confirm": 1, "min_gain": 0.1, "change_cost_iters": 0.0},
       "amp_policy": {"assumed_speedup": 1000.0}}
JOB1 = "../shared/traces/alibaba-pai-2020/job_1_norm.csv"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batch_churn", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--noise", default="0.05,0.15", help="compute-time noise CVs")
    parser.add_argument("--calibration", default="star/sim/calibrations/digits.toml")
    parser.add_argument("--job1", default=JOB1, help="Alibaba PAI job_1 (workers 6,7,8,9, stretch 0.02)")
    parser.add_argument("--out", default="benchmarks/results/batch_churn")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"mid3x": {"trace": {"path": str(middle_half_trace(Path(tmp) / "mid3x.csv", 3, 3.0, 20, 60, 4))}},
                 "job1_6789": {"trace": {"path": args.job1, "workers": "6,7,8,9", "stretch": 0.02}}, "none": {}}
        rows = []
        for trace, case in cases.items():
            for noise in (float(n) for n in args.noise.split(",")):
                for label, mode, control in (("batch-old", "batch", OLD), ("batch", "batch", {}), ("auto-old", "auto", OLD),
                                             ("auto", "auto", {}), ("ssgd", "ssgd", {})):
                    ttas, resizes = [], []
                    for seed in range(args.seeds):
                        result = simulate(sim_config({"workers": 4, "seed": seed, **case, "plan": {"mode": mode}, "control": control,
                                                      "cost": {"compute_noise_cv": noise}}, args.calibration))
                        ttas.append(result.result["tta_s"] if result.result.get("reached") else float("inf"))
                        resizes.append(sum(1 for e in result.events if e.get("kind") == "batch_sizes"))
                    rows.append({"trace": trace, "noise_cv": noise, "strategy": label, "tta_s": statistics.median(ttas),
                                 "resizes_median": statistics.median(resizes), "resizes_max": max(resizes)})
                    print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    with open(out / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
