"""Training the learned selector: static scenarios measured in the simulator, trees fitted with scikit-learn.

Why here: training drives the simulator (star.sim), which drives the controller, which
uses the selector for inference (star.policy.learned); keeping training beside the
simulator keeps that chain one-way. `star train-selector` calls `train_and_evaluate`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from star.detect import DetectorConfig, slow_now
from star.plan import SyncPlan, ssgd
from star.policy.candidates import candidate_plans
from star.policy.learned import (DECISION_FEATURES, FEATURES, SHIPPED_MODEL, TreeModel, decision_features,
                                 feature_rows)
from star.policy.plan_scores import estimate
from star.policy.selector import DEFAULT_STALENESS_PENALTY, SelectorConfig
from star.sim.engine import Simulation
from star.sim.config import sim_config
from star.traces import Trace


def from_sklearn(regressor: Any, ranges: Mapping[str, tuple[float, float]], meta: Mapping[str, Any],
                 base_feature: str | None = None) -> TreeModel:
    """Export a fitted sklearn GradientBoostingRegressor (squared error) to a TreeModel."""
    trees = []
    for estimator in regressor.estimators_[:, 0]:
        t = estimator.tree_
        trees.append({
            "feature": t.feature.astype(np.int64), "threshold": t.threshold.astype(float),
            "left": t.children_left.astype(np.int64), "right": t.children_right.astype(np.int64),
            "value": t.value[:, 0, 0].astype(float),
        })
    init = float(np.ravel(regressor.init_.constant_)[0])
    return TreeModel(FEATURES, dict(ranges), init, float(regressor.learning_rate), tuple(trees), base_feature, dict(meta))


def save_model(model: TreeModel, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(model.to_json(), separators=(",", ":")) + "\n")
    return path


@dataclass(frozen=True)
class Scenario:
    """A static cluster state: every worker's slowdown factor and the job's costs."""

    factors: tuple[float, ...]  # per-worker compute slowdown
    noise_cv: float  # per-iteration compute noise (lognormal CoV)
    b_noise_ratio: float  # B_noise / (N x base batch)
    comm_ratio: float  # push+pull seconds / base compute seconds
    overhead_ratio: float  # other per-iteration seconds / base compute seconds
    seed: int  # the simulation's noise seed
    workers_per_host: int = 1  # workers sharing one host's cores
    cores_per_worker: float = 0.0  # a host's cores / its workers (0: every worker has its own, no contention)
    staleness_penalty: float = DEFAULT_STALENESS_PENALTY  # the task's: an update s versions stale is worth 1/(1 + penalty x s)

    @property
    def sync_stretch(self) -> float:
        """How much slower a worker computes when a synchronous round releases its whole host at once."""
        return max(1.0, 1.0 / self.cores_per_worker) if self.cores_per_worker > 0 else 1.0


BASE_COMPUTE_S = 0.1
BASE_BATCH = 64
PENALTY_RANGE = (0.05, 2.0)  # staleness penalties trained on, log-uniform: the default 0.15 and digits' measured 0.88 and 0.45 inside


def sample_scenarios(count: int, seed: int, min_workers: int = 4, max_workers: int = 64) -> list[Scenario]:
    """A seeded mix of clean, static, few-straggler and heavy-tailed clusters, some on shared hosts."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(round(math.exp(rng.uniform(math.log(min_workers), math.log(max_workers)))))
        kind = rng.choice(["clean", "static", "stragglers", "heavy_tail"], p=[0.15, 0.25, 0.4, 0.2])
        factors = np.ones(n)
        if kind == "static":
            factors = 1 + rng.uniform(0.1, 1.5) * rng.random(n)
        elif kind == "stragglers":
            slow = rng.choice(n, max(1, int(rng.integers(1, max(2, n // 4 + 1)))), replace=False)
            factors[slow] = rng.uniform(1.3, 6.0, len(slow))
            factors *= 1 + 0.05 * rng.random(n)
        elif kind == "heavy_tail":
            factors = np.minimum(1 + rng.pareto(rng.uniform(1.5, 3.0), n) / 5, 20.0)
        out.append(Scenario(
            factors=tuple(float(f) for f in factors),
            noise_cv=float(rng.choice([0.0, rng.uniform(0.02, 0.4)])),
            b_noise_ratio=float(0.0 if rng.random() < 0.3 else math.exp(rng.uniform(math.log(0.05), math.log(4.0)))),
            comm_ratio=float(math.exp(rng.uniform(math.log(0.01), math.log(1.0)))),
            overhead_ratio=float(rng.uniform(0.0, 0.8)),
            seed=int(seed * 100_003 + i),
            **_host(rng),
            staleness_penalty=float(math.exp(rng.uniform(*np.log(PENALTY_RANGE)))),
        ))
    return out


def _host(rng: np.random.Generator) -> dict[str, Any]:
    """A third of the clusters pack 2-8 workers on hosts with fewer cores than workers (one core each otherwise)."""
    if rng.random() >= 1 / 3:
        return {}
    return {"workers_per_host": int(rng.choice([2, 4, 8])), "cores_per_worker": float(rng.uniform(0.25, 1.0))}


def scenario_inputs(s: Scenario) -> tuple[dict[int, float], dict[int, float], dict[int, int], frozenset[int], float]:
    """What the controller would see under SSGD: iteration times (comm + compute), comm, batches, stragglers, B_noise."""
    comm = s.comm_ratio * BASE_COMPUTE_S
    compute = BASE_COMPUTE_S * s.sync_stretch
    per_sample = {w: compute * f / BASE_BATCH for w, f in enumerate(s.factors)}
    iter_time = {w: comm + compute * f for w, f in enumerate(s.factors)}
    stragglers = slow_now(per_sample, DetectorConfig())
    n = len(s.factors)
    return iter_time, {w: comm for w in range(n)}, {w: BASE_BATCH for w in range(n)}, stragglers, s.b_noise_ratio * n * BASE_BATCH


def measure(s: Scenario, plans: Sequence[SyncPlan], rounds: float = 60.0) -> list[float]:
    """Simulated seconds per unit progress of each plan held fixed for about `rounds` SSGD rounds."""
    n = len(s.factors)
    trace = Trace.from_rows([(0, w, f) for w, f in enumerate(s.factors)] + [(10**6, w, f) for w, f in enumerate(s.factors)])
    horizon = rounds * BASE_COMPUTE_S * (max(s.factors) * s.sync_stretch + s.comm_ratio + s.overhead_ratio)
    host = {"host_cores": s.workers_per_host * s.cores_per_worker, "workers_per_host": s.workers_per_host} if s.cores_per_worker > 0 else {}
    config = sim_config({
        "workers": n, "iterations": 10**9, "stop_at_target": False, "max_time_s": horizon, "seed": s.seed,
        "plan": {"mode": "ssgd"}, "control": {"decision_period_s": horizon},
        "cost": {"base_compute_s": BASE_COMPUTE_S, "base_batch": BASE_BATCH, "model_bytes": s.comm_ratio * BASE_COMPUTE_S / 2,
                 "bandwidth_bytes_per_s": 1.0, "overhead_s": s.overhead_ratio * BASE_COMPUTE_S, "compute_noise_cv": s.noise_cv,
                 **host},
        "convergence": {"updates_to_target": 1e12, "eval_period_s": 0.0, "b_noise": s.b_noise_ratio * n * BASE_BATCH,
                        "staleness_penalty": s.staleness_penalty},
    })
    out = []
    for plan in plans:
        sim = Simulation(config, trace)
        sim.set_plan(plan)
        sim.run()
        out.append(horizon / sim.progress if sim.progress > 0 else float("inf"))
    return out


@dataclass(frozen=True)
class Measured:
    """One scenario's candidates: feature rows, heuristic estimates and simulated truth."""

    decision: dict[str, float]
    plans: tuple[SyncPlan, ...]
    rows: np.ndarray
    heuristic_s: np.ndarray  # heuristic seconds per progress
    measured_s: np.ndarray  # simulated seconds per progress


def measure_scenario(s: Scenario, config: SelectorConfig | None = None) -> Measured:
    """The heuristic weighs plans with the scenario's penalty, as it does with a task's calibrated one."""
    config = dataclasses.replace(config or SelectorConfig(), staleness_penalty=s.staleness_penalty)
    iter_time, comm, batch, stragglers, b_noise = scenario_inputs(s)
    workers = sorted(iter_time)
    plans = candidate_plans(workers, stragglers, iter_time, config.modes)
    heuristic = [estimate(p, iter_time, batch, b_noise, config.penalty).seconds_per_progress for p in plans]
    base = estimate(ssgd(workers), iter_time, batch, b_noise, config.penalty).seconds_per_progress
    decision = decision_features(iter_time, comm, batch, stragglers, b_noise, config.penalty)
    rows = feature_rows(decision, plans, heuristic, base)
    return Measured(decision, tuple(plans), rows, np.asarray(heuristic), np.asarray(measure(s, plans)))


def measure_all(scenarios: Sequence[Scenario], progress=None) -> list[Measured]:
    out = []
    for i, s in enumerate(scenarios, 1):
        out.append(measure_scenario(s))
        if progress:
            progress(i, len(scenarios))
    return out


def fit(measured: Sequence[Measured], seed: int, trees: int = 150, depth: int = 4, learning_rate: float = 0.08) -> TreeModel:
    """Fit log(plan / SSGD seconds per progress) on every candidate of every scenario, as the residual over
    the heuristic's log ratio: where the heuristic is right the trees add ~0 and keep its fine-grained ranking."""
    from sklearn import __version__ as sklearn_version
    from sklearn.ensemble import GradientBoostingRegressor

    rows, targets = [], []
    for m in measured:
        ssgd_s = m.measured_s[[p.label == "ssgd" for p in m.plans].index(True)]
        keep = np.isfinite(m.measured_s)
        rows.append(m.rows[keep])
        targets.append(np.log(m.measured_s[keep] / ssgd_s) - m.rows[keep, FEATURES.index("heuristic_log_ratio")])
    x, y = np.concatenate(rows), np.concatenate(targets)
    regressor = GradientBoostingRegressor(n_estimators=trees, max_depth=depth, learning_rate=learning_rate,
                                          subsample=0.8, random_state=seed).fit(x, y)
    decisions = np.array([[m.decision[f] for f in DECISION_FEATURES] for m in measured])
    ranges = {f: (float(decisions[:, i].min()), float(decisions[:, i].max())) for i, f in enumerate(DECISION_FEATURES)}
    meta = {"seed": seed, "scenarios": len(measured), "rows": int(len(y)), "trees": trees, "depth": depth,
            "sklearn": sklearn_version, "target": "log(plan seconds per progress / SSGD's), simulated"}
    return from_sklearn(regressor, ranges, meta, base_feature="heuristic_log_ratio")


def train(seed: int = 0, scenarios: int = 300, min_workers: int = 4, max_workers: int = 64, progress=None) -> TreeModel:
    """Sample scenarios from `seed`, simulate every candidate plan, fit: the same seed gives the same model."""
    measured = measure_all(sample_scenarios(scenarios, seed, min_workers, max_workers), progress)
    model = fit(measured, seed)
    return dataclasses.replace(model, meta={**model.meta, "min_workers": min_workers, "max_workers": max_workers})


def picks(m: Measured, model: TreeModel) -> tuple[int, int]:
    """Indices of the heuristic's and the model's choice among a scenario's candidates."""
    return int(np.argmin(m.heuristic_s)), int(np.argmin(model.predict(m.rows)))


def regret(measured: Sequence[Measured], model: TreeModel) -> dict[str, dict[str, float]]:
    """Extra seconds per progress of each selector's pick over the best plan in hindsight (held-out scenarios).

    Held fixed, a plan's TTA is proportional to its seconds per progress, so this is its extra TTA.
    """
    out: dict[str, list[float]] = {"heuristic": [], "learned": []}
    for m in measured:
        best = m.measured_s.min()
        h, l = picks(m, model)
        out["heuristic"].append(m.measured_s[h] / best - 1)
        out["learned"].append(m.measured_s[l] / best - 1)
    table = {}
    for name, values in out.items():
        v = np.asarray(values)
        table[name] = {"scenarios": len(v), "mean": float(v.mean()), "median": float(np.median(v)),
                       "p90": float(np.quantile(v, 0.9)), "max": float(v.max()), "over_5pct": float((v > 0.05).mean())}
    return table


def default_model_path() -> Path:
    """Where the shipped model lives in a source checkout (star/policy/models/selector.json)."""
    return Path(__file__).resolve().parent.parent / "policy" / "models" / SHIPPED_MODEL


def train_and_evaluate(seed: int, scenarios: int, held_out: int, min_workers: int, max_workers: int,
                       progress=None) -> tuple[TreeModel, dict[str, dict[str, float]]]:
    """Train from `seed`, then measure regret on `held_out` scenarios drawn from another seed (recorded in meta)."""
    model = train(seed, scenarios, min_workers, max_workers, progress)
    table: dict[str, dict[str, float]] = {}
    if held_out > 0:
        test = measure_all(sample_scenarios(held_out, seed + 1_000_003, min_workers, max_workers), progress)
        table = regret(test, model)
        model = dataclasses.replace(model, meta={**model.meta, "held_out_seed": seed + 1_000_003,
                                                 "held_out_regret": {k: {m: round(v, 5) for m, v in r.items()} for k, r in table.items()}})
    return model, table
