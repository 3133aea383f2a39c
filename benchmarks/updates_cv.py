"""How much updates-to-target varies across seeds: the noise floor of every TTA comparison.

TTA = updates to target x seconds per update. Seconds per update barely moves between
runs; updates to target moves with the seed (model init and data order). This runs the
same synchronous SGD arithmetic as the cluster (`star.tasks.calibrate.simulate`: each
worker's gradient on its own shard, averaged, one optimizer step) in one process, for
several seeds, evaluates at every `--every` updates as the evaluator does, applies the
evaluator's own target rule (`star.tta.first_reaching`, mean of the last `--smoothing`
evaluations) and prints, per target, each seed's updates to target and their CV.

    python -m benchmarks.updates_cv --task digits --seeds 8 --lr 0.005 --targets 0.9,0.95
    python -m benchmarks.updates_cv --task digits --seeds 8 --fixed-init   # data order alone
    python -m benchmarks.updates_cv --task digits --seeds 8 --metric loss --targets 0.3,0.2,0.15

`--fixed-init` builds every seed's model from seed 0, so only the data order varies: the
difference to a plain run is the initialisation's share of the spread. `--metric loss` puts the
target on the held-out loss (lower is better) instead of the task's metric, to see whether a
continuous metric crosses its target less noisily. Last line: one
JSON object with the settings and `cv` per target.

    python -m benchmarks.updates_cv --task digits --seeds 8 --cut-round 12 --cut-keep 31

`--cut-round R --cut-keep K` runs every seed twice, the second time with one round changed as a
straggler's batch cut at once changes it (in round R the last worker computes only the first K
of its samples, weighted by samples: star.tasks.calibrate.simulate `cut`), and prints per target
each seed's updates to target with and without the cut and their ratio: how far a paired
comparison moves when a strategy touches one round's gradient and nothing else.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from typing import Sequence

import torch

from star.tasks.calibrate import simulate
from star.tasks.registry import get_task, TaskSpecError
from star.tta import coefficient_of_variation, EvalPoint, first_reaching


def updates_to_targets(history: Sequence[tuple[int, float]], targets: Sequence[float], higher_is_better: bool,
                       smoothing: int) -> list[int | None]:
    """Per target, the update at which the smoothed metric first reached it (None: never)."""
    points = [EvalPoint(float(step), step, metric) for step, metric in history]
    reached = [first_reaching(points, t, higher_is_better, smoothing) for t in targets]
    return [None if p is None else p.version for p in reached]


def spread_rows(per_seed: dict[int, list[int | None]], targets: Sequence[float]) -> list[dict]:
    """One row per target: every seed's updates to target, how many reached it, their CV."""
    rows = []
    for i, target in enumerate(targets):
        updates = [per_seed[s][i] for s in sorted(per_seed)]
        reached = [u for u in updates if u is not None]
        cv = coefficient_of_variation(reached)
        rows.append({"target": target, "updates": updates, "reached": f"{len(reached)}/{len(updates)}",
                     "cv": None if cv is None else round(cv, 4)})
    return rows


