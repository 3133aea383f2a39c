"""Simulator cost at scale: workers x iterations per strategy.

    python -m benchmarks.sim_scale [--max-s 60]                       # how cost grows (ssgd, auto)
    python -m benchmarks.sim_scale --workers 1000 --iterations 10000 \
        --modes ssgd,asgd,kofn,grouped,exclude,amp,batch,auto-heuristic,auto-learned   # every strategy

Each run replays a 10-worker transient-straggler trace stretched to N workers
(seeded phase shifts), with compute noise, without stopping at the target, and the
real Controller deciding every second of simulated time. Columns: wall_s and cpu_s
(process CPU seconds: on a shared machine the steadier figure) of the whole run,
controller_s (wall seconds inside Controller.decide, i.e. the coordinator's policy
classes) and engine_s = wall_s - controller_s (the simulator itself). A combination
whose predicted wall time (one timed Controller decision x the number of decisions,
plus the engine) exceeds --max-s is skipped and marked so.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from star.plan import ssgd
from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy
from star.sim import generators, sim_config, simulate

BASE_COMPUTE_S = 0.05


def mode_and_control(strategy: str) -> tuple[str, dict[str, str]]:
    """A --mode, or a bench name auto-heuristic / auto-learned (auto with that selector)."""
    if strategy.startswith("auto-"):
        return "auto", {"selector_kind": strategy.removeprefix("auto-")}
    return strategy, {}


def decision_s(workers: int, strategy: str) -> float:
    """Seconds of one Controller.decide over `workers` summaries (one straggler), best of 3."""
    mode, control = mode_and_control(strategy)
    controller = Controller(for_strategy(ControlConfig(**control), mode), workers, 64)
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
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sim_scale", description=__doc__.splitlines()[0])
    parser.add_argument("--max-s", type=float, default=60.0, help="skip combinations predicted to take longer")
    parser.add_argument("--workers", default="10,100,1000,10000")
    parser.add_argument("--iterations", default="1000,10000")
    parser.add_argument("--modes", default="ssgd,auto", help="strategies: --mode names, auto-heuristic, auto-learned")
    parser.add_argument("--out", default=None, help="also write the Markdown table to this file")
    args = parser.parse_args(argv)
    rows = []
    for strategy in args.modes.split(","):
        mode, control = mode_and_control(strategy)
        for workers in map(int, args.workers.split(",")):
            per_decision = decision_s(workers, strategy)
            for iterations in map(int, args.iterations.split(",")):
                decisions = iterations * BASE_COMPUTE_S * 1.1  # decision period 1 s of simulated time
                engine = 2e-7 * workers * iterations + 1e-4 * iterations
                predicted = per_decision * decisions + engine
                if predicted > args.max_s:
                    rows.append((strategy, workers, iterations, None, None, None, None, None,
                                 f"skipped: predicted {predicted:.0f} s ({decisions:.0f} decisions x {per_decision:.3f} s)"))
                    print(rows[-1], file=sys.stderr, flush=True)
                    continue
                trace = generators.stretch_workers(generators.transient(10, iterations, seed=0), workers, seed=0)
                config = sim_config({"workers": workers, "iterations": iterations, "stop_at_target": False,
                                     "plan": {"mode": mode}, "control": control,
                                     "cost": {"base_compute_s": BASE_COMPUTE_S, "compute_noise_cv": 0.05},
                                     "convergence": {"updates_to_target": iterations / 2}})
                tick, cpu = time.perf_counter(), time.process_time()
                result = simulate(config, trace).result
                wall, cpu = time.perf_counter() - tick, time.process_time() - cpu
                rows.append((strategy, workers, iterations, round(wall, 2), round(cpu, 2), result["controller_s"],
                             round(wall - result["controller_s"], 2), result["decisions"],
                             f"updates={result['updates']} detections={result['straggler_detections']} "
                             f"switches={result['plan_switches']} amp={result['amp_toggles']}"))
                print(rows[-1], file=sys.stderr, flush=True)
    lines = ["| strategy | workers | iterations | wall_s | cpu_s | controller_s | engine_s | decisions | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]
    print("\n".join(lines))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(f"`python -m benchmarks.sim_scale {' '.join(argv if argv is not None else sys.argv[1:])}`\n\n"
                                  + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
