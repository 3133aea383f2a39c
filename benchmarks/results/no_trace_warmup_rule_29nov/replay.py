"""Replay a real no-trace auto run's reports (iterations.csv) through the coordinator's ReportBook and the
auto Controller at the run's decision times, up to its first resize; prints the decisions that resize.

    python replay.py ITERATIONS_CSV [EVENTS_JSONL] [--warmup-reports 0|1] [--warmup-margin M]

--warmup-reports 0: the rule before 29 Nov (every report timed); 1 with --warmup-margin 0: the first report always
left out of speeds (248fede); 1 with the default margin: the kept rule (off the later ones by a factor 1.25 either way).

Decision times: the run's early decision (events), then every decision period at the phase of its
recorded batch_sizes events (the coordinator's timed decisions). A mechanism check: after a resize the
recorded reports are at the real run's sizes, so only the decisions up to the first resize are comparable.
"""
import argparse
import csv
import json

import numpy as np

import star.report_book as report_book
from star.plan import ssgd
from star.policy.controller import ControlConfig, Controller, for_strategy

p = argparse.ArgumentParser()
p.add_argument("iterations")
p.add_argument("events", nargs="?", help="the run's events.jsonl (none: period 1 s from the early decision)")
if not hasattr(report_book, "WARMUP_REPORTS"):
    raise SystemExit("replay.py needs the start-up rule's code: a checkout of 248fede, or main with margin_rule.diff applied")
p.add_argument("--warmup-reports", type=int, default=report_book.WARMUP_REPORTS)
p.add_argument("--warmup-margin", type=float, default=getattr(report_book, "WARMUP_MARGIN", 0.0))
args = p.parse_args()
report_book.WARMUP_REPORTS = args.warmup_reports
report_book.WARMUP_MARGIN = args.warmup_margin
rows = [r for r in csv.DictReader(open(args.iterations))]
events = [json.loads(line) for line in open(args.events)] if args.events else []
workers = sorted({int(r["worker"]) for r in rows})
n = len(workers)
period_s = next((e["decision_period_s"] for e in events if e["kind"] == "control"), 1.0)
early = [e["t"] for e in events if e["kind"] == "early_decision"]
if not events:  # the report that gives the last worker its min_reports-th report
    counts, early = {}, []
    for r in sorted(rows, key=lambda r: float(r["t"])):
        counts[r["worker"]] = counts.get(r["worker"], 0) + 1
        if len(counts) == len(set(x["worker"] for x in rows)) and min(counts.values()) >= 3:
            early = [float(r["t"])]
            break
resized = [e["t"] for e in events if e["kind"] == "batch_sizes"]
phase = (resized[0] % period_s) if resized else (early[0] % period_s if early else 0.0)
last_t = max(float(r["t"]) for r in rows)
start = early[0] if early else min(float(r["t"]) for r in rows)
times = sorted(set(early) | {k * period_s + phase for k in range(int(start / period_s), int(last_t / period_s) + 1)
                            if k * period_s + phase > start})
book = report_book.ReportBook(n)
controller = Controller(for_strategy(ControlConfig(), "auto"), n, 64)
plan = ssgd(workers, epoch=1)
amp = np.zeros(n, dtype=bool)
i = 0
rows.sort(key=lambda r: float(r["t"]))
for period, t in enumerate(times):
    while i < len(rows) and float(rows[i]["t"]) <= t:
        r = rows[i]
        w = int(r["worker"])
        book.record(np.array([w]), float(r["t"]), np.array([float(r["compute_s"])]), float(r["push_s"]),
                    np.array([int(r["batch_size"])]), amp[[w]])
        i += 1
    decision = controller.decide(period, plan, book.summaries(t, amp))
    kinds = [e["kind"] for e in decision.events]
    if decision.batch_sizes or any(k in ("straggler", "amp", "plan_switch") for k in kinds):
        print(f"t={t:.2f} warmup_reports={args.warmup_reports} margin={args.warmup_margin} acted: sizes={decision.batch_sizes} events={kinds}")
        for e in decision.events:
            if e["kind"] == "batch_sizes":
                print("   per_sample_ms", e.get("per_sample_ms"), "resolved", e.get("resolved_gain"))
        break
else:
    print(f"warmup_reports={args.warmup_reports} margin={args.warmup_margin}: no action over {len(times)} decisions up to t={times[-1]:.2f}")