def paired_cut_rows(plain: dict[int, list[int | None]], cut: dict[int, list[int | None]],
                    targets: Sequence[float]) -> list[dict]:
    """One row per target: each seed's updates to target with the cut, its ratio to the same seed without it (None
    where either missed), how many seeds did not move, the median ratio and the mean |log ratio|."""
    rows = []
    for i, target in enumerate(targets):
        pairs = [(plain[s][i], cut[s][i]) for s in sorted(plain)]
        ratios = [None if a is None or b is None else round(b / a, 4) for a, b in pairs]
        seen = [r for r in ratios if r is not None]
        rows.append({"target": target, "updates_cut": [b for _, b in pairs], "ratios": ratios,
                     "unchanged": f"{sum(r == 1.0 for r in seen)}/{len(seen)}",
                     "median_ratio": round(statistics.median(seen), 4) if seen else None,
                     "mean_abs_log_ratio": round(statistics.fmean(abs(math.log(r)) for r in seen), 4) if seen else None})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.updates_cv", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="digits")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=8, help="seeds S..S+N-1 (S: --first-seed)")
    parser.add_argument("--first-seed", type=int, default=0, help="S: lets a long scan go on where another stopped")
    parser.add_argument("--lr", type=float, default=None, help="default: the task's")
    parser.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default=None, help="default: the task's")
    parser.add_argument("--momentum", type=float, default=None, help="SGD's momentum or Adam's beta1; default: the task's")
    parser.add_argument("--batch-size", type=int, default=None, help="per worker; default: the task's")
    parser.add_argument("--max-steps", type=int, default=160)
    parser.add_argument("--every", type=int, default=2, help="evaluate every this many updates (the evaluator's default)")
    parser.add_argument("--smoothing", type=int, default=3, help="target on the mean of the last this many evaluations")
    parser.add_argument("--targets", default=None, help="comma-separated; default: the task's target (required with --metric loss)")
    parser.add_argument("--metric", choices=("task", "loss"), default="task", help="the task's metric, or its held-out loss")
    parser.add_argument("--fixed-init", action="store_true", help="every seed's model built from seed 0: data order alone varies")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cut-round", type=int, default=None, help="also run each seed with this round cut (0-based)")
    parser.add_argument("--cut-keep", type=int, default=None, help="samples the last worker keeps in the cut round")
    args = parser.parse_args(argv)
    if (args.cut_round is None) != (args.cut_keep is None):
        parser.error("--cut-round and --cut-keep go together")
    if args.first_seed < 0:
        parser.error(f"--first-seed must be >= 0, got {args.first_seed}")
    if args.cut_round is not None and (args.cut_round < 0 or args.cut_keep < 1):
        parser.error(f"--cut-round must be >= 0 and --cut-keep >= 1, got {args.cut_round} and {args.cut_keep}")
    for name in ("seeds", "max_steps", "every", "smoothing", "workers", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    torch.set_num_threads(args.threads)
    try:
        task = get_task(args.task)
    except TaskSpecError as exc:
        parser.error(f"--task {args.task!r}: {exc}")
    if args.optimizer is not None or args.momentum is not None:
        try:
            task = dataclasses.replace(task, default_optimizer=args.optimizer or task.default_optimizer,
                                       default_momentum=task.default_momentum if args.momentum is None else args.momentum)
        except ValueError as exc:
            parser.error(str(exc))
    if args.metric == "loss" and task.metric_name != "loss":
        if args.targets is None:
            parser.error("--metric loss needs --targets (held-out loss values)")
        task = dataclasses.replace(task, metric_name="loss", higher_is_better=False)
    try:
        targets = [task.default_target] if args.targets is None else [float(t) for t in args.targets.split(",")]
    except ValueError:
        parser.error(f"--targets must be comma-separated numbers, got {args.targets!r}")
    never = float("inf") if task.higher_is_better else float("-inf")  # run all max_steps: every target is read afterwards
    per_seed, per_seed_cut = {}, {}
    cuts = [None] if args.cut_round is None else [None, (args.cut_round, args.cut_keep)]
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for cut, into in zip(cuts, (per_seed, per_seed_cut)):
            result = simulate(task, args.workers, args.max_steps, args.every, seed, args.lr, args.batch_size, never,
                              init_seed=0 if args.fixed_init else None, cut=cut)
            into[seed] = updates_to_targets(result.history, targets, task.higher_is_better, args.smoothing)
        print(f"seed {seed}: updates to target {dict(zip(targets, per_seed[seed]))}"
              + (f", with the cut {dict(zip(targets, per_seed_cut[seed]))}" if per_seed_cut else ""), file=sys.stderr, flush=True)
    rows = spread_rows(per_seed, targets)
    for row in rows:
        print(f"{task.metric_name} target {row['target']}: updates {row['updates']} reached {row['reached']} CV {row['cv']}")
    cut_rows = paired_cut_rows(per_seed, per_seed_cut, targets) if per_seed_cut else []
    for row in cut_rows:
        print(f"{task.metric_name} target {row['target']}, round {args.cut_round} cut to {args.cut_keep}: updates "
              f"{row['updates_cut']} ratio to uncut {row['ratios']} unchanged {row['unchanged']} "
              f"median {row['median_ratio']} mean |log ratio| {row['mean_abs_log_ratio']}")
    print(json.dumps({"task": task.name, "metric": task.metric_name, "workers": args.workers, "lr": args.lr or task.default_lr,
                      "optimizer": task.default_optimizer, "momentum": task.default_momentum,
                      "batch_size": args.batch_size or task.default_batch_size, "smoothing": args.smoothing,
                      "every": args.every, "fixed_init": args.fixed_init, "seeds": args.seeds, "first_seed": args.first_seed,
                      "cv": {str(r["target"]): r["cv"] for r in rows},
                      **({"cut_round": args.cut_round, "cut_keep": args.cut_keep,
                          "cut_median_ratio": {str(r["target"]): r["median_ratio"] for r in cut_rows},
                          "cut_mean_abs_log_ratio": {str(r["target"]): r["mean_abs_log_ratio"] for r in cut_rows}}
                         if cut_rows else {})}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
