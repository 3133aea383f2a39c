"""Learned sync-mode selection: gradient-boosted trees, trained on simulated scenarios, rank candidate plans.

Why: the heuristic (star.policy.selector) scores plans with a closed-form model that
sees only per-worker median iteration times; it cannot know the costs it does not
model (per-iteration overhead that does not straggle, compute noise that makes SSGD wait
for the slowest of N noisy draws). The learned model is trained on what the simulator
measures for every candidate plan, with the heuristic's own estimate as one input, so
it learns the heuristic's errors rather than the whole problem.

- Features (DESIGN.md §5), per decision: worker count, CoV and max/median of the
  per-worker iteration times, straggler fraction, B_noise/B (B = the SSGD batch),
  communication/compute ratio, and the task's staleness penalty (what a stale update is
  worth: the same number the heuristic weighs plans with; without it a model trained at one
  penalty ranked k-of-N and grouped plans for a task whose penalty was six times higher);
  per candidate plan: its family, its quorum/split
  fraction, and log(heuristic estimate / heuristic SSGD estimate). Model size and
  training progress are not used: the controller does not see the model's bytes (the
  communication/compute ratio carries its effect) and the simulator's convergence model
  makes progress per update independent of progress so far, so nothing could be learned
  from them.
- Target: log(seconds per unit progress of the plan / that of SSGD), measured by
  simulating each plan held fixed on a static scenario; the selector picks the minimum.
- The model is stored as JSON (tree arrays, evaluated here with numpy): loading it runs
  no code from the file. It carries the range of every decision feature seen in
  training; outside it the selector falls back to the heuristic.
- Training (`star train-selector`) lives in star.sim.selector_training, beside the
  simulator it drives; this module is inference only.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from star.detect import DetectorConfig
from star.plan import SyncPlan, ssgd
from star.policy.candidates import candidate_plans
from star.policy.plan_scores import Estimate, estimate
from star.policy.selector import HeuristicSelector, ModeDecision, SelectorConfig, same_shape, unconfirmed

MODEL_FORMAT = "star-gbt-v1"
SHIPPED_MODEL = "selector.json"  # in star/policy/models/
DECISION_FEATURES = ("workers", "time_cov", "max_over_median", "straggler_fraction", "b_noise_over_batch", "comm_over_compute",
                     "staleness_penalty")
FAMILIES = ("ssgd", "kofn", "grouped", "exclude", "asgd")
PLAN_FEATURES = tuple(f"is_{f}" for f in FAMILIES) + ("plan_fraction", "heuristic_log_ratio")
FEATURES = DECISION_FEATURES + PLAN_FEATURES


# ---- features (pure) -----------------------------------------------------------------
def decision_features(iter_time_s: Mapping[int, float], comm_s: Mapping[int, float], batch: Mapping[int, int],
                      stragglers: frozenset[int], b_noise: float, staleness_penalty: float) -> dict[str, float]:
    """What one decision looks like, independent of the candidate plans."""
    times = [iter_time_s[w] for w in sorted(iter_time_s)]
    n = len(times)
    mean = sum(times) / n
    median = statistics.median(times)
    cov = statistics.pstdev(times) / mean if mean > 0 else 0.0
    comm = statistics.median(comm_s.get(w, 0.0) for w in iter_time_s)
    compute = statistics.median(max(iter_time_s[w] - comm_s.get(w, 0.0), 1e-12) for w in iter_time_s)
    full_batch = sum(batch[w] for w in iter_time_s)
    return {
        "workers": float(n),
        "time_cov": cov,
        "max_over_median": max(times) / median if median > 0 else 1.0,
        "straggler_fraction": len(stragglers & set(iter_time_s)) / n,
        "b_noise_over_batch": b_noise / full_batch if full_batch > 0 else 0.0,
        "comm_over_compute": comm / compute,
        "staleness_penalty": staleness_penalty,
    }


def plan_family(plan: SyncPlan) -> str | None:
    return plan.label if plan.label in FAMILIES and plan.staleness_bound is None else None


def plan_fraction(plan: SyncPlan) -> float:
    """The one number that tells plans of a family apart: k/N, the fast group's share, the excluded share."""
    n = plan.total_workers
    family = plan_family(plan)
    if family == "kofn":
        return plan.quorum[0] / n
    if family == "grouped":
        return max(len(g) for g in plan.groups) / n
    if family == "exclude":
        return sum(1 for g in plan.groups if len(g) == 1) / n
    if family == "asgd":
        return 1.0 / n
    return 1.0


