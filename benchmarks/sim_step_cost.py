"""Batch sizing and auto in the simulator when a step has a fixed part (a GPU's), with the workers reporting it
(`star.worker.step_cost`, the rule since 28 Nov) or not (the rule before), on mid3x at 4 workers.

    python -m benchmarks.sim_step_cost [--seeds 5] [--shares 0,0.3,0.6,0.8]

Per share of the step that is fixed: the median TTA over seeds of ssgd, batch and auto, and the smallest batch
batch sizing gave any worker in each seed. Ends with one JSON line of the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics

from star.sim.config import sim_config
from star.sim.engine import simulate

TRACE = "benchmarks/results/strategies_mid3x_v14/mid3x.csv"
CALIBRATION = "star/sim/calibrations/digits.toml"


def run(mode: str, share: float, report: bool, seed: int) -> tuple[float, int | None]:
    config = sim_config({"plan": {"mode": mode}, "workers": 4, "seed": seed, "calibration": CALIBRATION,
                         "trace": {"path": TRACE}, "cost": {"fixed_compute_share": share, "report_step_cost": report}})
    result = simulate(config)
    sizes = [min(int(v) for v in e["sizes"].values()) for e in result.events if e.get("kind") == "batch_sizes"]
    return result.result.get("tta_s") or float("inf"), (min(sizes) if sizes else None)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sim_step_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--shares", default="0,0.3,0.6,0.8")
    args = p.parse_args()
    medians = {}
    print("| fixed share | strategy | step cost reported | median TTA s | smallest batch per seed |")
    print("|---|---|---|---|---|")
    for share in (float(s) for s in args.shares.split(",")):
        for mode in ("ssgd", "batch", "auto"):
            for report in ((True, False) if share and mode != "ssgd" else (True,)):
                runs = [run(mode, share, report, seed) for seed in range(args.seeds)]
                tta = round(statistics.median(t for t, _ in runs), 2)
                medians[f"{share}/{mode}/{'reported' if report else 'unreported'}"] = tta
                print(f"| {share} | {mode} | {'yes' if report else 'no'} | {tta} | {[m for _, m in runs]} |", flush=True)
    print(json.dumps(medians))


if __name__ == "__main__":
    main()
