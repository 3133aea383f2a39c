"""`star bench`: every strategy on every trace, simulated or real, in one invocation.

    star bench --traces ../shared/traces/alibaba-pai-2020/job_1_norm.csv synthetic \\
        --trace-workers 3,4,5,6 --trace-stretch 0.025 --sim --workers 4 --out runs/bench

Why one runner: the goals (auto near the best strategy in hindsight, mitigation vs SSGD)
are statements about a whole table, so the table, the mitigation ratio
(T_ssgd_straggled − T_strategy) / (T_ssgd_straggled − T_clean), the curves and the TTA
chart all come from the same runs. T_clean is SSGD without a trace: one clean run per
invocation serves every trace (it replays none), and appears under each trace as
`ssgd-clean`.

Traces: files (Alibaba PAI or iteration,worker,factor CSV; `--trace-workers` and
`--trace-stretch` apply to them), `synthetic` (the five seeded scenarios of
star.sim.generators) or `synthetic:NAME` (those five, or a held-out shape: flapping, ramp, jitter,
bursts, spikes). With `--sim` a file trace with fewer workers
than `--workers` is widened with phase-shifted copies (generators.stretch_workers).
Every trace actually replayed is written to DIR/traces/ as a CSV a real run can replay.

Writes DIR/summary.csv (trace, strategy, workers, tta_s, reached, mitigation, and TTA's two factors,
updates_to_target and s_per_update),
DIR/summary.md (best per trace in bold), DIR/goals.md (auto vs best and vs SSGD per
trace), DIR/curves_<trace>.png, DIR/tta.png, and each run's files under DIR/runs/.
A progress bar (one line per run when stderr is not a terminal) shows runs done and the ETA.

Simulator error: `--sim --real FILE` compares the simulated TTAs with real ones for the
same traces and strategies and writes DIR/sim_vs_real.md. FILE is the summary.csv of a
real `star bench`, or of `python -m benchmarks.strategies` (one trace; its `clean` and
`auto` runs stand for ssgd-clean and auto-heuristic). The error is given raw (sim / real
− 1, which carries the calibration's absolute time scale) and relative to each side's
clean SSGD (which is what the strategy comparisons depend on).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from star.sim.compare import CLEAN, compare_with_real, markdown_cell, read_real_summary, sim_vs_real_table

STRATEGIES = ("ssgd", "asgd", "kofn", "grouped", "exclude", "amp", "batch", "auto-heuristic", "auto-learned")
SUMMARY_COLUMNS = ("trace", "strategy", "workers", "tta_s", "reached", "mitigation", "updates_to_target", "s_per_update")


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark invocation."""

    traces: tuple[str, ...]  # trace files, "synthetic" (all five scenarios) or "synthetic:NAME"
    out: str  # output directory
    strategies: tuple[str, ...] = STRATEGIES  # strategies run on every trace
    sim: bool = False  # simulate (star.sim) instead of real local runs (star launch)
    workers: int = 4  # workers per run
    trace_workers: str | None = None  # file traces: trace workers replayed by run workers 0..N-1, e.g. "3,4,5,6"
    trace_stretch: float = 1.0  # file traces: multiplies trace iteration numbers
    synthetic_iterations: int = 100  # length of generated synthetic traces, in iterations
    seed: int = 0  # run seed, synthetic traces' seed
    task: str = "digits"  # task (real runs) and the calibration the simulator uses
    calibration: str | None = None  # simulator calibration TOML (None: the shipped one for `task`)
    ps: int = 2  # parameter servers (real runs)
    max_time_s: float | None = None  # per-run limit (None: 150 s real, 3000 s simulated)
    real: str | None = None  # --sim: a real run's summary.csv to compare the simulated TTAs with (sim_vs_real.md)

    def __post_init__(self) -> None:
        """Every value a run would refuse is refused here, before the first run (real runs take minutes each)."""
        from star.config import ConfigError, check_worker_count

        check_worker_count(self.workers)
        for strategy in self.strategies:
            strategy_settings(strategy)
        if not self.ps >= 1:
            raise ConfigError("ps", self.ps, "must be >= 1")
        if not (math.isfinite(self.trace_stretch) and self.trace_stretch > 0):
            raise ConfigError("trace_stretch", self.trace_stretch, "must be finite and > 0")
        if not self.synthetic_iterations >= 1:
            raise ConfigError("synthetic_iterations", self.synthetic_iterations, "must be >= 1")
        if self.max_time_s is not None and not (math.isfinite(self.max_time_s) and self.max_time_s > 0):
            raise ConfigError("max_time_s", self.max_time_s, "must be finite and > 0")


