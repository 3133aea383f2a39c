"""The pure control loop (star.control_loop) on a fake clock: detection and loss latencies in
decision periods, waiting for every worker, plan switches, admissions, shard moves.

Reports go through the daemon's own ClusterView (built here as IterationReport messages at
fake times), so these are the summaries a real coordinator would hand the loop; no test
waits on wall time.
"""

from __future__ import annotations

import time

import pytest

from star.cluster import ClusterView, ps_input
from star.control_loop import NO_HOSTS, NO_PS, Actions, ControlLoop, HostsInput, LoopState, PsInput, Reports
from star.placement import HostState, PlacementConfig
from star.plan import SyncPlan, ssgd
from star.policy.controller import ControlConfig, for_strategy
from star.rpc import star_pb2 as pb

PERIOD_S = 1.0
BATCH = 32
PER_SAMPLE_S = 1e-3


class FakeWorkers:
    """Workers that report every `iteration_s` of fake time into a ClusterView.

    slow: worker -> (from_s, factor) multiplies its compute seconds from then on;
    silent: worker -> (from_s, until_s) no reports in between; start: worker -> first report time.
    """

    def __init__(self, n: int, iteration_s: float = 0.25, slow=None, silent=None, start=None, every=None,
                 follow_sizes: bool = False):
        self.n = n
        self.batch = {w: BATCH for w in range(n)}  # what each computes; run_watching sets it when follow_sizes
        self.follow_sizes = follow_sizes
        self.view = ClusterView(n, window=20)
        self.slow = slow or {}
        self.silent = silent or {}
        self.every = {w: (every or {}).get(w, iteration_s) for w in range(n)}
        self.next_s = {w: (start or {}).get(w, self.every[w]) for w in range(n)}
        self.iteration = {w: 0 for w in range(n)}

    def advance(self, now_s: float) -> None:
        for w in range(self.n):
            while self.next_s[w] <= now_s + 1e-9:
                t = self.next_s[w]
                self.next_s[w] += self.every[w]
                quiet = self.silent.get(w)
                if quiet and quiet[0] < t < quiet[1]:
                    continue
                since, factor = self.slow.get(w, (float("inf"), 1.0))
                compute_s = PER_SAMPLE_S * self.batch[w] * (factor if t >= since else 1.0)
                self.iteration[w] += 1
                self.view.accept(pb.IterationReport(worker_id=w, iteration=self.iteration[w], compute_s=compute_s,
                                                    push_s=0.005, pull_s=0.0, batch_size=self.batch[w]), t)


class Harness:
    """Steps a ControlLoop every PERIOD_S of fake time and applies its actions as the daemon does
    (the switched plan is the plan in force, AMP directives select the summarised reports)."""

    def __init__(self, strategy: str, workers: FakeWorkers, control: ControlConfig = ControlConfig(),
                 num_workers: int | None = None, **loop_args):
        num_workers = workers.n if num_workers is None else num_workers  # fewer: the others may join later
        self.loop = ControlLoop(for_strategy(control, strategy), num_workers, BATCH, **loop_args)
        self.workers = workers
        self.plan: SyncPlan = ssgd(range(num_workers), epoch=1)
        self.amp: dict[int, bool] = {}
        self.steps: list[tuple[float, Actions]] = []

    def run(self, until_s: float, ps: PsInput = NO_PS, hosts: HostsInput = NO_HOSTS) -> list[tuple[float, Actions]]:
        start = len(self.steps)
        k = round(self.steps[-1][0] / PERIOD_S) + 1 if self.steps else 1
        while k * PERIOD_S <= until_s + 1e-9:
            now_s = k * PERIOD_S
            self.workers.advance(now_s)
            reports = Reports(self.plan, self.workers.view.summaries(now_s, self.amp), self.workers.view.total_iterations())
            actions = self.loop.step(now_s, reports, ps, hosts)
            self.amp.update(actions.directives.amp)
            if actions.switch is not None:
                self.plan = actions.switch.plan
            self.steps.append((now_s, actions))
            k += 1
        return self.steps[start:]

    def events(self, kind: str) -> list[tuple[float, dict]]:
        return [(t, dict(e.fields)) for t, a in self.steps for e in a.events if e.kind == kind]


