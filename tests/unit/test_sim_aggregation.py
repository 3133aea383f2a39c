"""The simulator's vectorised rounds against the plain rule, `star.aggregate.Aggregator`.

The simulator advances whole rounds at once with numpy (fast enough for 1,000 workers);
the PS runs the Aggregator one push at a time. Both must apply the same gradients at the
same moments. Hypothesis draws the plan (SSGD, ASGD, k-of-N with either late policy,
grouped, SSP), the number of workers, a trace whose factors change along the run, and
the PS's seconds per update, and a plan switch at a decision; a reference loop drives the real Aggregator event by event
with the simulator's own cost model, and every update (its time and the pull times of
the gradients it sums) must agree.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import star.sim.engine as engine
from star.aggregate import Aggregator, PushRejected
from star.sim import Simulation, sim_config
from star.sim.replay import FactorTable
from star.traces import Trace

BASE_S = 0.1


class _RecordingLog(engine.UpdateLog):
    """The simulator's update log, also keeping each update's time and its gradients' pull times."""

    updates: list[tuple[float, tuple[float, ...]]]

    def one(self, t, batch, starts):
        super().one(t, batch, starts)
        self.updates.append((float(t), tuple(sorted(float(s) for s in starts))))

    def many(self, times, batch, starts):
        super().many(times, batch, starts)
        self.updates.extend((float(t), (float(s),)) for t, s in zip(times, starts))


class _SwitchingSimulation(Simulation):
    """A simulation whose coordinator sends `switch_plan` at `switch_s` and decides nothing else (the
    fixed strategies decide nothing anyway): the switch path under test, without a policy choosing it."""

    switch_s: float | None = None
    switch_plan = None

    def _decide(self, now, log, woken_by=()):
        if self.switch_s is not None and abs(now - self.switch_s) < 1e-9:
            self._switch(self.switch_plan, now, log)


def simulated_updates(cfg, trace, monkeypatch, switch=None) -> list[tuple[float, tuple[float, ...]]]:
    updates: list[tuple[float, tuple[float, ...]]] = []
    monkeypatch.setattr(_RecordingLog, "updates", updates, raising=False)
    monkeypatch.setattr(engine, "UpdateLog", _RecordingLog)
    sim = _SwitchingSimulation(cfg, trace)
    if switch is not None:
        sim.switch_s, sim.switch_plan = switch
    sim.run()
    return sorted(updates)


def aggregator_updates(cfg, trace, until_s: float, switch=None) -> list[tuple[float, tuple[float, ...]]]:
    """The plain rule: the real Aggregator, one push at a time, with the simulator's durations.
    A worker that pulls at t pushes at t + pull/push/overhead + its compute (base x trace factor).
    A push that makes an update returns once the PS applied it (ps_update_s later), so its worker's
    next pull and the pulls it releases happen then; a dropped or refused push returns at once.
    `switch` = (time, plan): the coordinator sends that plan then (Aggregator.configure)."""
    n, cost = cfg.workers, cfg.cost
    plan = cfg.plan.build(n, epoch=1)
    agg = Aggregator(plan)
    factors = FactorTable(trace, n)
    fixed_s = 2 * cost.transfer_s + cost.overhead_s
    iteration = [0] * n
    start = [0.0] * n
    epoch = [plan.epoch] * n  # the plan epoch each worker pulled under
    owner: dict[int, tuple[int, float]] = {}  # gradient id -> (worker, the pull time of its computation)
    events: list[tuple[float, int, str, int]] = []  # (time, order, "push" | "pull" | "compute" | "switch", worker)
    order = 0
    updates = []

    def at(t: float, kind: str, worker: int) -> None:
        nonlocal order
        heapq.heappush(events, (t, order, kind, worker))
        order += 1

    def compute(worker: int, t: float) -> None:
        start[worker] = t
        epoch[worker] = agg.epoch
        seconds = cost.base_compute_s * float(factors.factors(np.array([worker]), np.array([iteration[worker]]))[0])
        at(t + fixed_s + seconds, "push", worker)

    def record(now: float, effects) -> set[int]:
        """Log the updates; the workers whose gradients they applied."""
        applied = set()
        for apply in effects.applies:
            updates.append((now + cost.ps_update_s, tuple(sorted(owner[g][1] for g in apply.gradient_ids))))
            applied |= {owner[g][0] for g in apply.gradient_ids}
        return applied

    for w in range(n):
        at(0.0, "pull", w)
    if switch is not None:
        at(switch[0], "switch", -1)
    while events and events[0][0] < until_s:
        now, _, kind, w = heapq.heappop(events)
        if kind == "switch":
            effects = agg.configure(switch[1])
            applied = record(now, effects)
            for released in effects.released:
                compute(released, now + cost.ps_update_s if released in applied else now)
        elif kind == "pull":
            if agg.pull(w).ready:
                compute(w, now)  # else blocked: an update or a switch will release it
        elif kind == "compute":
            compute(w, now)
        else:
            iteration[w] += 1
            try:
                outcome = agg.push(w, epoch[w])
            except PushRejected:  # pulled under the previous plan: pull again at once
                at(now, "pull", w)
                continue
            owner[outcome.gradient_id] = (w, start[w])
            resume = now + cost.ps_update_s if record(now, outcome.effects) else now
            for released in outcome.effects.released:
                at(resume, "compute", released)
            at(resume, "pull", w)
    return sorted(updates)


