"""A worker's step cost: the fixed part of its step, measured at start-up, and how the report book reads it."""

from __future__ import annotations

import numpy as np
import pytest

from star.report_book import ReportBook
from star.worker.step_cost import MAX_SHARE, fixed_samples, measure_fixed_samples


@pytest.mark.parametrize("fixed_s, per_sample_s, expected", [
    (0.0, 0.001, 0.0),  # in proportion to the batch: nothing fixed
    (0.0004, 0.001, 0.0),  # 5% of an 8-sample step: read as noise
    (0.010, 0.001, 10.0),  # a = 10 s_per_sample
    (0.028, 0.0029, 0.028 / 0.0029),  # gpt-50m on a shared H200: 31.6 ms at 1 sample, 52 ms at 8
])
def test_the_fixed_part_of_a_step_is_its_intercept_over_its_slope_in_samples(fixed_s, per_sample_s, expected):
    full, part = fixed_s + 8 * per_sample_s, fixed_s + 4 * per_sample_s
    assert fixed_samples(full, part, 8, 4) == pytest.approx(expected)


def test_a_step_that_takes_as_long_at_half_the_batch_is_capped_not_infinite():
    assert fixed_samples(0.05, 0.05, 8, 4) == pytest.approx(MAX_SHARE * 8 / (1 - MAX_SHARE))
    assert fixed_samples(0.05, 0.06, 8, 4) == pytest.approx(MAX_SHARE * 8 / (1 - MAX_SHARE))  # half slower: noise


def test_a_half_batch_that_takes_under_half_the_time_reads_as_no_fixed_part():
    assert fixed_samples(0.08, 0.03, 8, 4) == 0.0


@pytest.mark.parametrize("full_batch, part_batch", [(8, 8), (8, 0), (4, 6)])
def test_sizes_that_cannot_give_a_slope_are_refused(full_batch, part_batch):
    with pytest.raises(ValueError, match="part_batch"):
        fixed_samples(0.1, 0.05, full_batch, part_batch)


class FakeStep:
    """A step of `a + s*b` seconds on a fake clock; the listed calls also suffer `spike_s` of interference."""

    def __init__(self, a: float, s: float, spikes: set[int], spike_s: float = 0.5):
        self.now, self.a, self.s, self.spikes, self.spike_s, self.calls = 0.0, a, s, spikes, spike_s, []

    def clock(self) -> float:
        return self.now

    def __call__(self, batch: int) -> None:
        self.now += self.a + self.s * batch + (self.spike_s if len(self.calls) in self.spikes else 0.0)
        self.calls.append(batch)


def test_measuring_interleaves_both_sizes_after_a_warm_up_and_ignores_interference():
    step = FakeStep(a=0.02, s=0.002, spikes={2, 5})  # calls 0-1 warm up; a spike at each size afterwards
    assert measure_fixed_samples(step, 16, repeats=2, clock=step.clock) == pytest.approx(10.0)
    assert step.calls == [8, 16, 8, 16, 8, 16]


def test_a_one_sample_batch_is_not_measured():
    step = FakeStep(a=0.02, s=0.002, spikes=set())
    assert measure_fixed_samples(step, 1, clock=step.clock) == 0.0 and step.calls == []


def book_after(fixed: float, steps: list[tuple[int, float]]) -> ReportBook:
    book = ReportBook(1)
    for i, (batch, compute_s) in enumerate(steps):
        book.record(np.array([0]), float(i), np.array([compute_s]), 0.01, np.array([batch]), np.array([False]), fixed)
    return book


