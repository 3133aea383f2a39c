"""Copy of benchmarks/updates_cv.py (STAR) with levers for the updates-to-target CV scan.

Added over the repo script:
  --ema-decay D1,D2,...  also evaluate an exponential moving average of the parameters,
                         maintained once per applied update (version) exactly as a PS could
                         over its flat shard after optimizer.step():
                             ema.mul_(d).add_(param, alpha=1 - d)      # i.e. ema.lerp_(param, 1 - d)
                         ema starts as the initial parameters (version 0). The raw parameters
                         are always evaluated too (variant "raw"); training never sees the ema.
  --warmup N             linear lr warmup: update k (1-based) uses lr * min(1, k / N).
  --every E              evaluate every E updates (as before); analyse.py can subsample an
                         every-1 run to every-2 exactly (evaluation does not touch training).
  --smoothing S1,S2,...  several smoothing windows at once.
  every evaluation records accuracy AND held-out loss in one forward (same accuracy as task.evaluate).
  --ema-every E2         evaluate the ema variants every E2 updates (default: --every).
  --eval-from N          no evaluation before update N (cost saving).
  --dump PATH            per seed and variant, the full eval curve (step, accuracy, loss), JSON.
  --stop-acc A           stop evaluating a variant once its mean-of-max(smoothing) accuracy >= A, and
                         the seed once all variants have (targets above A are then not measurable).
Training arithmetic is star.tasks.calibrate.simulate's: each worker's gradient on its own
BatchStream shard, loss / workers, summed, one SGD(momentum 0.9) step.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

import numpy as np
import torch
from torch.nn import functional as F

from star.tasks.calibrate import make_optimizer
from star.tasks.registry import get_task
from star.tasks.sharding import BatchStream
from star.tta import EvalPoint, coefficient_of_variation, first_reaching


def evaluate_both(task, model) -> tuple[float, float]:
    """(accuracy, mean held-out cross-entropy) in one pass; accuracy equals task.evaluate's."""
    model.eval()
    correct, loss_sum, count = 0, 0.0, 0
    with torch.no_grad():
        for inputs, targets in task.heldout_batches():
            out = model(inputs)
            correct += (out.argmax(dim=-1) == targets).sum().item()
            loss_sum += float(F.cross_entropy(out, targets, reduction="sum").item())
            count += inputs.shape[0]
    model.train()
    return correct / count, loss_sum / count


