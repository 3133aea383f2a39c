"""The learned mode selector: JSON tree export, fallback, deterministic training, the shipped model."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from star.plan import ssgd
from star.policy import learned
from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy
from star.policy.selector import HeuristicSelector, SelectorConfig
from star.sim import selector_training as training

STRAGGLER_TIMES = {0: 0.1, 1: 0.1, 2: 0.1, 3: 0.35}
BATCH = {w: 64 for w in range(4)}


@pytest.fixture(scope="module")
def small_training_set():
    return training.measure_all(training.sample_scenarios(6, seed=5, min_workers=4, max_workers=6))


def test_exported_trees_predict_exactly_what_sklearn_predicts():
    from sklearn.ensemble import GradientBoostingRegressor

    rng = np.random.default_rng(0)
    x = rng.random((200, len(learned.FEATURES)))
    y = np.sin(3 * x[:, 0]) + x[:, 1] ** 2
    regressor = GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0).fit(x, y)
    model = training.from_sklearn(regressor, {f: (0.0, 1.0) for f in learned.DECISION_FEATURES}, {})
    assert np.allclose(model.predict(x), regressor.predict(x), atol=1e-12)


def test_model_round_trips_through_json_with_the_same_predictions(small_training_set, tmp_path):
    model = training.fit(small_training_set, seed=0, trees=20)
    path = training.save_model(model, tmp_path / "m.json")
    loaded = learned.load_model(path)
    rows = np.concatenate([m.rows for m in small_training_set])
    assert np.array_equal(loaded.predict(rows), model.predict(rows))
    assert loaded.ranges == model.ranges and loaded.base_feature == "heuristic_log_ratio"


def test_training_is_deterministic_for_a_seed_and_differs_across_seeds():
    a = training.train(seed=3, scenarios=4, min_workers=4, max_workers=5)
    b = training.train(seed=3, scenarios=4, min_workers=4, max_workers=5)
    c = training.train(seed=4, scenarios=4, min_workers=4, max_workers=5)
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    assert json.dumps(a.to_json()) != json.dumps(c.to_json())


def test_a_decision_outside_the_training_ranges_falls_back_to_the_heuristic(small_training_set):
    model = training.fit(small_training_set, seed=0, trees=10)
    narrow = dataclasses.replace(model, ranges={**model.ranges, "workers": (1.0, 1000.0), "max_over_median": (1.0, 1.5)})
    selector = learned.LearnedSelector(model=narrow)
    decision = selector.decide(10, ssgd(range(4), epoch=1), STRAGGLER_TIMES, BATCH, frozenset({3}), 0.0,
                               comm_s={w: 0.01 for w in range(4)})
    expected = HeuristicSelector().decide(10, ssgd(range(4), epoch=1), STRAGGLER_TIMES, BATCH, frozenset({3}), 0.0)
    assert decision.reason.startswith("heuristic fallback (") and "max_over_median=3.5 not in [1, 1.5]" in decision.reason
    assert decision.plan == expected.plan and decision.plan is not None


def test_a_decision_inside_the_ranges_is_ranked_by_the_model(small_training_set):
    model = training.fit(small_training_set, seed=0, trees=10)
    wide = dataclasses.replace(model, ranges={f: (-1e9, 1e9) for f in learned.DECISION_FEATURES})
    decision = learned.LearnedSelector(model=wide).decide(10, ssgd(range(4), epoch=1), STRAGGLER_TIMES, BATCH,
                                                          frozenset({3}), 0.0, comm_s={w: 0.01 for w in range(4)})
    assert decision.reason.startswith("learned:")
    assert len(decision.estimates) > 1 and all(np.isfinite(e.seconds_per_progress) for e in decision.estimates)


def test_a_staleness_penalty_outside_the_training_range_falls_back_to_the_heuristic(small_training_set):
    model = training.fit(small_training_set, seed=0, trees=10)
    narrow = dataclasses.replace(model, ranges={**{f: (-1e9, 1e9) for f in learned.DECISION_FEATURES},
                                                "staleness_penalty": (0.1, 1.0)})
    config = SelectorConfig(staleness_penalty=3.0)
    decision = learned.LearnedSelector(config, model=narrow).decide(
        10, ssgd(range(4), epoch=1), STRAGGLER_TIMES, BATCH, frozenset({3}), 0.0, comm_s={w: 0.01 for w in range(4)})
    expected = HeuristicSelector(config).decide(10, ssgd(range(4), epoch=1), STRAGGLER_TIMES, BATCH, frozenset({3}), 0.0)
    assert "staleness_penalty=3 not in [0.1, 1]" in decision.reason
    assert decision.plan == expected.plan


def _stale_plan_over_ssgd(penalty: float) -> float:
    """The shipped model's predicted seconds per progress of the best k-of-N or grouped plan over SSGD's,
    16 workers, one of them 3x slower, for a task with this staleness penalty."""
    times = {w: 0.31 if w == 0 else 0.11 for w in range(16)}
    decision = learned.LearnedSelector(SelectorConfig(staleness_penalty=penalty)).decide(
        10, ssgd(range(16), epoch=1), times, {w: 64 for w in range(16)}, frozenset({0}), 0.0,
        comm_s={w: 0.01 for w in range(16)})
    assert decision.reason.startswith("learned:"), decision.reason
    by_label = lambda label: min(e.seconds_per_progress for e in decision.estimates if e.plan.label == label)  # noqa: E731
    return min(by_label("kofn"), by_label("grouped")) / by_label("ssgd")


def test_the_learned_selector_prices_stale_plans_with_the_task_s_staleness_penalty():
    """Trained at a single penalty (0.15), the model ranked k-of-N and grouped plans for digits (0.88) as if stale
    updates were nearly free: in `star bench --sim` at 100 workers it left SSGD for grouped plans and took 2.2x
    the best strategy's time on heavy_tail."""
    assert _stale_plan_over_ssgd(1.5) > _stale_plan_over_ssgd(0.1)