def test_a_worker_with_a_fixed_step_cost_keeps_its_per_sample_time_when_its_batch_is_cut():
    """gpt-50m on a shared GPU read in proportion: cut from 8 to 1 sample, 52 -> 31.6 ms looked 4.9x slower per
    sample, so batch sizing cut it again. With the step's fixed part (F samples) the reading stays put, and the
    summary predicts its step at either size."""
    a, s = 0.0287, 0.0029
    fixed = a / s
    steps = [(8, a + 8 * s)] * 4 + [(1, a + s)] * 4
    summary = book_after(fixed, steps).summaries(10.0, np.zeros(1, dtype=bool))[0]
    assert summary.sizing_per_sample_s == pytest.approx(s) and summary.per_sample_s == pytest.approx(s)
    for batch in (1, 8, 16):
        assert summary.comm_s + summary.per_sample_s * batch == pytest.approx(2 * 0.01 + a + s * batch)
    linear = book_after(0.0, steps).summaries(10.0, np.zeros(1, dtype=bool))[0]
    assert linear.sizing_per_sample_s == pytest.approx(a + s)  # the old reading: 31.6 ms a sample
    assert linear.comm_s == pytest.approx(0.02)


def test_without_a_reported_fixed_part_the_book_reads_steps_in_proportion_as_before():
    steps = [(8, 0.08), (8, 0.088), (4, 0.04), (4, 0.044)]
    summary = book_after(0.0, steps).summaries(10.0, np.zeros(1, dtype=bool))[0]
    assert summary.per_sample_s == pytest.approx(0.0105) and summary.comm_s == pytest.approx(0.02)


def test_measuring_a_real_workers_step_leaves_its_data_order_model_and_random_state_as_they_were():
    import torch

    from star.worker.config import WorkerConfig
    from star.worker.worker import Worker

    config = WorkerConfig(worker_id=1, workers=4, task="digits")
    with Worker(config) as measured, Worker(config) as untouched:
        params = measured.flat.params.clone()
        rng = torch.get_rng_state()
        fixed = measured._measure_step_cost()
        assert fixed >= 0.0
        assert torch.equal(torch.get_rng_state(), rng)
        assert torch.equal(measured.flat.params, params) and not measured.flat.grads.any()
        assert torch.equal(measured.batches.next_batch(8)[0], untouched.batches.next_batch(8)[0])


def test_one_workers_misread_step_cost_does_not_change_how_the_others_are_read():
    """The book reads every worker with the median of the reported fixed parts: one worker's start-up timing
    on a busy host (7.5 samples where its step is in proportion) is outvoted by the three that read 0."""
    book = ReportBook(4)
    for i in range(4):
        for w, fixed in enumerate((0.0, 7.5, 0.0, 0.0)):
            book.record(np.array([w]), float(i), np.array([0.08]), 0.01, np.array([8]), np.array([False]), fixed)
    summaries = book.summaries(5.0, np.zeros(4, dtype=bool))
    assert {w: s.per_sample_s for w, s in summaries.items()} == {w: 0.01 for w in range(4)}
    assert book.pooled_fixed_samples() == 0.0


@pytest.mark.parametrize("fixed, refused", [(0.0, False), (9.9, False), (-1.0, True), (float("nan"), True),
                                            (float("inf"), True)])
def test_a_report_with_a_negative_or_non_finite_step_cost_is_refused_naming_the_field(fixed, refused):
    from star.coordinator_checks import report_problem
    from star.rpc import star_pb2 as pb

    problem = report_problem(pb.IterationReport(worker_id=0, compute_s=0.1, push_s=0.01, batch_size=8,
                                                slowdown=1.0, fixed_samples=fixed), 4)
    assert (problem is not None) is refused
    assert not refused or "fixed_samples" in problem


@pytest.mark.parametrize("reported, pooled", [((0.0, 7.5, 0.0, 0.0), 0.0), ((0.0, 7.5, 8.0, 0.0), 0.0),
                                              ((9.0, 7.5, 8.0, 0.0), 7.5), ((10.0,), 10.0), ((10.0, 0.0), 0.0)])
def test_a_fixed_part_counts_only_once_more_than_half_the_workers_measured_one(reported, pooled):
    book = ReportBook(len(reported))
    for w, fixed in enumerate(reported):
        book.record(np.array([w]), 0.0, np.array([0.08]), 0.01, np.array([8]), np.array([False]), fixed)
    assert book.pooled_fixed_samples() == pooled