def feature_rows(decision: Mapping[str, float], plans: Sequence[SyncPlan], estimates: Sequence[float],
                 ssgd_estimate: float) -> np.ndarray:
    """One row per plan, columns in FEATURES order."""
    rows = np.zeros((len(plans), len(FEATURES)))
    rows[:, : len(DECISION_FEATURES)] = [decision[f] for f in DECISION_FEATURES]
    base = len(DECISION_FEATURES)
    for i, (plan, est) in enumerate(zip(plans, estimates)):
        family = plan_family(plan)
        if family is not None:
            rows[i, base + FAMILIES.index(family)] = 1.0
        rows[i, base + len(FAMILIES)] = plan_fraction(plan)
        rows[i, base + len(FAMILIES) + 1] = math.log(est / ssgd_estimate)
    return rows


# ---- the model: JSON trees ------------------------------------------------------------
@dataclass(frozen=True)
class TreeModel:
    """A gradient-boosted regression-tree ensemble, as plain arrays (no code in the file)."""

    features: tuple[str, ...]  # column names, in order
    ranges: dict[str, tuple[float, float]]  # decision features seen in training: (min, max)
    init: float  # the ensemble's constant start
    learning_rate: float  # each tree's contribution factor
    trees: tuple[dict[str, np.ndarray], ...]  # feature, threshold, left, right, value per node (left = -1: leaf)
    base_feature: str | None = None  # a feature added to the prediction (the trees learn the residual over it)
    meta: dict[str, Any] = field(default_factory=dict)  # seed, scenario counts, versions: for the record only

    def predict(self, rows: np.ndarray) -> np.ndarray:
        rows = np.atleast_2d(np.asarray(rows, dtype=float))
        out = np.full(len(rows), self.init)
        index = np.arange(len(rows))
        for tree in self.trees:
            node = np.zeros(len(rows), dtype=np.int64)
            while True:
                inner = tree["left"][node] >= 0
                if not inner.any():
                    break
                n = node[inner]
                go_left = rows[index[inner], tree["feature"][n]] <= tree["threshold"][n]
                node[inner] = np.where(go_left, tree["left"][n], tree["right"][n])
            out += self.learning_rate * tree["value"][node]
        if self.base_feature is not None:
            out += rows[:, self.features.index(self.base_feature)]
        return out

    def out_of_range(self, decision: Mapping[str, float]) -> list[str]:
        """Decision features outside what training saw, as 'name=value not in [lo, hi]'."""
        bad = []
        for name, (lo, hi) in self.ranges.items():
            value = decision[name]
            if not lo <= value <= hi:
                bad.append(f"{name}={value:.4g} not in [{lo:.4g}, {hi:.4g}]")
        return bad

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MODEL_FORMAT,
            "features": list(self.features),
            "ranges": {k: [float(lo), float(hi)] for k, (lo, hi) in self.ranges.items()},
            "init": float(self.init),
            "learning_rate": float(self.learning_rate),
            "base_feature": self.base_feature,
            "meta": self.meta,
            "trees": [{k: v.tolist() for k, v in tree.items()} for tree in self.trees],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TreeModel:
        if data.get("format") != MODEL_FORMAT:
            raise ValueError(f"selector model format {data.get('format')!r}, expected {MODEL_FORMAT!r}")
        features = tuple(data["features"])
        if features != FEATURES:
            raise ValueError(f"selector model features {features} do not match this version's {FEATURES}")
        trees = []
        for tree in data["trees"]:
            parsed = {
                "feature": np.asarray(tree["feature"], dtype=np.int64),
                "threshold": np.asarray(tree["threshold"], dtype=float),
                "left": np.asarray(tree["left"], dtype=np.int64),
                "right": np.asarray(tree["right"], dtype=np.int64),
                "value": np.asarray(tree["value"], dtype=float),
            }
            sizes = {len(v) for v in parsed.values()}
            inner = parsed["left"] >= 0
            if len(sizes) != 1 or (inner & ((parsed["feature"] < 0) | (parsed["feature"] >= len(features)))).any() \
                    or (parsed["left"] >= len(parsed["left"])).any() or (parsed["right"] >= len(parsed["right"])).any():
                raise ValueError("selector model has a malformed tree")
            trees.append(parsed)
        ranges = {k: (float(v[0]), float(v[1])) for k, v in data["ranges"].items()}
        if set(ranges) != set(DECISION_FEATURES):
            raise ValueError(f"selector model ranges {sorted(ranges)} do not name every decision feature")
        base = data.get("base_feature")
        if base is not None and base not in features:
            raise ValueError(f"selector model base_feature {base!r} is not a feature")
        return cls(features, ranges, float(data["init"]), float(data["learning_rate"]), tuple(trees), base,
                   dict(data.get("meta", {})))


