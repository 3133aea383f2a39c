"""Simulator vs real runs: does the simulator rank strategies as reality does, and how far off are its TTAs?

Pure functions over per-(trace, strategy) comparison rows {trace, strategy, real_tta_s, sim_tta_s,
error, error_vs_clean} (star.bench.compare_with_real makes them):

- `kendall_tau`: Kendall's tau-b of two score lists (ties in either list handled; a run that missed
  the target counts as +inf, so two misses tie);
- `agreement`: per trace, tau of the real vs simulated ranking of the strategies, and mean / max
  |TTA error|, raw and relative to clean (clean SSGD left out of both: it is the reference, not a
  strategy, and in a paired comparison the anchor the simulator's time scale is fitted to);
- `resolved_tau`: tau over the pairs of strategies whose real TTA ranges do not overlap
  (the order reality is sure of);
- `seed_agreement`: the mean tau between the real rankings of two seeds (reality's own
  reproducibility: with noisy real runs, the ceiling of any simulator's tau);
- `agreement_table`: the markdown of `agreement` with the goals (tau >= 0.7, error <= 15%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

CLEAN = "ssgd-clean"  # star.bench.CLEAN: the reference run, not ranked
TAU_GOAL = 0.7
ERROR_GOAL = 0.15


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def kendall_tau(a: Sequence[float | None], b: Sequence[float | None]) -> float | None:
    """Kendall's tau-b of paired scores (None = +inf). None when either side has no two distinct values."""
    if len(a) != len(b):
        raise ValueError(f"kendall_tau needs paired scores, got {len(a)} and {len(b)}")
    x = [math.inf if v is None else float(v) for v in a]
    y = [math.inf if v is None else float(v) for v in b]
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            sx = _sign(x[i] - x[j]) if x[i] != x[j] else 0
            sy = _sign(y[i] - y[j]) if y[i] != y[j] else 0
            if sx == 0 and sy == 0:
                continue
            if sx == 0:
                ties_x += 1
            elif sy == 0:
                ties_y += 1
            elif sx == sy:
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return None if denominator == 0 else (concordant - discordant) / denominator


def resolved_tau(real_lo: Sequence[float | None], real_hi: Sequence[float | None], sim: Sequence[float | None]) -> tuple[float | None, int]:
    """Kendall tau over the pairs reality tells apart: those whose real TTA ranges (lo..hi over seeds;
    None = missed = +inf) do not overlap. A tie in the simulation counts 0. Returns (tau, pairs)."""
    lo = [math.inf if v is None else float(v) for v in real_lo]
    hi = [math.inf if v is None else float(v) for v in real_hi]
    y = [math.inf if v is None else float(v) for v in sim]
    score = pairs = 0
    for i in range(len(lo)):
        for j in range(i + 1, len(lo)):
            if hi[i] < lo[j]:
                order = 1  # i really faster
            elif hi[j] < lo[i]:
                order = -1
            else:
                continue
            pairs += 1
            score += order * _sign(y[j] - y[i]) if y[i] != y[j] else 0
    return (score / pairs if pairs else None), pairs


def _mean_max(values: list[float]) -> tuple[float | None, float | None]:
    return (sum(values) / len(values), max(values)) if values else (None, None)


def agreement(compared: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per trace (in first-seen order): strategies ranked, Kendall tau, mean/max |error| raw and vs clean."""
    out = []
    for trace in dict.fromkeys(c["trace"] for c in compared):
        rows = [c for c in compared if c["trace"] == trace]
        ranked = [c for c in rows if c["strategy"] != CLEAN]
        tau = kendall_tau([c["real_tta_s"] for c in ranked], [c["sim_tta_s"] for c in ranked])
        resolved, pairs = (None, 0)
        if all("real_lo_s" in c for c in ranked):
            resolved, pairs = resolved_tau([c["real_lo_s"] for c in ranked], [c["real_hi_s"] for c in ranked],
                                           [c["sim_tta_s"] for c in ranked])
        raw = [abs(c["error"]) for c in ranked if c["error"] is not None]  # clean SSGD: the reference (a paired run's anchor)
        rel = [abs(c["error_vs_clean"]) for c in ranked if c["error_vs_clean"] is not None]
        (mean_raw, max_raw), (mean_rel, max_rel) = _mean_max(raw), _mean_max(rel)
        order = lambda key: " < ".join(c["strategy"] for c in sorted(ranked, key=lambda c: math.inf if c[key] is None else c[key]))  # noqa: E731
        out.append({"trace": trace, "strategies": len(ranked), "kendall_tau": tau, "resolved_tau": resolved, "resolved_pairs": pairs, "mean_error": mean_raw,
                    "max_error": max_raw, "mean_error_vs_clean": mean_rel, "max_error_vs_clean": max_rel,
                    "real_order": order("real_tta_s"), "sim_order": order("sim_tta_s")})
    return out


def seed_agreement(per_seed: dict[int, dict[str, float | None]]) -> float | None:
    """Mean Kendall tau between the real rankings of every two seeds (strategies both ran): how well
    reality agrees with itself, the most a simulator without the runs' noise can be expected to reach."""
    taus = []
    seeds = sorted(per_seed)
    for i, a in enumerate(seeds):
        for b in seeds[i + 1:]:
            both = [s for s in per_seed[a] if s in per_seed[b]]
            tau = kendall_tau([per_seed[a][s] for s in both], [per_seed[b][s] for s in both])
            if tau is not None:
                taus.append(tau)
    return sum(taus) / len(taus) if taus else None


def _fmt(value: float | None, pct: bool = False) -> str:
    if value is None:
        return ""
    return f"{value:.1%}" if pct else f"{value:.2f}"


def agreement_table(rows: Sequence[dict[str, Any]], tau_goal: float = TAU_GOAL, error_goal: float = ERROR_GOAL) -> str:
    """Markdown: per trace tau and errors, each with its goal verdict; then the real and simulated orders."""
    head = ("trace", "strategies", "Kendall tau", f"tau >= {tau_goal}", "real seed-vs-seed tau",
            "tau on pairs real runs tell apart", "mean abs TTA error", f"<= {error_goal:.0%}",
            "mean abs error of TTA/clean", f"<= {error_goal:.0%}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    verdict = lambda ok, value: "" if value is None else ("yes" if ok else "**NO**")  # noqa: E731
    for r in rows:
        tau, raw, rel = r["kendall_tau"], r["mean_error"], r["mean_error_vs_clean"]
        cells = (r["trace"], str(r["strategies"]), _fmt(tau), verdict(tau is not None and tau >= tau_goal, tau),
                 _fmt(r.get("seed_tau")),
                 f"{_fmt(r['resolved_tau'])} ({r['resolved_pairs']} pairs)" if r.get("resolved_pairs") else "",
                 f"{_fmt(raw, True)} (max {_fmt(r['max_error'], True)})" if raw is not None else "",
                 verdict(raw is not None and raw <= error_goal, raw),
                 f"{_fmt(rel, True)} (max {_fmt(r['max_error_vs_clean'], True)})" if rel is not None else "",
                 verdict(rel is not None and rel <= error_goal, rel))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| trace | real order (fastest first) | simulated order |", "|---|---|---|"]
    lines += [f"| {r['trace']} | {r['real_order']} | {r['sim_order']} |" for r in rows]
    return "\n".join(lines) + "\n"