def run_seed(task, seed, workers, max_steps, every, ema_every, eval_from, lr, batch_size, decays, warmup,
             stop_acc, stop_smoothing, init_seed=None):
    model = task.build_model(seed if init_seed is None else init_seed)
    optimizer = make_optimizer(task, model.parameters(), lr)
    base_lr = optimizer.param_groups[0]["lr"]
    streams = [BatchStream(task.train, w, workers, seed) for w in range(workers)]
    emas = {d: copy.deepcopy(model) for d in decays}  # ema params live in a model copy, for evaluation
    params = list(model.parameters())
    models = {"raw": model} | {f"ema{d}": m for d, m in emas.items()}
    cadence = {"raw": every} | {f"ema{d}": ema_every for d in decays}
    curves = {v: [] for v in models}
    done = set()  # variants that reached stop_acc: no longer evaluated
    step = 0
    for step in range(1, max_steps + 1):
        if warmup:
            for g in optimizer.param_groups:
                g["lr"] = base_lr * min(1.0, step / warmup)
        optimizer.zero_grad()
        for stream in streams:
            inputs, targets = stream.next_batch(batch_size)
            (task.loss_fn(model(inputs), targets) / workers).backward()
        optimizer.step()
        with torch.no_grad():  # what a PS would do per version over its shard
            for d, ema_model in emas.items():
                for e, p in zip(ema_model.parameters(), params):
                    e.mul_(d).add_(p, alpha=1 - d)
        if step < eval_from:
            continue
        for v, m in models.items():
            if v in done or step % cadence[v]:
                continue
            curves[v].append((step,) + evaluate_both(task, m))
            c = curves[v]
            # a variant evaluated every update stops only once its every-2 subsample has reached too
            subs = [c] + ([[r for r in c if r[0] % 2 == 0]] if cadence[v] == 1 else [])
            if stop_acc is not None and all(len(x) >= stop_smoothing and np.mean([a for _, a, _ in x[-stop_smoothing:]]) >= stop_acc
                                            for x in subs):
                done.add(v)
        if stop_acc is not None and len(done) == len(models):
            break
    return curves, step


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="digits")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=16, help="seeds 0..N-1")
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--max-steps", type=int, default=160)
    ap.add_argument("--every", type=int, default=2)
    ap.add_argument("--smoothing", default="3")
    ap.add_argument("--targets", default="0.95")
    ap.add_argument("--ema-decay", default="", help="comma-separated decays per update, e.g. 0.8,0.9,0.95")
    ap.add_argument("--ema-every", type=int, default=0, help="evaluate the emas every this many updates (0: --every)")
    ap.add_argument("--eval-from", type=int, default=0, help="no evaluation before this update (saves time; check the first evaluated accuracies are far below target)")
    ap.add_argument("--init-seed", type=int, default=None, help="build every seed's model from this seed (data order still varies)")
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--stop-acc", type=float, default=None)
    ap.add_argument("--dump", default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    task = get_task(args.task)
    batch_size = args.batch_size or task.default_batch_size
    decays = [float(d) for d in args.ema_decay.split(",") if d]
    smoothings = [int(s) for s in args.smoothing.split(",")]
    targets = [float(t) for t in args.targets.split(",")]
    seeds = list(range(args.seed_start, args.seed_start + args.seeds))
    all_curves, steps_run = {}, {}
    t0 = time.perf_counter()
    for seed in seeds:
        ts = time.perf_counter()
        curves, ran = run_seed(task, seed, args.workers, args.max_steps, args.every, args.ema_every or args.every,
                               args.eval_from, args.lr, batch_size, decays, args.warmup, args.stop_acc, max(smoothings), args.init_seed)
        all_curves[seed] = curves
        steps_run[seed] = ran
        summary = {v: {f"s{s}": updates_to_simple(c, targets[0], s) for s in smoothings} for v, c in curves.items()}
        print(f"seed {seed} ({time.perf_counter() - ts:.0f} s, {ran} updates run): "
              f"updates to {targets[0]} {json.dumps(summary)}", file=sys.stderr, flush=True)
        if args.dump:
            with open(args.dump, "w") as f:
                json.dump({"args": vars(args), "curves": all_curves, "steps_run": steps_run}, f)
    rows = []
    for v in all_curves[seeds[0]]:
        for s in smoothings:
            for t in targets:
                ups = [updates_to_simple(all_curves[seed][v], t, s) for seed in seeds]
                reached = [u for u in ups if u is not None]
                cv = coefficient_of_variation(reached)
                rows.append({"variant": v, "smoothing": s, "target": t, "updates": ups,
                             "reached": f"{len(reached)}/{len(ups)}", "cv": None if cv is None else round(cv, 4)})
                print(f"{v} smoothing {s} accuracy target {t}: updates {ups} reached {len(reached)}/{len(ups)} "
                      f"CV {rows[-1]['cv']}")
    print(f"total {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print(json.dumps({"task": task.name, "workers": args.workers, "lr": args.lr or task.default_lr,
                      "batch_size": batch_size, "every": args.every, "warmup": args.warmup, "seeds": len(seeds),
                      "rows": [{k: r[k] for k in ("variant", "smoothing", "target", "cv")} for r in rows]}))
    return 0


def updates_to_simple(curve, target, smoothing, metric="accuracy"):
    col = 1 if metric == "accuracy" else 2
    points = [EvalPoint(float(row[0]), row[0], row[col]) for row in curve]
    p = first_reaching(points, target, metric == "accuracy", smoothing)
    return None if p is None else p.version


if __name__ == "__main__":
    sys.exit(main())
