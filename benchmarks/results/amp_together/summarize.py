"""Auto against the best fixed strategy (ssgd, amp, batch) per seed, before and after stragglers were judged
together for AMP: python benchmarks/results/amp_together/summarize.py (reads the summary.csv files here)."""
import csv
import statistics
from pathlib import Path

HERE = Path(__file__).parent
FIXED = ("ssgd", "amp", "batch")


def ratios(version: str, workers: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for path in sorted(HERE.glob(f"{version}/w{workers}_s*/summary.csv")):
        rows = {(r["trace"], r["strategy"]): float(r["tta_s"]) for r in csv.DictReader(path.open())}
        for trace in sorted({t for t, _ in rows}):
            best = min(rows[(trace, s)] for s in FIXED)
            out.setdefault(trace, []).append(rows[(trace, "auto-heuristic")] / best)
    return out


for workers in (100, 1000):
    before, after = ratios("before", workers), ratios("after", workers)
    seeds = len(next(iter(before.values())))
    print(f"\n{workers} workers, {seeds} seeds: auto / best fixed (ssgd, amp, batch), median and worst")
    print("| trace | before: median | before: worst | after: median | after: worst |")
    print("|---|---|---|---|---|")
    for trace in before:
        b, a = before[trace], after[trace]
        print(f"| {trace} | {statistics.median(b):.3f} | {max(b):.3f} | {statistics.median(a):.3f} | {max(a):.3f} |")
