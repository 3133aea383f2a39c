"""The coordinator on a real job: a replayed slowdown is detected within 2 decision periods of the slowed worker's 3rd report,
AMP is switched on for the straggler and off after it recovers (or, on a CPU where bf16 autocast
is slower than fp32, or on a machine too loaded to see its gain, undone: never tried again where the reports resolve
that it did not help, tried again after a hold where they do not), all in events.jsonl."""

from __future__ import annotations

import csv
import re

import pytest

from star.config import JobConfig, from_dict
from star.events import read_events
from star.launch import launch
from star.traces import Trace, write_simple_csv

pytestmark = pytest.mark.integration

DECISION_PERIOD_S = 1.0


def cpu_has_fast_bf16() -> bool:
    """bf16 autocast speeds a CPU step up only with native bf16 instructions (AVX-512 BF16 or AMX);
    without them (AVX2) it is several times slower, and the AMP policy must undo it."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def test_straggler_is_detected_amp_toggled_on_and_off_again(tmp_path):
    trace = tmp_path / "slow3.csv"
    # slowed from iteration 15 to 34: AMP is verified by ~iteration 26, and recovery (3 fresh reports for the
    # median of 4, then 2 normal decisions) has ~15 s left before max_time_s even on a slower machine
    rows = [(0, w, 1.0) for w in range(4)] + [(15, 3, 3.0), (34, 3, 1.0), (10_000, 3, 1.0)]
    write_simple_csv(Trace.from_rows(rows), trace)
    out = tmp_path / "run"
    fast_bf16 = cpu_has_fast_bf16()
    job = {"task": "digits", "workers": 4, "ps": 1, "out": str(out), "max_time_s": 42, "target": 1.01,
           "stop_at_target": False, "plan": {"mode": "amp"}, "trace": {"path": str(trace)},
           "control": {"decision_period_s": DECISION_PERIOD_S}}
    if not fast_bf16:  # AMP makes the slowed worker's steps ~10x longer here (~30 s at batch 64, trace included):
        # smaller steps, judged on 2 of them, and time to see them
        job.update(batch_size=16, max_time_s=75)
        job["control"]["amp_policy"] = {"verify_reports": 2}
    config = from_dict(JobConfig, job)
    result = launch(config)
    events = read_events(out / "events.jsonl")

    detected = next(e for e in events if e["kind"] == "straggler_detected")
    assert detected["worker"] == 3
    # Within 2 decisions of the worker's 3rd slowed report (the detector reads the median of its last 4 and
    # enters after 2 slow decisions). Not a wall-clock bound from the onset: slowed iterations take 0.7-0.9 s
    # here and longer on a loaded machine (CI failed once at 3.6 s against a 3.5 s bound).
    with open(out / "iterations.csv", newline="") as f:
        slowed = [float(r["t"]) for r in csv.DictReader(f) if r["worker"] == "3" and float(r["slowdown"]) == 3.0]
    assert detected["t"] <= slowed[2] + 2 * DECISION_PERIOD_S + 0.5, (slowed[:4], detected)

    amp_events = [e for e in events if e["kind"] == "amp" and e["worker"] == 3]
    assert amp_events[0]["amp"] is True and amp_events[0]["t"] >= detected["t"]
    first_off = next((e for e in amp_events if e["amp"] is False), None)
    assert first_off is not None, amp_events
    # With native bf16, AMP usually passes its verification; on a loaded machine the measured gain can fall
    # under min_gain, and then undoing it is the policy working, not a failure of this test.
    undone = fast_bf16 and "did not help" in first_off["reason"]
    if fast_bf16 and not undone:
        recovery = next(e for e in events if e["kind"] == "slowdown_changed" and e["worker"] == 3 and e["factor"] == 1.0)
        recovered = next((e for e in events if e["kind"] == "straggler_recovered" and e["t"] > recovery["t"]), None)
        assert recovered is not None, (recovery, amp_events)
        off = next((e for e in amp_events if e["amp"] is False and e["t"] >= recovered["t"]), None)
        assert off is not None, (recovered, amp_events)
        assert "recovered" in off["reason"]
    else:  # verified, found no faster, undone; switched on again only as a retry of a verdict the noise left open
        off = first_off
        assert "did not help" in off["reason"], off
        again = [e for e in amp_events if e["amp"] is True and e["t"] > off["t"]]
        if "marked ineffective" in off["reason"]:
            assert not again, amp_events
        else:
            assert "within the noise of its reports" in off["reason"] and "tried again in" in off["reason"], off
            if again:  # the retry: a fresh trial, at least a decision later
                assert "trying AMP" in again[0]["reason"] and again[0]["t"] >= off["t"] + DECISION_PERIOD_S, amp_events
    assert not [e for e in events if e["kind"] == "straggler_detected" and e["worker"] != 3]
    assert result["amp_toggles"] >= 2


def test_batch_sizing_places_every_workers_resized_batch_in_the_global_batch(tmp_path):
    """A real batch-sizing run: the slowed worker gets a smaller batch, and every worker is told where its
    batch starts in each round's global batch and from which iteration, so that the resized batches
    tile one round's global batch together (star.tasks.global_batch)."""
    trace = tmp_path / "slow3.csv"
    write_simple_csv(Trace.from_rows([(0, w, 1.0) for w in range(4)] + [(5, 3, 3.0), (10_000, 3, 3.0)]), trace)
    out = tmp_path / "run"
    config = from_dict(JobConfig, {"task": "digits", "workers": 4, "ps": 1, "out": str(out), "max_time_s": 30,
                                   "target": 1.01, "stop_at_target": False, "plan": {"mode": "batch"},
                                   "trace": {"path": str(trace)}, "control": {"decision_period_s": DECISION_PERIOD_S}})
    launch(config)
    decisions = [{int(w): size for w, size in e["sizes"].items()}
                 for e in read_events(out / "events.jsonl") if e["kind"] == "batch_sizes"]
    assert decisions, "no batch sizing decision"
    whole = [d for d in decisions if len(d) == 4]
    assert whole and all(sum(d.values()) == 4 * 64 for d in whole), decisions  # the global batch is conserved
    assert any(d[3] < min(d[w] for w in range(3)) for d in whole), decisions  # the slowed worker gets the least
    sizes, layouts = {w: 64 for w in range(4)}, []
    for d in decisions:  # the sizes in force after each decision (a decision lists the workers it sized)
        sizes.update(d)
        layouts.append(dict(sizes))
    first_iterations = []
    for worker in range(4):  # each placement is one decision's: offset = the sizes of the workers before
        log = (out / "logs" / f"worker{worker}.log").read_text()
        placed = [(int(a), int(b), int(i)) for a, b, i in
                  re.findall(r"batch placed in the global batch .*offset=(\d+) size=(\d+) iteration=(\d+)", log)]
        assert placed, f"worker {worker} was never placed"
        expected = {(sum(layout[w] for w in range(worker)), layout[worker]) for layout in layouts}
        assert {(offset, size) for offset, size, _ in placed} <= expected, (worker, placed, decisions)
        first_iterations.append(placed[0][2])
    # together: at the iteration the decision named (a reply that comes back later than usual, on a loaded
    # machine, may leave one worker a round late; the unit tests pin the rule itself)
    assert max(first_iterations) - min(first_iterations) <= 1, first_iterations