# ---- detection latency ---------------------------------------------------------------------


def test_a_worker_slowed_3x_at_t10_is_detected_within_3_decision_periods():
    h = Harness("ssgd", FakeWorkers(4, slow={2: (10.0, 3.0)}))
    h.run(20.0)
    detected = h.events("straggler_detected")
    assert [e["worker"] for _, e in detected] == [2]
    t, _ = detected[0]
    assert 10.0 < t <= 10.0 + 3 * PERIOD_S
    assert h.loop.state is LoopState.RUNNING


def test_a_recovered_straggler_is_declared_recovered_within_3_decision_periods():
    h = Harness("ssgd", FakeWorkers(4, slow={2: (5.0, 3.0)}))
    h.run(12.0)
    h.workers.slow[2] = (5.0, 1.0)  # back to normal from t=12
    h.run(20.0)
    recovered = h.events("straggler_recovered")
    assert [e["worker"] for _, e in recovered] == [2]
    assert 12.0 < recovered[0][0] <= 12.0 + 3 * PERIOD_S


def test_detection_latency_does_not_depend_on_wall_time(monkeypatch):
    """The loop never reads a clock: with every clock broken it decides exactly as before."""
    def broken():
        raise AssertionError("the control loop read a clock")

    reference = Harness("amp", FakeWorkers(4, slow={1: (3.0, 3.0)}))
    reference.run(12.0)
    h = Harness("amp", FakeWorkers(4, slow={1: (3.0, 3.0)}))
    with monkeypatch.context() as m:
        for name in ("monotonic", "time", "perf_counter", "process_time"):
            m.setattr(time, name, broken)
        h.run(12.0)
    assert [(t, a.events, dict(a.directives.amp)) for t, a in h.steps] == \
        [(t, a.events, dict(a.directives.amp)) for t, a in reference.steps]
    assert h.events("amp")  # the straggler got AMP: the run decided something


# ---- waiting for every worker --------------------------------------------------------------


def test_no_decision_before_every_worker_has_reported_min_reports():
    """Worker 3 reports once a second from t=3: it has min_reports (3) at t=5. Worker 0 is 3x slow
    all along, but nothing is decided about it (no event, no directive, no plan) until then."""
    workers = FakeWorkers(4, slow={0: (0.0, 3.0)}, start={3: 3.0}, every={3: 1.0})
    h = Harness("amp", workers, ControlConfig(min_reports=3))
    h.run(12.0)
    before = [(t, a) for t, a in h.steps if t < 5.0]
    assert before and all(a.empty for _, a in before)
    waiting = [t for t, _ in before]
    assert waiting == [1.0, 2.0, 3.0, 4.0]
    detected = h.events("straggler_detected")
    assert [e["worker"] for _, e in detected] == [0]
    assert detected[0][0] == 5.0 + PERIOD_S  # judged from t=5, slow twice in a row (enter_n=2)
    assert h.events("amp")[0][0] >= detected[0][0]
    assert h.loop.state is LoopState.RUNNING


def test_nothing_is_decided_and_no_period_counted_before_the_first_report():
    loop = ControlLoop(for_strategy(ControlConfig(), "auto"), 4, BATCH)
    for k in range(1, 4):
        assert loop.step(float(k), Reports(ssgd(range(4), epoch=1))).empty
    assert (loop.state, loop.period) == (LoopState.WAITING, 0)
    assert loop.step(4.0, Reports(None, {})).empty  # no plan sent yet either


# ---- plan switches -------------------------------------------------------------------------