PLANS = st.one_of(
    st.just({"mode": "ssgd"}),
    st.just({"mode": "asgd"}),
    st.just({"mode": "grouped"}),
    st.builds(lambda s: {"mode": "ssp", "staleness": s}, st.integers(0, 3)),
    st.builds(lambda k, late: {"mode": "kofn", "k": k, "late_policy": late}, st.integers(1, 12),
              st.sampled_from(["apply", "drop"])),
)


@st.composite
def cases(draw):
    n = draw(st.integers(2, 12))
    plan = draw(PLANS)
    if plan["mode"] == "kofn":
        plan = {**plan, "k": min(plan["k"], n)}
    if plan["mode"] == "grouped" and n < 4:
        plan = {"mode": "ssgd"}
    rows = []
    for w in range(n):  # each worker: a factor at 0, then a few changes along the run
        # No two workers ever have the same factor, so no two pushes arrive at the same instant: the
        # order of simultaneous events is arbitrary in both implementations, and not a rule.
        distinct = (w + 1) * math.sqrt(2) * 1e-4
        rows.append((0, w, draw(st.floats(1.0, 4.0, allow_nan=False)) + distinct))
        for it in sorted(draw(st.sets(st.integers(1, 80), max_size=4))):
            rows.append((it, w, draw(st.floats(1.0, 6.0, allow_nan=False)) + distinct))
    rows.append((100, 0, rows[0][2]))  # the trace spans past the run: no wrap-around inside it
    cost = {"base_compute_s": BASE_S, "ps_update_s": draw(st.sampled_from([0.0, 0.003, 0.02])),
            "overhead_s": draw(st.sampled_from([0.0, 0.01])), "model_bytes": 1e5, "bandwidth_bytes_per_s": 1e8}
    switch = None
    if draw(st.booleans()):  # the coordinator switches plans at a decision, 1-4 s in
        to = draw(PLANS)
        if to["mode"] == "kofn":
            to = {**to, "k": min(to["k"], n)}
        if to["mode"] == "grouped" and n < 4:
            to = {"mode": "asgd"}
        switch = (float(draw(st.integers(1, 4))), sim_config({"workers": n, "plan": to}).plan.build(n, epoch=2))
    return n, plan, Trace.from_rows(rows), cost, switch


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_the_simulator_applies_the_gradients_the_aggregator_applies_at_the_same_moments(case, monkeypatch):
    n, plan, trace, cost, switch = case
    cfg = sim_config({"workers": n, "iterations": 60, "stop_at_target": False, "plan": plan, "cost": cost,
                      "convergence": {"updates_to_target": 1e9, "eval_period_s": 0.0}})
    simulated = simulated_updates(cfg, trace, monkeypatch, switch)
    assert simulated, "the simulation applied nothing"
    # Compare up to the simulator's last full period: it stops once a worker has done `iterations`.
    until_s = simulated[-1][0] - cfg.control.decision_period_s - 1.0
    if until_s <= 0:
        return
    expected = [u for u in aggregator_updates(cfg, trace, until_s + 1.0, switch) if u[0] < until_s]
    got = [u for u in simulated if u[0] < until_s]
    assert len(got) == len(expected)
    for (t_sim, starts_sim), (t_agg, starts_agg) in zip(got, expected):
        assert t_sim == pytest.approx(t_agg, abs=1e-9)
        assert starts_sim == pytest.approx(starts_agg, abs=1e-9)
