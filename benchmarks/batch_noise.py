"""How often batch sizing's first decision resizes on speeds that differ by noise or by a real straggler,
and what such a resize gains in truth, with and without the noise-resolved gain test.

    python -m benchmarks.batch_noise --draws 2000 --noise-cv 0.10

Per draw: 4 workers, one of them `slowdown` times slower per sample; each reports 4 iterations of a
64-sample batch whose compute time has lognormal noise (`--noise-cv`; one report's per-sample time
spreads about 10% on the 2-core development host). The reports go through the coordinator's own
ReportBook into one decision of the real Controller (`batch`), with `control.batching.noise_z` z.
Columns: how many draws resized (`act_rate`), and the median true gain of those resizes: the cut
in the slowest worker's iteration time at the true speeds (negative: the sizes made it slower).
Prints a table and, last, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

from star.plan import ssgd
from star.policy.batch import BatchConfig, predicted_gain
from star.policy.controller import ControlConfig, Controller, for_strategy
from star.report_book import ReportBook

WORKERS, BATCH, REPORTS, PER_SAMPLE_S, COMM_S = 4, 64, 4, 4.5e-3, 0.003


def first_decision(rng: np.random.Generator, slowdown: float, noise_cv: float, noise_z: float) -> float | None:
    """The true gain of the first decision's resize (None: no resize)."""
    true_s = {w: PER_SAMPLE_S * (slowdown if w == WORKERS - 1 else 1.0) for w in range(WORKERS)}
    book = ReportBook(WORKERS)
    workers = np.arange(WORKERS)
    truth = np.array([true_s[w] for w in workers])
    for i in range(REPORTS):
        compute = truth * BATCH * rng.lognormal(0.0, noise_cv, WORKERS)
        book.record(workers, 0.1 * i, compute, COMM_S / 2, np.full(WORKERS, BATCH), np.zeros(WORKERS, dtype=bool))
    config = for_strategy(ControlConfig(batching=BatchConfig(noise_z=noise_z)), "batch")
    controller = Controller(config, WORKERS, BATCH)
    sizes = controller.decide(0, ssgd(range(WORKERS), epoch=1), book.summaries(0.4, np.zeros(WORKERS, dtype=bool))).batch_sizes
    if not sizes:
        return None
    return predicted_gain({w: BATCH for w in range(WORKERS)}, sizes, true_s, {w: COMM_S for w in range(WORKERS)})


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def float_list(text: str) -> list[float]:
    """'1.0,1.5' -> [1.0, 1.5]; every value >= 0."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers, got {text!r}") from None
    if any(not v >= 0 for v in values):
        raise argparse.ArgumentTypeError(f"values must be >= 0, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batch_noise", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=positive_int, default=2000)
    parser.add_argument("--noise-cv", type=float, default=0.10)
    parser.add_argument("--slowdowns", type=float_list, default="1.0,1.1,1.2,1.3,1.5,2.0,3.0")
    parser.add_argument("--z", type=float_list, default="0,1", help="noise_z values compared (0: as measured, the rule before)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if 0 in args.slowdowns:
        parser.error(f"argument --slowdowns: values must be > 0, got {args.slowdowns}")
    if not args.noise_cv >= 0:
        parser.error(f"argument --noise-cv: must be >= 0, got {args.noise_cv}")
    rows = []
    print(f"{'slowdown':>8} {'noise_z':>7} {'act_rate':>8} {'true_gain_when_acting':>21}")
    for slowdown in args.slowdowns:
        for z in args.z:
            rng = np.random.default_rng(args.seed)  # the same draws for every z
            gains = [first_decision(rng, slowdown, args.noise_cv, z) for _ in range(args.draws)]
            acted = [g for g in gains if g is not None]
            row = {"slowdown": slowdown, "noise_z": z, "act_rate": round(len(acted) / args.draws, 4),
                   "true_gain_when_acting": round(statistics.median(acted), 4) if acted else None}
            rows.append(row)
            gain = "-" if row["true_gain_when_acting"] is None else f"{row['true_gain_when_acting']:.3f}"
            print(f"{slowdown:>8.2f} {z:>7.2f} {row['act_rate']:>8.3f} {gain:>21}", flush=True)
    print(json.dumps({"draws": args.draws, "noise_cv": args.noise_cv, "workers": WORKERS, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