def test_a_plan_switch_is_returned_as_one_action_with_the_next_epoch():
    h = Harness("exclude", FakeWorkers(4, slow={1: (3.0, 3.0)}))
    h.run(10.0)
    switches = [(t, a) for t, a in h.steps if a.switch is not None]
    assert len(switches) == 1
    t, actions = switches[0]
    plan = actions.switch.plan
    assert plan.epoch == 2  # the plan in force was epoch 1
    assert plan.groups == ((0, 2, 3), (1,))
    assert [e.kind for e in actions.events] == ["straggler_detected", "plan_decision"]  # its reason, in the same step
    assert 3.0 < t <= 3.0 + 3 * PERIOD_S


def test_a_readmitted_straggler_brings_the_next_epoch_again():
    h = Harness("exclude", FakeWorkers(4, slow={1: (3.0, 3.0)}))
    h.run(10.0)
    h.workers.slow[1] = (3.0, 1.0)
    h.run(20.0)
    plans = [a.switch.plan for _, a in h.steps if a.switch is not None]
    assert [(p.epoch, p.groups) for p in plans] == [(2, ((0, 2, 3), (1,))), (3, ((0, 1, 2, 3),))]


# ---- lost workers --------------------------------------------------------------------------


def test_a_worker_silent_past_lost_after_s_is_lost_within_one_period_and_leaves_the_plan():
    control = ControlConfig(lost_after_s=20.0)
    h = Harness("ssgd", FakeWorkers(4, silent={2: (5.0, float("inf"))}), control)
    h.run(40.0)
    lost = h.events("worker_lost")
    assert [e["worker"] for _, e in lost] == [2]
    t, event = lost[0]
    assert 5.0 + 20.0 < t <= 5.0 + 20.0 + PERIOD_S  # last report at t=5
    assert event["silent_s"] > 20.0
    switch = next(a.switch for tt, a in h.steps if tt == t)
    assert switch.plan.epoch == 2 and switch.plan.workers == (0, 1, 3)
    assert h.loop.controller.lost == {2}


def test_a_lost_worker_that_reports_again_rejoins_the_first_plan():
    control = ControlConfig(lost_after_s=20.0, min_reports=3)
    h = Harness("ssgd", FakeWorkers(4, silent={2: (5.0, 30.0)}), control)
    h.run(40.0)
    assert [e["worker"] for _, e in h.events("worker_rejoined")] == [2]
    plans = [a.switch.plan for _, a in h.steps if a.switch is not None]
    assert [(p.epoch, p.workers) for p in plans] == [(2, (0, 1, 3)), (3, (0, 1, 2, 3))]
    assert h.events("worker_rejoined")[0][0] == 30.0  # the period of its first report again


# ---- admissions, errors, the end ------------------------------------------------------------


def test_a_worker_joining_mid_run_is_admitted_with_the_next_epoch_and_judged_before_policies_act():
    """A job of 4 workers that accepts a 5th: it joins at t=6 and reports once a second from t=7."""
    h = Harness("amp", FakeWorkers(5, slow={0: (0.0, 3.0)}, start={4: 7.0}, every={4: 1.0}), num_workers=4)
    h.run(6.0)
    assert h.loop.state is LoopState.RUNNING
    actions = h.loop.admit(h.plan, {4})
    assert [e.kind for e in actions.events] == ["worker_admitted"]
    assert actions.switch.plan.epoch == 2 and actions.switch.plan.workers == (0, 1, 2, 3, 4)
    assert h.loop.state is LoopState.WAITING
    h.plan = actions.switch.plan
    assert all(a.empty for _, a in h.run(8.0))  # 2 reports of min_reports 3: nobody's AMP or plan changes
    assert h.loop.state is LoopState.WAITING
    h.run(9.0)
    assert h.loop.state is LoopState.RUNNING
    assert h.loop.admit(h.plan, set()).empty


def test_a_failing_controller_is_an_event_and_control_goes_on(monkeypatch):
    h = Harness("ssgd", FakeWorkers(4))
    h.run(3.0)
    period = h.loop.period
    monkeypatch.setattr(h.loop.controller, "decide", lambda *a, **k: (_ for _ in ()).throw(ValueError("boom")))
    (t, actions), = h.run(4.0)
    assert [e.kind for e in actions.events] == ["control_error"]
    assert isinstance(actions.error, ValueError) and h.loop.period == period
    monkeypatch.undo()
    (t, actions), = h.run(5.0)
    assert actions.error is None and h.loop.period == period + 1


