"""Simulator vs real runs: does the simulator rank strategies as reality does, and how far off are its TTAs?

Pure functions over per-(trace, strategy) comparison rows {trace, strategy, real_tta_s, sim_tta_s,
error, error_vs_clean}, made by `compare_with_real` from a real table (`read_real_summary`):

- `kendall_tau`: Kendall's tau-b of two score lists (ties in either list handled; a run that missed
  the target counts as +inf, so two misses tie);
- `agreement`: per trace, tau of the real vs simulated ranking of the strategies, and mean / max
  |TTA error|, raw and relative to clean (clean SSGD left out of both: it is the reference, not a
  strategy, and in a paired comparison the anchor the simulator's time scale is fitted to);
- TTA's two factors beside it (`compare_with_real`, `agreement`): updates to target and seconds per update,
  with tau and the mean |error| on seconds per update alone. The simulator models what a strategy costs per
  update; which update reaches the target moves by several per cent whenever a strategy changes any round's
  gradient (one cut round: `python -m benchmarks.updates_cv --cut-round`), a draw no cost model can predict;
- `resolved_tau`: tau over the pairs of strategies whose real TTA ranges do not overlap
  (the order reality is sure of);
- `seed_agreement`: the mean tau between the real rankings of two seeds (reality's own
  reproducibility: with noisy real runs, the ceiling of any simulator's tau);
- `agreement_table`: the markdown of `agreement` with the goals (tau >= 0.7, error <= 15%);
- `sim_vs_real_table`: the per-run markdown.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CLEAN = "ssgd-clean"  # the reference run (clean SSGD), not ranked
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
        spu = [c for c in ranked if c.get("real_s_per_update") and c.get("sim_s_per_update")]
        spu_tau = kendall_tau([c["real_s_per_update"] for c in spu], [c["sim_s_per_update"] for c in spu])
        spu_error, _ = _mean_max([abs(c["s_per_update_error"]) for c in spu])
        out.append({"trace": trace, "strategies": len(ranked), "kendall_tau": tau, "resolved_tau": resolved, "resolved_pairs": pairs,
                    "s_per_update_tau": spu_tau, "mean_s_per_update_error": spu_error, "mean_error": mean_raw,
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
            "mean abs error of TTA/clean", f"<= {error_goal:.0%}", "tau on s/update", "mean abs s/update error")
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
                 verdict(rel is not None and rel <= error_goal, rel),
                 _fmt(r.get("s_per_update_tau")), _fmt(r.get("mean_s_per_update_error"), True))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| trace | real order (fastest first) | simulated order |", "|---|---|---|"]
    lines += [f"| {r['trace']} | {r['real_order']} | {r['sim_order']} |" for r in rows]
    return "\n".join(lines) + "\n"


def markdown_cell(value: Any) -> str:
    """A table cell: blank for None, 3 decimals under 10, 2 above."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.2f}"
    return str(value)



# ---- reading real tables and pairing them with simulated rows ---------------------------------
REAL_RUN_NAMES = {"clean": CLEAN, "auto": "auto-heuristic"}  # benchmarks/strategies.py run names


def read_real_summary(path: Path) -> list[dict[str, Any]]:
    """Rows {trace, strategy, tta_s, reached} of a real star bench summary.csv, or of a
    benchmarks/strategies.py summary.csv (trace "*": it has one trace; 'auto-clean' is left out)."""
    with open(path, newline="") as handle:
        raw = list(csv.DictReader(handle))
    if not raw:
        raise ValueError(f"{path}: no rows")
    rows = []
    for r in raw:
        if "run" in r:  # benchmarks/strategies.py
            if r["run"] == "auto-clean":
                continue
            strategy, trace = REAL_RUN_NAMES.get(r["run"], r["run"]), "*"
            reached = r["reached"] in ("True", "true", "1") or (r["reached"].count("/") == 1 and r["reached"].split("/")[0] != "0")
        else:
            strategy, trace, reached = r["strategy"], r["trace"], r["reached"] in ("True", "true", "1")
        tta = float(r["tta_s"]) if r.get("tta_s") not in (None, "") else None
        factors = {k: float(r[k]) if r.get(k) not in (None, "") else None for k in ("updates_to_target", "s_per_update")}
        rows.append({"trace": trace, "strategy": strategy, "tta_s": tta, "reached": reached and tta is not None, **factors})
    return rows