def test_a_straggler_cut_to_one_sample_is_not_excused_when_its_steps_fixed_part_keeps_it_last():
    """gpt-50m on a shared H200: a 3x worker at 1 sample still ends its step last, because most of a GPU step is
    fixed. Judged on per-sample time x batch alone (the fixed part being in comm_s), it looked done first and was
    excused, so neither AMP nor a plan change was tried; with the fixed compute counted it is detected."""
    from star.plan import ssgd
    from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy

    def events(fixed_compute_s: dict[int, float]) -> list[dict]:
        controller = Controller(for_strategy(ControlConfig(selector=False), "auto"), 4, 8)
        workers = {w: WorkerSummary(0.0029 * (3 if w == 3 else 1), 0.02 + fixed_compute_s[w], 1 if w == 3 else 10, 0, 8,
                                    fixed_compute_s=fixed_compute_s[w]) for w in range(4)}
        return [e for p in range(6) for e in controller.decide(p, ssgd(range(4), epoch=1), workers).events]

    fixed = {w: 10 * 0.0029 * (3 if w == 3 else 1) for w in range(4)}  # F = 10 samples: 29 ms, the straggler's 87
    assert [e["worker"] for e in events(fixed) if e["kind"] == "straggler_detected"] == [3]
    assert [e["worker"] for e in events({w: 0.0 for w in range(4)}) if e["kind"] == "straggler_excused"] == [3]


def test_amp_judged_under_batch_sizing_shortens_the_steps_fixed_compute_too():
    """Before trying AMP on a straggler, auto predicts what it adds to batch sizing. AMP shortens the whole step
    (the H200 run verified 1.33x on a worker at 1 sample, where the step is mostly fixed), so the fixed compute
    in the worker's fixed seconds shrinks with its per-sample time."""
    from star.policy.batch import solve_batch_sizes
    from star.policy.combine import amp_gain_under_batch

    per_sample = {0: 0.001, 1: 0.001, 2: 0.001, 3: 0.003}
    compute = {w: 96 * s for w, s in per_sample.items()}  # F = 96 samples
    fixed = {w: 0.002 + compute[w] for w in per_sample}

    def sizes_for(p, f=None):
        return solve_batch_sizes(p, 256, fixed_s=fixed if f is None else f, min_batch=1, max_batch=128)

    blind = amp_gain_under_batch(per_sample, fixed, [3], 2.0, sizes_for)
    seen = amp_gain_under_batch(per_sample, fixed, [3], 2.0, sizes_for, compute)
    assert blind.gain < 0.03 < seen.gain  # the skip bar (amp_policy.min_added_gain 3%): tried only when seen
    assert seen.batch_alone_s == blind.batch_alone_s


def test_the_simulator_gives_steps_a_fixed_part_and_its_workers_report_it():
    from star.sim.config import CostConfig
    from star.sim.cost import CostModel
    from star.sim.replay import FactorTable

    cost = CostModel(CostConfig(base_compute_s=0.05, base_batch=64, fixed_compute_share=0.6, amp_time_factor=0.5),
                     FactorTable(None, 1), np.random.default_rng(0), 1)
    for batch in (1, 64, 128):
        assert cost._cpu_s(np.array([False]), np.array([batch]))[0] == pytest.approx(0.05 * (0.6 + 0.4 * batch / 64))
    assert cost.reported_fixed_samples == pytest.approx(96.0)
    silent = CostModel(CostConfig(fixed_compute_share=0.6, report_step_cost=False), FactorTable(None, 1),
                       np.random.default_rng(0), 1)
    assert silent.reported_fixed_samples == 0.0


def test_the_simulated_step_cost_benchmark_ends_with_its_medians(monkeypatch, capsys):
    import json
    import sys

    from benchmarks import sim_step_cost

    monkeypatch.setattr(sys, "argv", ["sim_step_cost", "--seeds", "1", "--shares", "0.6"])
    sim_step_cost.main()
    medians = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(medians) == {"0.6/ssgd/reported", "0.6/batch/reported", "0.6/batch/unreported", "0.6/auto/reported",
                            "0.6/auto/unreported"}
    assert medians["0.6/batch/reported"] < medians["0.6/ssgd/reported"]
