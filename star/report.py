"""`star report RUN_DIR [RUN_DIR ...]`: a picture and a page of a run, or several runs' curves overlaid.

One run: RUN_DIR/report.png — a heatmap of each worker's own seconds per iteration (compute +
push, i.e. without waiting on others) over time, with the decisions drawn on it (straggler
flagged: red bar; AMP on: blue bar; batch size changes: numbers; plan switches: dashed lines
with the mode), and the metric curve below on the same time axis — and RUN_DIR/report.md
(the result, the straggler summary, the decisions). Several runs: OUT/report.png with their
metric curves overlaid and OUT/report.md with one row per run.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from star.errors import ConfigError
from star.events import read_events
from star.observe import ITERATIONS_FILE


@dataclass
class Run:
    path: Path
    result: dict
    curve: list[tuple[float, int, float]]  # (time_s, version, metric)
    iterations: list[dict]
    events: list[dict]

    @property
    def label(self) -> str:
        return f"{self.path.name} ({self.result.get('mode', '?')})"


def load_run(path: str | Path) -> Run:
    """A finished run's directory; a missing result.json is an error naming the run."""
    path = Path(path)
    result_path = path / "result.json"
    if not result_path.is_file():
        raise ConfigError("run_dir", str(path), "no result.json there: not a finished star launch output directory")
    name = "result.json"
    try:  # a damaged file is the user's to know about by name, not a traceback
        result = json.loads(result_path.read_text())
        curve = []
        if (path / (name := "curve.csv")).is_file():
            with open(path / name) as handle:
                curve = [(float(r["time_s"]), int(r["version"]), float(r["metric"])) for r in csv.DictReader(handle)]
        iterations = []
        if (path / (name := ITERATIONS_FILE)).is_file():
            with open(path / name) as handle:
                iterations = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError("run_dir", str(path), f"{name} cannot be read: {type(exc).__name__}: {exc}") from None
    events = read_events(path / "events.jsonl", skip_damaged=True) if (path / "events.jsonl").is_file() else []
    return Run(path, result, curve, iterations, events)


