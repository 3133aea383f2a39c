"""Simulator wall time at scale: workers x iterations for ssgd and auto.

    python -m benchmarks.sim_scale [--max-s 60]

Each run replays a 10-worker transient-straggler trace stretched to N workers
(seeded phase shifts), with compute noise, without stopping at the target, and the
real Controller deciding every second of simulated time. A combination whose
predicted wall time (one timed Controller decision x the number of decisions, plus the
engine) exceeds --max-s is skipped and marked so.
"""

from __future__ import annotations

import argparse
import sys
import time

from star.plan import ssgd
from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy
from star.sim import generators, sim_config, simulate

BASE_COMPUTE_S = 0.05


def decision_s(workers: int, mode: str) -> float:
    """Seconds of one Controller.decide over `workers` summaries (one straggler), best of 3."""
    controller = Controller(for_strategy(ControlConfig(), mode), workers, 64)
    plan = ssgd(range(workers), epoch=1)
    summaries = {w: WorkerSummary((3.0 if w == 1 else 1.0) * (1 + 0.01 * (w % 7)) * 1e-3, 0.01, 64, 0, 4)
                 for w in range(workers)}
    best = float("inf")
    for period in range(3):
        tick = time.perf_counter()
        controller.decide(period, plan, summaries, 0.0)
        best = min(best, time.perf_counter() - tick)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-s", type=float, default=60.0, help="skip combinations predicted to take longer")
    parser.add_argument("--workers", default="10,100,1000,10000")
    parser.add_argument("--iterations", default="1000,10000")
    parser.add_argument("--modes", default="ssgd,auto")
    args = parser.parse_args(argv)
    rows = []
    for mode in args.modes.split(","):
        for workers in map(int, args.workers.split(",")):
            per_decision = decision_s(workers, mode)
            for iterations in map(int, args.iterations.split(",")):
                decisions = iterations * BASE_COMPUTE_S * 1.1  # decision period 1 s of simulated time
                engine = 2e-7 * workers * iterations + 1e-4 * iterations
                predicted = per_decision * decisions + engine
                if predicted > args.max_s:
                    rows.append((mode, workers, iterations, None, None, None, f"skipped: predicted {predicted:.0f} s "
                                 f"({decisions:.0f} decisions x {per_decision:.3f} s)"))
                    print(rows[-1], file=sys.stderr, flush=True)
                    continue
                trace = generators.stretch_workers(generators.transient(10, iterations, seed=0), workers, seed=0)
                config = sim_config({"workers": workers, "iterations": iterations, "stop_at_target": False,
                                     "plan": {"mode": mode}, "cost": {"base_compute_s": BASE_COMPUTE_S, "compute_noise_cv": 0.05},
                                     "convergence": {"updates_to_target": iterations / 2}})
                tick = time.perf_counter()
                result = simulate(config, trace).result
                wall = time.perf_counter() - tick
                rows.append((mode, workers, iterations, round(wall, 2), result["controller_s"], result["decisions"],
                             f"updates={result['updates']} detections={result['straggler_detections']} "
                             f"switches={result['plan_switches']} amp={result['amp_toggles']}"))
                print(rows[-1], file=sys.stderr, flush=True)
    print("| mode | workers | iterations | wall_s | controller_s | decisions | notes |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join("" if v is None else str(v) for v in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