def test_training_simulates_each_scenario_at_the_penalty_its_features_show():
    base = training.Scenario(factors=(1.0, 1.0, 1.0, 4.0), noise_cv=0.0, b_noise_ratio=0.0, comm_ratio=0.01,
                             overhead_ratio=0.0, seed=0)
    cheap = training.measure_scenario(dataclasses.replace(base, staleness_penalty=0.1))
    dear = training.measure_scenario(dataclasses.replace(base, staleness_penalty=1.5))
    assert cheap.decision["staleness_penalty"] == 0.1 and dear.decision["staleness_penalty"] == 1.5
    asgd = [p.label for p in cheap.plans].index("asgd")
    ssgd_at = [p.label for p in cheap.plans].index("ssgd")
    assert dear.measured_s[asgd] > cheap.measured_s[asgd]  # the simulated truth pays for staleness
    assert dear.measured_s[ssgd_at] == pytest.approx(cheap.measured_s[ssgd_at])  # SSGD is never stale
    assert dear.heuristic_s[asgd] > cheap.heuristic_s[asgd]  # and so does the heuristic's estimate


def test_sampled_scenarios_span_the_staleness_penalties_of_real_tasks():
    penalties = [s.staleness_penalty for s in training.sample_scenarios(200, seed=0)]
    lo, hi = training.PENALTY_RANGE
    assert all(lo <= p <= hi for p in penalties)
    assert min(penalties) < 0.15 < 0.88 < max(penalties)  # the default and digits' measured penalty inside


def test_a_model_file_with_a_bad_tree_or_format_is_refused(small_training_set, tmp_path):
    data = training.fit(small_training_set, seed=0, trees=5).to_json()
    data["trees"][0]["feature"][0] = 99
    with pytest.raises(ValueError, match="malformed"):
        learned.TreeModel.from_json(data)
    with pytest.raises(ValueError, match="format"):
        learned.TreeModel.from_json({**data, "format": "pickle"})


def test_the_shipped_model_loads_with_a_range_for_every_decision_feature():
    model = learned.load_model()
    assert set(model.ranges) == set(learned.DECISION_FEATURES)
    assert all(lo <= hi for lo, hi in model.ranges.values())
    assert model.ranges["workers"][0] <= 4 and len(model.trees) > 0
    assert "held_out_regret" in model.meta


def test_controller_uses_the_learned_selector_when_configured():
    config = for_strategy(ControlConfig(selector_kind="learned", batch=False, amp=False), "auto")
    controller = Controller(config, 4, 64)
    assert isinstance(controller.selector, learned.LearnedSelector)
    plan = ssgd(range(4), epoch=1)
    workers = {w: WorkerSummary((3.5 if w == 3 else 1.0) * 1e-3, 0.01, 64, 0, 4) for w in range(4)}
    reasons = []
    for period in range(6):
        decision = controller.decide(period, plan, workers)
        reasons += [e["reason"] for e in decision.events if e["kind"] == "plan_decision"]
        plan = decision.plan or plan
    assert reasons and all(r.startswith(("learned:", "heuristic fallback")) for r in reasons)


def test_an_unknown_selector_kind_is_a_config_error():
    from star.config import ConfigError

    with pytest.raises(ConfigError, match="selector_kind"):
        ControlConfig(selector_kind="oracle")