def heatmap(iterations: list[dict], bins: int = 240) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(grid[worker_row, time_bin], bin edges in seconds, workers in row order). A cell holds the own
    seconds (compute + push: waiting is not the worker's) of the iteration the worker was in at the
    bin's middle — the iteration reported next, which ran from its report time minus its whole
    duration; NaN before the worker's first iteration and after its last report."""
    workers = sorted({int(r["worker"]) for r in iterations})
    if not iterations:
        return np.full((0, bins), np.nan), np.linspace(0, 1, bins + 1), workers
    start = min(r["t"] - (r["compute_s"] + r["push_s"] + r.get("pull_s", 0.0)) for r in iterations)
    end = max(r["t"] for r in iterations)
    edges = np.linspace(max(0.0, start), max(end, start + 1e-3), bins + 1)
    middles = (edges[:-1] + edges[1:]) / 2
    grid = np.full((len(workers), bins), np.nan)
    for i, worker in enumerate(workers):
        mine = sorted((r for r in iterations if int(r["worker"]) == worker), key=lambda r: r["t"])
        ends = np.array([r["t"] for r in mine])
        own = np.array([r["compute_s"] + r["push_s"] for r in mine])
        first = mine[0]["t"] - (mine[0]["compute_s"] + mine[0]["push_s"] + mine[0].get("pull_s", 0.0))
        index = np.searchsorted(ends, middles, side="left")
        inside = (index < len(mine)) & (middles >= first)
        grid[i, inside] = own[index[inside]]
    return grid, edges, workers


def intervals(events: list[dict], on: str, off: str, end_t: float, key=None) -> dict[int, list[tuple[float, float]]]:
    """Per worker, the (start, end) spans between an `on` and the next `off` event (key filters `on`/`off`)."""
    spans: dict[int, list[tuple[float, float]]] = {}
    open_at: dict[int, float] = {}
    for e in events:
        kind, worker = e.get("kind"), e.get("worker")
        if worker is None:
            continue
        is_on = kind == on and (key is None or key(e))
        is_off = kind == off and (on != off or key is None or not key(e))
        if is_on and worker not in open_at:
            open_at[worker] = e["t"]
        elif is_off and worker in open_at:
            spans.setdefault(worker, []).append((open_at.pop(worker), e["t"]))
    for worker, start in open_at.items():
        spans.setdefault(worker, []).append((start, end_t))
    return spans


def _time_offset(run: Run) -> float:
    """Events and iterations are stamped from the coordinator's start; the curve from the first update.
    The `training_started` event puts the curve on the same axis."""
    event = next((e for e in run.events if e.get("kind") == "training_started"), None)
    if event is None:  # no such event (a DDP run): the first evaluation at the events' origin
        return -run.curve[0][0] if run.curve else 0.0
    if "since_first_update_s" in event:  # the curve time of the evaluation that emitted it
        return event["t"] - event["since_first_update_s"]
    return event["t"] - run.curve[0][0] if run.curve else event["t"]  # logs written before 6 Dec


def plot_run(run: Run, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid, edges, workers = heatmap(run.iterations)
    begin_t, end_t = float(edges[0]), float(edges[-1])
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(11, 3.2 + 0.45 * max(len(workers), 1)),
                                      gridspec_kw={"height_ratios": [max(len(workers), 2), 3]}, layout="constrained")
    if len(workers):
        image = top.imshow(grid * 1e3, aspect="auto", origin="lower", cmap="viridis", interpolation="nearest",
                           extent=(begin_t, end_t, -0.5, len(workers) - 0.5))
        fig.colorbar(image, ax=[top, bottom], pad=0.01, shrink=0.9, label="own ms / iteration (compute + push)")
    rows = {w: i for i, w in enumerate(workers)}
    for worker, spans in intervals(run.events, "straggler_detected", "straggler_recovered", end_t).items():
        for start, stop in spans:
            if worker in rows:
                top.plot([start, stop], [rows[worker] + 0.3] * 2, color="red", linewidth=4, solid_capstyle="butt")
    for worker, spans in intervals(run.events, "amp", "amp", end_t, key=lambda e: bool(e.get("amp"))).items():
        for start, stop in spans:
            if worker in rows:
                top.plot([start, stop], [rows[worker] - 0.3] * 2, color="deepskyblue", linewidth=4, solid_capstyle="butt")
    for e in run.events:
        if e.get("kind") == "batch_sizes":
            for key, size in (e.get("sizes") or {}).items():
                if int(key) in rows:
                    top.text(e["t"], rows[int(key)], str(size), color="white", fontsize=7, ha="center", va="center",
                             bbox={"boxstyle": "round,pad=0.1", "fc": "black", "alpha": 0.5, "lw": 0})
    offset = _time_offset(run)
    for ax in (top, bottom):
        for e in run.events[1:]:
            if e.get("kind") == "plan" and e["t"] <= end_t:
                ax.axvline(e["t"], color="black", linestyle="--", linewidth=1)
                if ax is top:
                    ax.text(e["t"], len(workers) - 0.45, f" {e.get('mode')}", fontsize=8, va="bottom")
    top.set_yticks(range(len(workers)), [f"worker {w}" for w in workers])
    top.set_title(f"{run.path.name}: {run.result.get('task')} / {run.result.get('mode')}  —  "
                  "red bar: flagged slow, blue bar: AMP on, numbers: batch size, dashed: plan switch", fontsize=9)
    if run.curve:
        times = [t + offset for t, _, _ in run.curve]
        bottom.plot(times, [m for _, _, m in run.curve], color="tab:green")
    if run.result.get("target") is not None:
        bottom.axhline(run.result["target"], color="grey", linestyle=":", label=f"target {run.result['target']}")
        bottom.legend(loc="lower right", fontsize=8)
    bottom.set_ylabel(run.result.get("metric", "metric"))
    bottom.set_xlabel("seconds since the coordinator started")
    bottom.set_xlim(begin_t, max(end_t, max((t + offset for t, _, _ in run.curve), default=0.0)))
    bottom.grid(alpha=0.3)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def plot_overlay(runs: list[Run], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for run in runs:
        ax.plot([t for t, _, _ in run.curve], [m for _, _, m in run.curve], label=run.label)
    targets = {r.result.get("target") for r in runs} - {None}
    for target in targets:
        ax.axhline(target, color="grey", linestyle=":")
    ax.set_xlabel("training seconds (from the first update)")
    ax.set_ylabel(runs[0].result.get("metric", "metric"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def _fmt(value) -> str:
    return "—" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value))


def run_markdown(run: Run) -> str:
    r = run.result
    lines = [f"# {run.path.name}", "", "![report](report.png)", "",
             "| task | mode | workers | ps | reached | TTA s | final metric | updates | train s |",
             "|---|---|---|---|---|---|---|---|---|",
             "| " + " | ".join(_fmt(r.get(k)) for k in ("task", "mode", "workers", "ps", "reached", "tta_s", "final_metric",
                                                          "updates", "train_s")) + " |", ""]
    summary = r.get("straggler_summary") or {}
    if summary:
        lines += ["## Stragglers", "", "Others waited: seconds other workers' gradients waited at the PSs for rounds this "
                  "worker's gradient closed (the PSs' clocks). Own wait: its pulls' blocked time (its own clock).", "",
                  "| worker | flagged slow s | others waited on it s | own wait s | AMP decisions | batch decisions |",
                  "|---|---|---|---|---|---|"]
        for worker, s in summary.items():
            amp = ", ".join(f"{'on' if d['amp'] else 'off'} at {d['t']:.1f}s" for d in s["amp_decisions"]) or "—"
            batch = ", ".join(f"{d['batch_size']} at {d['t']:.1f}s" for d in s["batch_decisions"]) or "—"
            lines.append(f"| {worker} | {s['flagged_slow_s']:.1f} | {s['others_waited_s']:.1f} | {s['waited_s']:.1f} | {amp} | {batch} |")
        lines.append("")
    decisions = [e for e in run.events if e.get("kind") in ("plan", "straggler_detected", "straggler_recovered", "amp",
                                                             "batch_sizes", "worker_lost", "ps_moved")]
    if decisions:
        lines += ["## Decisions", ""]
        for e in decisions:
            detail = ", ".join(f"{k}={v}" for k, v in e.items() if k not in ("t", "kind"))
            lines.append(f"- {e['t']:.1f} s `{e['kind']}` {detail}")
    return "\n".join(lines) + "\n"


def overlay_markdown(runs: list[Run]) -> str:
    lines = ["# Runs compared", "", "![curves](report.png)", "",
             "| run | mode | reached | TTA s | final metric | updates | detections | plan switches | AMP toggles |",
             "|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        r = run.result
        lines.append(f"| {run.path} | " + " | ".join(_fmt(r.get(k)) for k in (
            "mode", "reached", "tta_s", "final_metric", "updates", "straggler_detections", "plan_switches", "amp_toggles")) + " |")
    return "\n".join(lines) + "\n"


def write_report(run_dirs: list[str | Path], out: str | Path | None = None) -> Path:
    """Write report.png and report.md; returns the PNG's path. One run: into its directory (or `out`);
    several: into `out` (default: the first run's parent directory)."""
    if not run_dirs:
        raise ConfigError("run_dir", run_dirs, "give at least one run directory")
    runs = [load_run(p) for p in run_dirs]
    target = Path(out) if out else (runs[0].path if len(runs) == 1 else runs[0].path.parent)
    target.mkdir(parents=True, exist_ok=True)
    png = target / "report.png"
    if len(runs) == 1:
        plot_run(runs[0], png)
        (target / "report.md").write_text(run_markdown(runs[0]))
    else:
        plot_overlay(runs, png)
        (target / "report.md").write_text(overlay_markdown(runs))
    return png
