"""Held-out regret of the heuristic, the new model and the old (penalty-blind) model on the same scenarios.

Run from the repository root: python benchmarks/results/selector_penalty/score_against_old_model.py
The old model is the one shipped at 554a16b, read from git; it is fed the features it was trained on (the
heuristic's estimates at the default penalty 0.15, no penalty feature) and falls back to the heuristic at 0.15
outside its ranges, as it did in the selector. Every selector is scored against the same simulated truth (each
scenario simulated at its own penalty)."""
import json, math, subprocess, numpy as np
from star.sim import selector_training as T
from star.policy import learned as L
from star.policy.plan_scores import estimate
from star.plan import ssgd

test_sc = T.sample_scenarios(150, 1_000_003, 4, 128)
measured = T.measure_all(test_sc)
new = L.load_model()
old_json = json.loads(subprocess.run(["git", "show", "554a16b:star/policy/models/selector.json"], capture_output=True,
                                     text=True, check=True).stdout)
old_features = tuple(old_json["features"])
trees = [{k: np.asarray(v, dtype=np.int64 if k in ("feature", "left", "right") else float) for k, v in t.items()} for t in old_json["trees"]]
old = L.TreeModel(old_features, {}, old_json["init"], old_json["learning_rate"], tuple(trees), old_json["base_feature"])
old_ranges = old_json["ranges"]
def old_rows(s, m):
    it, comm, batch, strag, bn = T.scenario_inputs(s)
    heur = [estimate(p, it, batch, bn, 0.15).seconds_per_progress for p in m.plans]
    base = estimate(ssgd(sorted(it)), it, batch, bn, 0.15).seconds_per_progress
    dec = {k: v for k, v in m.decision.items() if k != "staleness_penalty"}
    rows = np.zeros((len(m.plans), len(old_features)))
    nd = len(dec)
    rows[:, :nd] = [dec[f] for f in old_features[:nd]]
    for i, (p, e) in enumerate(zip(m.plans, heur)):
        fam = L.plan_family(p)
        if fam: rows[i, nd + L.FAMILIES.index(fam)] = 1
        rows[i, nd + len(L.FAMILIES)] = L.plan_fraction(p)
        rows[i, nd + len(L.FAMILIES) + 1] = math.log(e / base)
    inrange = all(lo <= dec[f] <= hi for f, (lo, hi) in old_ranges.items())
    return rows, heur, inrange
out = {"heuristic": [], "learned_new": [], "learned_old": [], "heuristic_at_0.15": []}
for s, m in zip(test_sc, measured):
    best = m.measured_s.min()
    out["heuristic"].append(m.measured_s[int(np.argmin(m.heuristic_s))] / best - 1)
    out["learned_new"].append(m.measured_s[int(np.argmin(new.predict(m.rows)))] / best - 1)
    rows, heur, inrange = old_rows(s, m)
    pick = int(np.argmin(old.predict(rows))) if inrange else int(np.argmin(heur))
    out["learned_old"].append(m.measured_s[pick] / best - 1)
    out["heuristic_at_0.15"].append(m.measured_s[int(np.argmin(heur))] / best - 1)
for k, v in out.items():
    v = np.asarray(v)
    print(f"{k:20s} mean {v.mean():.2%} median {np.median(v):.2%} p90 {np.quantile(v,0.9):.2%} max {v.max():.1%} over5% {(v>0.05).mean():.1%}")