def test_a_finished_loop_decides_nothing():
    h = Harness("exclude", FakeWorkers(4, slow={1: (0.0, 3.0)}))
    h.loop.finish()
    assert all(a.empty for _, a in h.run(10.0))
    assert h.loop.admit(h.plan, {5}).empty
    assert h.loop.state is LoopState.FINISHED


# ---- PS shard moves ------------------------------------------------------------------------


def _host(name: str, nic_util: float) -> HostState:
    return HostState(name, 0.2, 0.0, 8, nic_util * 1e9, 1e9)


def test_a_shard_on_a_host_saturated_for_persist_n_periods_is_moved_once():
    loop = ControlLoop(for_strategy(ControlConfig(), "ssgd"), 4, BATCH, PlacementConfig(persist_n=3, move_cooldown_s=60.0))
    ps = PsInput(0.0, ("a", "b"), (1e6, 1e6))
    hosts = HostsInput({"a": _host("a", 0.99), "b": _host("b", 0.1)})
    moves = [(float(k), loop.step(float(k), Reports(None), ps, hosts).move) for k in range(1, 10)]
    made = [(t, m) for t, m in moves if m is not None]
    assert len(made) == 1
    t, move = made[0]
    assert t == 3.0 and (move.shard, move.target_host) == (0, "b") and "saturated" in move.reason


def test_no_shard_moves_while_one_is_in_flight_or_a_ps_is_down():
    config = PlacementConfig(persist_n=1, move_cooldown_s=0.0)
    hosts = {"a": _host("a", 0.99), "b": _host("b", 0.1)}
    loop = ControlLoop(for_strategy(ControlConfig(), "ssgd"), 4, BATCH, config)
    in_flight = HostsInput(hosts, move_in_flight=True)
    assert loop.step(1.0, Reports(None), PsInput(0.0, ("a", "b"), (1e6, 1e6)), in_flight).move is None
    assert loop.step(2.0, Reports(None), PsInput(0.0, None), HostsInput(hosts)).move is None


class _Stats:
    def __init__(self, index: int, start: int, end: int):
        self.ps_index, self.range_start, self.range_end = index, start, end
        self.noise_small_sq = self.noise_big_sq = self.noise_small_batch = self.noise_big_batch = 0.0


def test_ps_input_has_a_layout_only_while_every_ps_answers():
    addresses = ["10.0.0.1:5000", "10.0.0.2:5000"]
    full = ps_input(addresses, [_Stats(0, 0, 100), _Stats(1, 100, 150)])
    assert full.shard_hosts == ("10.0.0.1", "10.0.0.2") and full.shard_bytes == (400.0, 200.0)
    assert ps_input(addresses, [_Stats(0, 0, 100)]).shard_hosts is None


@pytest.mark.parametrize("strategy", ["ssgd", "exclude", "amp", "batch", "auto"])
def test_the_loop_decides_as_the_controller_alone_would(strategy):
    """The loop adds no policy: its events, directives and plans are the Controller's, period by period."""
    from star.policy.controller import Controller

    workers = FakeWorkers(6, slow={1: (4.0, 3.0), 4: (8.0, 2.0)})
    h = Harness(strategy, workers)
    h.run(20.0)
    twin_workers = FakeWorkers(6, slow={1: (4.0, 3.0), 4: (8.0, 2.0)})
    controller = Controller(for_strategy(ControlConfig(), strategy), 6, BATCH)
    plan, amp, period, expected = ssgd(range(6), epoch=1), {}, 0, []
    for k in range(1, 21):
        twin_workers.advance(float(k))
        decision = controller.decide(period, plan, twin_workers.view.summaries(float(k), amp), 0.0, None)
        period += 1
        amp.update(decision.amp)
        plan = decision.plan or plan
        expected.append(([e["kind"] for e in decision.events], decision.amp, decision.batch_sizes, decision.plan))
    assert [([e.kind for e in a.events], dict(a.directives.amp), dict(a.directives.batch_sizes),
             a.switch and a.switch.plan) for _, a in h.steps] == expected