def load_model(path: str | Path | None = None) -> TreeModel:
    """A model file (JSON only: nothing in it is executed); None loads the one shipped in the package."""
    if path is None:
        text = resources.files("star.policy").joinpath("models", SHIPPED_MODEL).read_text()
    else:
        text = Path(path).read_text()
    return TreeModel.from_json(json.loads(text))


# ---- the selector ---------------------------------------------------------------------
class LearnedSelector:
    """Ranks the heuristic's candidate plans by the model's predicted seconds per progress.

    Switching rules (margin, dwell) are the heuristic's; outside the model's feature
    ranges, or for a plan family it was not trained on, the heuristic decides.
    """

    def __init__(self, config: SelectorConfig | None = None, model: TreeModel | None = None,
                 detector: DetectorConfig | None = None):
        self.config = config or SelectorConfig()
        self.model = model if model is not None else load_model()
        self.detector = detector or DetectorConfig()
        self.heuristic = HeuristicSelector(self.config)
        self._last_switch = -(10**9)

    def decide(self, period: int, current: SyncPlan, iter_time_s: Mapping[int, float], batch: Mapping[int, int],
               stragglers: frozenset[int], b_noise: float = 0.0, comm_s: Mapping[int, float] | None = None,
               previous_iter_time_s: Mapping[int, float] | None = None) -> ModeDecision:
        workers = current.workers
        if any(w not in iter_time_s for w in workers):
            return ModeDecision(None, "waiting for timings from every worker", ())
        lo, hi = self.model.ranges.get("workers", (-math.inf, math.inf))
        if not lo <= len(workers) <= hi:  # checked first: the other features cost O(N) statistics, wasted on a fallback
            return self._fallback(period, current, iter_time_s, batch, stragglers, b_noise, previous_iter_time_s,
                                  f"workers={len(workers):.4g} not in [{lo:.4g}, {hi:.4g}]")
        times = {w: iter_time_s[w] for w in workers}
        penalty = self.config.penalty  # the task's (or configured) penalty, as the heuristic weighs plans
        decision = decision_features(times, comm_s or {}, batch, stragglers, b_noise, penalty)
        bad = self.model.out_of_range(decision)
        if bad or plan_family(current) is None or len(workers) < 2:
            why = "; ".join(bad) if bad else f"current plan {current.label!r} is not a family the model knows"
            return self._fallback(period, current, iter_time_s, batch, stragglers, b_noise, previous_iter_time_s, why)
        plans = [p for p in candidate_plans(workers, stragglers, times, self.config.modes) if not same_shape(p, current)]
        plans.append(current)
        heuristic = [estimate(p, times, batch, b_noise, penalty) for p in plans]
        base = estimate(ssgd(workers), times, batch, b_noise, penalty).seconds_per_progress
        predicted = np.exp(self.model.predict(feature_rows(decision, plans, [e.seconds_per_progress for e in heuristic], base))) * base
        estimates = tuple(Estimate(e.plan, float(s), e.gradients_per_s, e.efficiency, e.staleness) for e, s in zip(heuristic, predicted))
        now, candidates = estimates[-1], estimates[:-1]
        if not candidates:
            return ModeDecision(None, "no candidate plans", estimates)
        best = min(candidates, key=lambda e: e.seconds_per_progress)
        if best.seconds_per_progress >= now.seconds_per_progress:
            return ModeDecision(None, f"learned: {current.label} is already the best plan ({now.seconds_per_progress:.4f} s/step)", estimates)
        if period - self._last_switch < self.config.min_dwell:
            return ModeDecision(None, f"learned: dwell: last switch {period - self._last_switch} decisions ago", estimates)
        gain = 1 - best.seconds_per_progress / now.seconds_per_progress
        if gain < self.config.margin:
            return ModeDecision(None, f"learned: best {best.plan.label} gains only {gain:.1%} over {current.label} "
                                      f"(margin {self.config.margin:.0%})", estimates)
        why_not = unconfirmed(best.plan, current, previous_iter_time_s, batch, b_noise, penalty, self.config.margin)
        if why_not is not None:
            return ModeDecision(None, f"learned: {why_not}", estimates)
        self._last_switch = period
        return ModeDecision(best.plan, f"learned: {best.plan.label} {best.seconds_per_progress:.4f} s/step beats "
                                       f"{current.label} {now.seconds_per_progress:.4f} by {gain:.1%}", estimates)

    def _fallback(self, period, current, iter_time_s, batch, stragglers, b_noise, previous_iter_time_s, why: str) -> ModeDecision:
        self.heuristic._last_switch = self._last_switch
        d = self.heuristic.decide(period, current, iter_time_s, batch, stragglers, b_noise, previous_iter_time_s)
        self._last_switch = self.heuristic._last_switch
        return ModeDecision(d.plan, f"heuristic fallback ({why}): {d.reason}", d.estimates)