def strategy_settings(strategy: str) -> tuple[str, dict[str, Any]]:
    """The `--mode` and control fields a bench strategy name stands for."""
    if strategy in ("auto", "auto-heuristic"):
        return "auto", {"selector_kind": "heuristic"}
    if strategy == "auto-learned":
        return "auto", {"selector_kind": "learned"}
    from star.policy.controller import STRATEGIES as MODES

    if strategy in MODES:
        return strategy, {}
    others = [m for m in MODES if m not in STRATEGIES]
    raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES + tuple(others))}"
                     + (" (the DDP baseline runs in `python -m benchmarks.strategies`, not here)" if strategy == "ddp" else ""))


def mitigation(t_clean: float | None, t_straggled: float | None, t: float | None) -> float | None:
    """(T_straggled − T) / (T_straggled − T_clean); None where undefined (a miss, or SSGD not slowed)."""
    if None in (t_clean, t_straggled, t) or t_straggled <= t_clean:
        return None
    return (t_straggled - t) / (t_straggled - t_clean)


# ---- tables (pure) ----------------------------------------------------------------------
def summary_rows(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of summary.csv from run results {trace, strategy, workers, tta_s, reached}, with mitigation."""
    by_trace: dict[str, dict[str, dict[str, Any]]] = {}
    for r in results:
        by_trace.setdefault(r["trace"], {})[r["strategy"]] = r
    rows = []
    for trace, runs in by_trace.items():
        tta = {s: (r["tta_s"] if r["reached"] else None) for s, r in runs.items()}
        for strategy, r in runs.items():
            m = None if strategy == CLEAN else mitigation(tta.get(CLEAN), tta.get("ssgd"), tta[strategy])
            rows.append({"trace": trace, "strategy": strategy, "workers": r["workers"],
                         "tta_s": None if r["tta_s"] is None else round(r["tta_s"], 3), "reached": bool(r["reached"]),
                         "mitigation": None if m is None else round(m, 3), **tta_factors(r)})
    return rows


def tta_factors(run: dict[str, Any]) -> dict[str, Any]:
    """TTA = updates to target x seconds per update: a real run's result says both; a simulated one stops at the
    target, so its updates are the updates to target. None where the target was not reached."""
    if not run.get("reached") or not run.get("tta_s"):
        return {"updates_to_target": None, "s_per_update": None}
    updates = run.get("updates_to_target") or run.get("updates")
    return {"updates_to_target": updates, "s_per_update": round(run["tta_s"] / updates, 4) if updates else None}


def best_per_trace(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Trace -> the strategy with the lowest TTA among those that reached the target (clean SSGD excluded)."""
    best: dict[str, tuple[float, str]] = {}
    for r in rows:
        if r["strategy"] == CLEAN or not r["reached"] or r["tta_s"] is None:
            continue
        if r["trace"] not in best or r["tta_s"] < best[r["trace"]][0]:
            best[r["trace"]] = (r["tta_s"], r["strategy"])
    return {t: s for t, (_, s) in best.items()}


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    best = best_per_trace(rows)
    lines = ["| " + " | ".join(SUMMARY_COLUMNS) + " |", "|" + "---|" * len(SUMMARY_COLUMNS)]
    for r in rows:
        cells = [markdown_cell(r[c]) for c in SUMMARY_COLUMNS]
        if best.get(r["trace"]) == r["strategy"]:
            cells = [f"**{c}**" if c else c for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


WITHIN_BEST, CUT_GOAL, DELAY_FOR_CUT = 0.05, 0.40, 0.50  # `star bench`'s goals: auto vs the best, and vs SSGD where it is slowed


def goals_table(rows: Sequence[dict[str, Any]], within: float = WITHIN_BEST, cut: float = CUT_GOAL,
                delay: float = DELAY_FOR_CUT) -> str:
    """Per trace and auto variant: auto / the best non-auto strategy in hindsight (goal ≤ 1+within) and the TTA
    cut vs SSGD (goal ≥ cut where SSGD's straggler delay exceeds `delay` of its clean TTA).

    `cut_ceiling` = 1 − T_clean / T_ssgd is the cut a strategy gets by removing the whole delay (reaching the
    clean TTA); a cut goal above it needs a strategy faster than clean SSGD, which no straggler mitigation is
    meant to be, so such rows say "above ceiling"."""
    tta = {(r["trace"], r["strategy"]): (r["tta_s"] if r["reached"] else None) for r in rows}
    best = best_per_trace([r for r in rows if not r["strategy"].startswith("auto")])  # the oracle's fixed choice
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    autos = [s for s in dict.fromkeys(r["strategy"] for r in rows) if s.startswith("auto")]
    head = ("trace", "auto", "auto_tta_s", "best", "best_tta_s", "auto/best", f"within {within:.0%}", "ssgd_tta_s",
            "clean_tta_s", "ssgd_delay", "auto_vs_ssgd", "cut_ceiling", f"cut >= {cut:.0%} needed", "met")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for trace in traces:
        t_ssgd, t_clean = tta.get((trace, "ssgd")), tta.get((trace, CLEAN))
        b = best.get(trace)
        t_best = tta.get((trace, b)) if b else None
        d = (t_ssgd - t_clean) / t_clean if t_ssgd and t_clean else None
        ceiling = 1 - t_clean / t_ssgd if t_ssgd and t_clean else None
        for auto in autos:
            t = tta.get((trace, auto))
            ratio = t / t_best if t and t_best else None
            vs = 1 - t / t_ssgd if t and t_ssgd else None
            needs_cut = d is not None and d > delay
            ok_best = ratio is not None and ratio <= 1 + within
            ok_cut = (not needs_cut) or (vs is not None and vs >= cut)
            needed = "no"
            if needs_cut:
                needed = "yes" if ceiling is not None and ceiling >= cut else "yes (above ceiling)"
            cells = (trace, auto, t, b, t_best, ratio, "yes" if ok_best else "NO", t_ssgd, t_clean,
                     None if d is None else f"{d:.1%}", None if vs is None else f"{vs:.1%}",
                     None if ceiling is None else f"{ceiling:.1%}", needed, "yes" if ok_best and ok_cut else "NO")
            lines.append("| " + " | ".join(markdown_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


GOALS_LEGEND = f"""\
- `auto/best`: auto's TTA over the best fixed strategy's on that trace, chosen in hindsight (goal: within {WITHIN_BEST:.0%}).
- `ssgd_delay`: how much the trace slows SSGD, (T_ssgd − T_clean) / T_clean; the cut goal applies above {DELAY_FOR_CUT:.0%}.
- `auto_vs_ssgd`: auto's cut of SSGD's TTA, 1 − T_auto / T_ssgd (goal: at least {CUT_GOAL:.0%} where it applies).
- `cut_ceiling`: 1 − T_clean / T_ssgd, the cut of a strategy that removes the whole delay and reaches clean SSGD's
  TTA. No mitigation is meant to beat clean SSGD, so a cut goal above this ceiling cannot be met ("above ceiling").
"""


def write_summary(out: Path, rows: Sequence[dict[str, Any]]) -> None:
    with open(out / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(SUMMARY_COLUMNS))
        writer.writeheader()
        writer.writerows({k: ("" if r[k] is None else r[k]) for k in SUMMARY_COLUMNS} for r in rows)
    (out / "summary.md").write_text(markdown_table(rows))
    (out / "goals.md").write_text(goals_table(rows) + "\n" + GOALS_LEGEND)


def plot(out: Path, results: Sequence[dict[str, Any]]) -> list[Path]:
    """curves_<trace>.png (metric vs time per strategy) and tta.png (TTA per strategy and trace)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    traces = list(dict.fromkeys(r["trace"] for r in results))
    strategies = list(dict.fromkeys(r["strategy"] for r in results))
    for trace in traces:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in results:
            if r["trace"] == trace and r["curve"]:
                t, _, m = zip(*r["curve"])
                ax.plot(t, m, label=r["strategy"], linestyle="--" if r["strategy"] == CLEAN else "-")
        ax.set(xlabel="time (s)", ylabel="metric", title=f"{trace}: metric vs time")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"curves_{trace}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    fig, ax = plt.subplots(figsize=(max(7, 1.2 * len(traces) * len(strategies) / 4), 4.5))
    width = 0.8 / max(1, len(strategies))
    tta = {(r["trace"], r["strategy"]): r["tta_s"] if r["reached"] else math.nan for r in results}
    for i, s in enumerate(strategies):
        ax.bar([j + i * width for j in range(len(traces))], [tta.get((t, s), math.nan) for t in traces], width, label=s)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(traces))], traces, rotation=20, fontsize=8)
    finite = [v for v in tta.values() if not math.isnan(v) and v > 0]
    if finite and max(finite) > 10 * min(finite):
        ax.set_yscale("log")  # one slow strategy (ASGD at scale) would flatten the rest
    ax.set(ylabel="time to accuracy (s)", title="TTA per strategy (missing bar: target not reached)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    path = out / "tta.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    written.append(path)
    return written


# ---- traces -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceSpec:
    name: str  # short name in the tables and file names
    path: Path  # CSV replayed (written under DIR/traces/ when generated or widened)
    trace_workers: str | None  # as star launch --trace-workers
    stretch: float  # as star launch --trace-stretch


def prepare_traces(config: BenchConfig, out: Path) -> list[TraceSpec]:
    """Resolve trace arguments to files: generate synthetic ones, widen small file traces for --sim."""
    from star.sim import generators
    from star.traces import load_trace, write_simple_csv

    folder = out / "traces"
    folder.mkdir(parents=True, exist_ok=True)
    specs: list[TraceSpec] = []
    names: set[str] = set()
    for item in config.traces:
        if item == "synthetic" or item.startswith("synthetic:"):
            scenarios = generators.SCENARIOS if item == "synthetic" else (item.split(":", 1)[1],)
            for scenario in scenarios:
                trace = generators.generate(scenario, config.workers, config.synthetic_iterations, config.seed)
                path = write_simple_csv(trace, folder / f"{scenario}.csv")
                specs.append(TraceSpec(_unique(scenario, names), path, None, 1.0))
            continue
        path = Path(item)
        name = _unique(path.stem.removesuffix("_norm"), names)
        trace_workers = config.trace_workers
        if config.sim and trace_workers is None:
            trace = load_trace(path)
            if len(trace.workers) < config.workers:
                path = write_simple_csv(generators.stretch_workers(trace, config.workers, config.seed), folder / f"{name}_x{config.workers}.csv")
        specs.append(TraceSpec(name, path, trace_workers, config.trace_stretch))
    return specs


def _unique(name: str, taken: set[str]) -> str:
    candidate, i = name, 2
    while candidate in taken:
        candidate, i = f"{name}-{i}", i + 1
    taken.add(candidate)
    return candidate


# ---- runs -----------------------------------------------------------------------------------
def run_sim(config: BenchConfig, strategy: str, trace: TraceSpec | None, out: Path,
            overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """One simulated run; `overrides` (e.g. {"cost": {...}}) go over the calibration and the bench's settings."""
    from star.config import merge
    from star.sim import sim_config
    from star.sim.run import run_and_write
    from star.task_calibration import shipped_calibration

    mode, control = strategy_settings("ssgd" if strategy == CLEAN else strategy)
    calibration = config.calibration or shipped_calibration(config.task)
    data: dict[str, Any] = {"workers": config.workers, "seed": config.seed, "out": str(out), "plan": {"mode": mode},
                            "control": control, "max_time_s": config.max_time_s or 3000.0}
    if trace is not None:
        data["trace"] = {"path": str(trace.path), "stretch": trace.stretch,
                         **({"workers": trace.trace_workers} if trace.trace_workers else {})}
    sim = run_and_write(sim_config(merge(data, overrides or {}), calibration=calibration))
    return {**sim.result, "curve": [(t, v, m) for t, v, m in sim.curve]}


def run_real(config: BenchConfig, strategy: str, trace: TraceSpec | None, out: Path) -> dict[str, Any]:
    """A real local job (star.launch.launch), as benchmarks/strategies.py runs them."""
    from star.config import JobConfig, from_dict
    from star.launch import launch_or_stop
    from star.sim.calibrate import read_run

    mode, control = strategy_settings("ssgd" if strategy == CLEAN else strategy)
    data: dict[str, Any] = {"task": config.task, "workers": config.workers, "ps": config.ps, "out": str(out),
                            "seed": config.seed, "max_time_s": config.max_time_s or 150.0, "plan": {"mode": mode},
                            "control": control}
    if trace is not None:
        data["trace"] = {"path": str(trace.path), "stretch": trace.stretch,
                         **({"workers": trace.trace_workers} if trace.trace_workers else {})}
    result = launch_or_stop(from_dict(JobConfig, data))
    try:
        _, curve, _ = read_run(out)
    except (OSError, ValueError, KeyError):
        curve = []
    return {**result, "curve": curve}


def progress_bar(done: int, total: int, width: int = 24) -> str:
    """'[#########---------------] 3/8' (pure, for the log lines)."""
    filled = round(width * done / total) if total else width
    return f"[{'#' * filled}{'-' * (width - filled)}] {done}/{total}"


class Progress:
    """Progress of a bench: redraws one line on a terminal, else one line per run (logs stay readable)."""

    def __init__(self, total: int, stream=None):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()

    def __call__(self, done: int, what: str) -> None:
        elapsed = time.monotonic() - self.start
        eta = elapsed / done * (self.total - done) if done else 0.0
        line = f"{progress_bar(done, self.total)} {what} (elapsed {elapsed:.0f} s, eta {eta:.0f} s)"
        if self.tty:
            end = "\n" if done == self.total else ""
            self.stream.write("\r\033[K" + line + end)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _with_clean(clean: dict[str, Any], results: list[dict[str, Any]], traces: Sequence[TraceSpec]) -> list[dict[str, Any]]:
    """The runs trace by trace, each trace's rows led by the one clean run (it replays no trace)."""
    ordered = []
    for trace in traces:
        ordered.append({**clean, "trace": trace.name})
        ordered += [r for r in results if r["trace"] == trace.name]
    return ordered


def run_bench(config: BenchConfig, runner: Callable[..., dict[str, Any]] | None = None,
              log: Callable[[int, str], None] | None = None) -> list[dict[str, Any]]:
    """Clean SSGD once, then every strategy on every trace; writes every output; returns the summary rows."""
    for s in config.strategies:
        strategy_settings(s)  # fail before any run on a bad name
    if config.real and not config.sim:
        raise ValueError("--real compares a simulation with real runs: it needs --sim")
    real_rows = read_real_summary(Path(config.real)) if config.real else None
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    runner = runner or (run_sim if config.sim else run_real)
    traces = prepare_traces(config, out)
    jobs: list[tuple[str, TraceSpec | None]] = [(CLEAN, None)] + [(s, t) for t in traces for s in config.strategies]
    results: list[dict[str, Any]] = []
    clean: dict[str, Any] | None = None
    log = log or Progress(len(jobs))
    for i, (strategy, trace) in enumerate(jobs, 1):
        where = "none" if trace is None else trace.name
        run_dir = out / "runs" / where / strategy
        try:
            r = runner(config, strategy, trace, run_dir)
        except KeyboardInterrupt:  # the runs that ended still get their tables
            if clean is not None and results:
                write_summary(out, summary_rows(_with_clean(clean, results, traces)))
            raise
        row = {"trace": where, "strategy": strategy, "workers": config.workers, "tta_s": r.get("tta_s"),
               "reached": bool(r.get("reached")), "curve": r.get("curve", []), "updates": r.get("updates"),
               "updates_to_target": r.get("updates_to_target")}
        if trace is None:
            clean = row
        else:
            results.append(row)
        log(i, f"{'no trace' if trace is None else where} {strategy}: reached={row['reached']} tta_s={row['tta_s']}")
    assert clean is not None
    ordered = _with_clean(clean, results, traces)
    rows = summary_rows(ordered)
    write_summary(out, rows)
    plot(out, ordered)
    (out / "bench.json").write_text(json.dumps({"config": {k: getattr(config, k) for k in config.__dataclass_fields__},
                                                "rows": rows}, indent=1, default=str))
    if real_rows is not None:
        compared = compare_with_real(rows, real_rows)
        heading = (f"Simulated ({config.workers} workers, calibration {config.calibration or config.task + ' (shipped)'}) "
                   f"vs real runs from `{config.real}`.")
        (out / "sim_vs_real.md").write_text(sim_vs_real_table(compared, heading))
    return rows


# ---- command line ---------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--traces", nargs="+", required=True, help="trace files, 'synthetic' (five scenarios) or 'synthetic:NAME' "
                   "(a scenario, or a held-out shape: flapping, ramp, jitter, bursts, spikes)")
    p.add_argument("--trace-workers", default=None, help="file traces: trace workers for run workers 0..N-1, e.g. 3,4,5,6")
    p.add_argument("--trace-stretch", type=float, default=1.0, help="file traces: multiplies trace iteration numbers")
    p.add_argument("--sim", action="store_true", help="simulate (star.sim, calibrated) instead of real local runs")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated: " + ", ".join(STRATEGIES))
    p.add_argument("--synthetic-iterations", type=int, default=100, help="length of generated synthetic traces")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--task", default="digits")
    p.add_argument("--calibration", default=None, help="--sim: calibration TOML (default: the shipped one for --task)")
    p.add_argument("--ps", type=int, default=2, help="real runs: parameter servers")
    p.add_argument("--max-time-s", type=float, default=None, help="per-run limit (default 150 real, 3000 simulated)")
    p.add_argument("--real", default=None, help="--sim: summary.csv of real runs (star bench, or benchmarks.strategies) "
                                                "to compare with: writes DIR/sim_vs_real.md")
    p.add_argument("--out", required=True)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        traces=tuple(args.traces), out=args.out, strategies=tuple(s.strip() for s in args.strategies.split(",") if s.strip()),
        sim=args.sim, workers=args.workers, trace_workers=args.trace_workers, trace_stretch=args.trace_stretch,
        synthetic_iterations=args.synthetic_iterations, seed=args.seed, task=args.task, calibration=args.calibration,
        ps=args.ps, max_time_s=args.max_time_s, real=args.real,
    )


def run_from_args(args: argparse.Namespace) -> int:
    from star.cli_checks import check_task, check_trace, check_trace_workers

    try:
        config = config_from_args(args)
        check_task("task", config.task)
        for path in config.traces:  # checked before any run starts
            if not path.startswith("synthetic"):
                check_trace_workers("trace_workers", check_trace("traces", path), config.trace_workers, config.workers)
        rows = run_bench(config)
    except ValueError as exc:
        print(f"star bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"star bench: interrupted; the runs that ended are under {args.out} (their table: summary.csv)", file=sys.stderr)
        return 130
    print(markdown_table(rows))
    print(f"wrote {config.out}/summary.csv, summary.md, goals.md, tta.png, curves_*.png"
          + (", sim_vs_real.md" if config.real else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