def test_every_batch_decision_places_every_worker_in_the_global_batch():
    """New sizes move the offsets of the workers after a resized one too: each batch decision gives
    every worker its offset, and the batches then tile the global batch without gap or overlap."""
    h = Harness("batch", FakeWorkers(6, slow={1: (4.0, 3.0), 4: (8.0, 2.0)}))
    h.run(20.0)
    sizes = {w: BATCH for w in range(6)}
    decisions = 0
    for _, actions in h.steps:
        d = actions.directives
        assert bool(d.batch_offsets) == bool(d.batch_sizes)
        if d.batch_sizes:
            decisions += 1
            sizes.update(d.batch_sizes)
            assert sorted(d.batch_offsets) == list(range(6))
            spans = sorted((d.batch_offsets[w], d.batch_offsets[w] + sizes[w]) for w in range(6))
            assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
            assert spans[-1][1] == 6 * BATCH
    assert decisions >= 1


# ---- the slowdown watch: a report showing a large slowdown is decided on at once ------------


def run_watching(h: Harness, until_s: float, check_s: float = 0.05) -> None:
    """As the daemon runs the loop: a step at every period's end, and one as soon as a report crosses the
    slowdown watch (checked every `check_s` of fake time, after the reports that arrived by then)."""
    start = h.steps[-1][0] if h.steps else 0.0
    view = h.workers.view

    def armed():  # the sizing watch as the daemon arms it: the plan's unsized workers
        min_reports = h.loop.sizing_watch()
        return view.report_counts(), view.unsized(h.plan.workers, h.amp, min_reports) if min_reports else [], min_reports

    since, unsized, min_reports = armed()
    for k in range(1, round((until_s - start) / check_s) + 1):
        now_s = start + k * check_s
        checked = view.report_counts()
        h.workers.advance(now_s)
        timed = abs(now_s / PERIOD_S - round(now_s / PERIOD_S)) < 1e-9
        woken_by = () if timed else tuple(view.sizing_above(h.loop.slowdown_watch(), h.amp, since, h.loop.confirming()))
        if not timed and unsized and not view.unsized(h.plan.workers, h.amp, min_reports):
            woken_by += tuple(w for w in unsized if view.report_counts()[w] > checked[w] and w not in woken_by)
        if not timed and not woken_by:
            continue
        reports = Reports(h.plan, view.summaries(now_s, h.amp), view.total_iterations())
        actions = h.loop.step(now_s, reports, woken_by=woken_by)
        h.amp.update(actions.directives.amp)
        if h.workers.follow_sizes:  # at once (a simplification: only the waking worker's cut is, in the daemon)
            h.workers.batch.update(actions.directives.batch_sizes)
        h.steps.append((now_s, actions))
        since, unsized, min_reports = armed()


def slowdown_wakes(h: Harness) -> list[tuple[float, dict]]:
    """The early decisions woken by a slowdown (not the sizing watch's)."""
    return [(t, e) for t, e in h.events("early_decision") if "per_sample_ms" in e]


def test_a_3x_slowdown_is_resized_when_its_report_arrives_not_at_the_period_end():
    watching = Harness("batch", FakeWorkers(4, slow={2: (10.3, 3.0)}))
    run_watching(watching, 12.0)
    plain = Harness("batch", FakeWorkers(4, slow={2: (10.3, 3.0)}))
    plain.run(12.0)
    t_early, early = slowdown_wakes(watching)[0]
    assert early["workers"] == [2] and 10.3 < t_early < 11.0
    assert early["per_sample_ms"]["2"] > early["watch_ms"]["2"]
    resized = [(t, e) for t, e in watching.events("batch_sizes") if t > 10.0]
    assert resized[0][0] == t_early and resized[0][1]["sizes"]["2"] < BATCH  # the straggler's batch is cut at once
    assert min(t for t, _ in plain.events("batch_sizes") if t > 10.0) >= 11.0  # at the next period's end without it