def compare_with_real(sim_rows: Sequence[dict[str, Any]], real_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (trace, strategy) run in both: TTAs, raw error sim/real − 1, and the error of TTA / clean TTA.

    A real table with one trace ("*") is matched against every simulated trace."""
    real = {(r["trace"], r["strategy"]): r for r in real_rows}
    out = []
    for r in sim_rows:
        key = (r["trace"], r["strategy"]) if (r["trace"], r["strategy"]) in real else ("*", r["strategy"])
        if key not in real:
            continue
        rr = real[key]
        sim_clean = next((x["tta_s"] for x in sim_rows if x["trace"] == r["trace"] and x["strategy"] == CLEAN and x["reached"]), None)
        real_clean = real.get((key[0], CLEAN), {}).get("tta_s")
        s_t = r["tta_s"] if r["reached"] else None
        r_t = rr["tta_s"] if rr["reached"] else None
        raw = s_t / r_t - 1 if s_t and r_t else None
        s_rel = s_t / sim_clean if s_t and sim_clean else None
        r_rel = r_t / real_clean if r_t and real_clean else None
        rel = s_rel / r_rel - 1 if s_rel and r_rel else None
        s_spu, r_spu = r.get("s_per_update"), rr.get("s_per_update")
        out.append({"trace": r["trace"], "strategy": r["strategy"], "real_tta_s": r_t, "sim_tta_s": s_t, "error": raw,
                    "real_vs_clean": r_rel, "sim_vs_clean": s_rel, "error_vs_clean": rel,
                    "real_updates": rr.get("updates_to_target"), "sim_updates": r.get("updates_to_target"),
                    "real_s_per_update": r_spu, "sim_s_per_update": s_spu,
                    "s_per_update_error": s_spu / r_spu - 1 if s_spu and r_spu else None})
    return out


def _whole(value: float | None) -> float | int | None:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def sim_vs_real_table(compared: Sequence[dict[str, Any]], heading: str = "") -> str:
    """Per-run markdown of `compare_with_real`'s rows, under an optional `heading` line, with the mean errors."""
    head = ("trace", "strategy", "real_tta_s", "sim_tta_s", "error", "real/clean", "sim/clean", "error of TTA/clean",
            "real updates", "sim updates", "real s/update", "sim s/update", "s/update error")
    lines = [heading + "\n"] if heading else []
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    pct = lambda v: None if v is None else f"{v:+.1%}"  # noqa: E731
    for c in compared:
        cells = (c["trace"], c["strategy"], c["real_tta_s"], c["sim_tta_s"], pct(c["error"]), c["real_vs_clean"],
                 c["sim_vs_clean"], pct(c["error_vs_clean"]) if c["strategy"] != CLEAN else None,
                 _whole(c.get("real_updates")), _whole(c.get("sim_updates")), c.get("real_s_per_update"), c.get("sim_s_per_update"),
                 pct(c.get("s_per_update_error")))
        lines.append("| " + " | ".join(markdown_cell(v) for v in cells) + " |")
    raw = [abs(c["error"]) for c in compared if c["error"] is not None]
    rel = [abs(c["error_vs_clean"]) for c in compared if c["error_vs_clean"] is not None and c["strategy"] != CLEAN]
    if raw:
        lines.append(f"\nMean |error|: {sum(raw) / len(raw):.1%} (max {max(raw):.1%}) over {len(raw)} runs; "
                     + (f"of TTA/clean: {sum(rel) / len(rel):.1%} (max {max(rel):.1%}) over {len(rel)} runs." if rel else ""))
    return "\n".join(lines) + "\n"