def test_a_second_early_decision_follows_the_step_the_first_cut_on_half_its_evidence_then_the_watch_rests():
    """The first slow report is one of the two in sizing's median: the first cut sizes for half the step. The next
    slow report crosses the watch re-armed at that cut (for the waking worker only: another's spike waits for the
    period's end), and the second early decision sizes for the whole step; after two early decisions the watch
    stays off until the next timed one."""
    h = Harness("batch", FakeWorkers(4, slow={2: (10.3, 3.0)}, follow_sizes=True))
    run_watching(h, 10.6)
    assert set(h.loop.slowdown_watch()) == {2} == h.loop.confirming()  # after the first, only the waking worker
    run_watching(h, 10.9)
    (t1, first), (t2, second) = slowdown_wakes(h)
    assert (t1, t2) == (pytest.approx(10.5), pytest.approx(10.75)) and first["workers"] == second["workers"] == [2]
    assert first["per_sample_ms"]["2"] == pytest.approx(2.0) and second["per_sample_ms"]["2"] == pytest.approx(3.0)
    sizes = {t: e["sizes"]["2"] for t, e in h.events("batch_sizes")}
    assert sizes[t2] < sizes[t1] < BATCH
    assert h.loop.slowdown_watch() == {} and h.loop.sizing_watch() is None and h.loop.confirming() == frozenset()
    run_watching(h, 11.0)
    watch = h.loop.slowdown_watch()
    assert set(watch) == {0, 1, 2, 3}
    assert watch[2] == pytest.approx(3 * PER_SAMPLE_S * 1.3)  # re-armed from the straggler's new reference


def test_a_straggler_from_the_start_is_sized_when_its_third_report_arrives_not_at_the_period_end():
    """The sizing watch: the slowest worker is the last to have min_reports reports; the decision that judges
    every worker first is taken on its report (here at 2.25 s), not at the next period's end (3 s)."""
    workers = FakeWorkers(4, slow={3: (0.0, 3.0)}, every={3: 0.75}, follow_sizes=True)
    h = Harness("batch", workers)
    run_watching(h, 2.5)
    (t, early), = h.events("early_decision")
    assert t == pytest.approx(2.25) and early["workers"] == [3] and early["min_reports"] == 3
    assert h.loop.state is LoopState.RUNNING
    (t_sized, sized), = h.events("batch_sizes")
    assert t_sized == t and sized["sizes"]["3"] < BATCH
    plain = Harness("batch", FakeWorkers(4, slow={3: (0.0, 3.0)}, every={3: 0.75}))
    plain.run(3.0)
    assert [t for t, _ in plain.events("batch_sizes")] == [3.0]  # the control: the period's end


def test_the_sizing_watch_is_off_without_batch_sizing_and_after_an_early_decision():
    assert Harness("amp", FakeWorkers(4)).loop.sizing_watch() is None
    h = Harness("batch", FakeWorkers(4, slow={3: (0.0, 3.0)}, every={3: 0.75}))
    assert h.loop.sizing_watch() == ControlConfig().min_reports
    run_watching(h, 2.3)  # the early decision at 2.25
    assert h.loop.sizing_watch() is None
    run_watching(h, 3.0)
    assert h.loop.sizing_watch() == ControlConfig().min_reports


@pytest.mark.parametrize("strategy", ["ssgd", "amp", "exclude"])
def test_strategies_without_batch_sizing_watch_nothing(strategy):
    h = Harness(strategy, FakeWorkers(4, slow={2: (5.0, 3.0)}))
    run_watching(h, 8.0)
    assert h.loop.slowdown_watch() == {} and not h.events("early_decision")


def test_nothing_is_watched_before_every_worker_is_judged():
    h = Harness("batch", FakeWorkers(4))
    assert h.loop.slowdown_watch() == {}
    run_watching(h, 3.0)
    assert h.loop.state is LoopState.RUNNING and set(h.loop.slowdown_watch()) == {0, 1, 2, 3}
