"""The `star` command: a thin entry point that maps flags onto configs and calls one function."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from star.cli_args import add_config_args, add_job_style_args, config_from_args
from star.cli_names import JOB_COMMON, SIM_COMMON
from star.config import ConfigError, JobConfig, load_toml
from star.ddp_rules import DDP_MODE

JOB_USAGE = "%(prog)s [--config TOML] [options]"
JOB_DESCRIPTION = ("The common settings; --help-all lists every option, one per config field: the nested ones "
                   "spelled as their dotted TOML path (--control.detector.k). --config loads the same fields from TOML; "
                   "flags override it.")


def _job_args(parser: argparse.ArgumentParser, show_all: bool) -> None:
    parser.add_argument("--config", metavar="TOML", help="TOML file of JobConfig fields; flags override it")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    add_config_args(parser, JobConfig, JOB_COMMON, show_all)


def _job_parser(sub, name: str, help_text: str, handler) -> None:
    """`star launch` and `star node` take the same job: a TOML file, every JobConfig field as a flag."""
    p = sub.add_parser(name, help=help_text, usage=JOB_USAGE, description=JOB_DESCRIPTION, allow_abbrev=False)
    add_job_style_args(p, _job_args)
    p.set_defaults(handler=handler)


def _job_config(args: argparse.Namespace) -> tuple[JobConfig, object]:
    """The job a `star launch` / `star node` command line describes, and its progress printer."""
    from star.cli_args import given_flags
    from star.cli_checks import check_out_dir, check_task, check_trace, check_trace_workers
    from star.config import merge
    from star.ddp_rules import ddp_refusal
    from star.devices import check_device_available

    base = load_toml(args.config) if args.config else {}
    refusal = ddp_refusal(merge(base, given_flags(args, JobConfig)))  # an option given at its default value counts too
    if refusal is not None:
        raise ConfigError(*refusal)
    progress = None if args.quiet else (lambda line: print(line, flush=True))
    config = config_from_args(JobConfig, args, base)
    check_task("task", config.task)
    trace = check_trace("trace.path", config.trace.path)
    check_trace_workers("trace.workers", trace, config.trace.workers, config.workers)
    check_device_available("device", config.device)
    check_out_dir("out", config.out)
    return config, progress


def _run_launch(args: argparse.Namespace) -> int:
    from star.cli_checks import check_out_free
    from star.launch import launch
    from star.processes import InterruptedBeforeResult, LaunchError

    config, progress = _job_config(args)
    check_out_free("out", config.out, config.resume, config.overwrite, config.faults.checkpoint_dir)
    ps = "0 (DDP: all-reduce among the workers)" if config.plan.mode == DDP_MODE else config.ps
    print(f"star launch: task={config.task} workers={config.workers} ps={ps} mode={config.plan.mode} out={config.out}", flush=True)
    if config.trace.path and not args.quiet:
        from star.traces import describe_mapping, load_trace

        print(f"star launch: trace {config.trace.path} x{config.trace.stretch:g}, "
              + describe_mapping(load_trace(config.trace.path), config.workers, config.trace.workers), flush=True)
    try:
        result = launch(config, progress=progress)
    except InterruptedBeforeResult as exc:
        print(f"star launch: {exc}", file=sys.stderr)
        return 130
    except LaunchError as exc:
        print(f"star launch: failed: {exc}", file=sys.stderr)
        return 1
    summary = {k: result.get(k) for k in ("task", "mode", "reached", "tta_s", "final_metric", "iterations", "updates", "wall_s")}
    if result.get("compute_to_comm") is not None:
        print(
            f"per iteration: compute {result['compute_s_median'] * 1e3:.1f} ms, "
            f"communication {result['comm_s_median'] * 1e3:.1f} ms (push+pull): compute/comm = {result['compute_to_comm']:.1f}x"
        )
    print("result: " + json.dumps(summary))
    return 130 if result.get("interrupted") else 0


def _run_node(args: argparse.Namespace) -> int:
    from star.node import NodeError, run_node
    from star.processes import LaunchError

    config, progress = _job_config(args)
    if config.plan.mode == DDP_MODE:
        raise ConfigError("plan.mode", DDP_MODE, "star node does not run the DDP baseline; start `torchrun -m star.ddp_rank` instead")

    def on_sigterm(signum, frame):  # torchrun and srun stop their tasks with SIGTERM: shut the children down cleanly
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        result = run_node(config, progress=progress)
    except (NodeError, LaunchError) as exc:
        print(f"star node: failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if result is not None:
        summary = {k: result.get(k) for k in ("task", "mode", "nodes", "reached", "tta_s", "final_metric", "updates")}
        print("result: " + json.dumps(summary))
    return 0


def _daemon_parser(sub, role: str, help: str, handler, ready_file: bool) -> None:
    """`star ps|worker|coordinator`: the daemon's config flags (or --job), and where servers announce their port."""
    from star.cli_children import add_daemon_args

    p = sub.add_parser(role, allow_abbrev=False, help=help)
    if ready_file:
        p.add_argument("--ready-file", help="write {port, pid} here once serving")
    add_daemon_args(p, role)
    p.set_defaults(handler=handler)


def _run_ps(args: argparse.Namespace) -> int:
    from star.cli_children import daemon_config
    from star.ps_server.daemon import serve
    from star.logs import setup_logging

    config = daemon_config("ps", args)
    setup_logging(f"ps{config.ps_index}")
    if config.optimizer.name is None or config.optimizer.lr is None:
        raise ConfigError("optimizer", config.optimizer, "the PS needs optimizer.name and optimizer.lr")
    asyncio.run(serve(config, args.ready_file))
    return 0


def _run_worker(args: argparse.Namespace) -> int:
    from star.cli_children import daemon_config
    from star.logs import setup_logging
    from star.worker.worker import run_worker

    from star.cli_checks import check_task, check_trace

    config = daemon_config("worker", args)
    check_task("task", config.task)
    check_trace("trace.path", config.trace.path)
    setup_logging(f"worker{config.worker_id}")
    return run_worker(config)


def _run_coordinator(args: argparse.Namespace) -> int:
    from star.cli_children import daemon_config
    from star.coordinator import run_coordinator
    from star.logs import setup_logging

    from star.cli_checks import check_task

    config = daemon_config("coordinator", args)
    check_task("task", config.task)
    if not config.ps_addresses:  # found before OUT is written, not as a traceback from the PS client
        raise ConfigError("ps_addresses", "", "must name at least one parameter server (--ps-addresses HOST:PORT,...)")
    setup_logging("coordinator")
    from star.rpc.common import PsUnreachable

    try:
        return run_coordinator(config, args.ready_file)
    except PsUnreachable as exc:  # one line, as the launcher shows a child's last lines
        print(f"star coordinator: {exc}", file=sys.stderr)
        return 1


def _sim_args(parser: argparse.ArgumentParser, show_all: bool) -> None:
    from star.sim.config import SimConfig

    parser.add_argument("--config", metavar="TOML", help="TOML file of SimConfig fields; flags override it")
    add_config_args(parser, SimConfig, SIM_COMMON, show_all)


def _sim_parser(sub) -> None:
    p = sub.add_parser("sim", help="simulate a job (any strategy, 10-10,000 workers) with the real coordinator policies",
                       usage=JOB_USAGE, description=JOB_DESCRIPTION.replace("JobConfig", "SimConfig"), allow_abbrev=False)
    add_job_style_args(p, _sim_args)
    p.set_defaults(handler=_run_sim)


def _run_sim(args: argparse.Namespace) -> int:
    from star.cli_args import given_flags
    from star.config import merge
    from star.sim.config import SimConfig, sim_config
    from star.sim.run import run_and_write

    base = load_toml(args.config) if args.config else {}
    from star.cli_checks import check_trace, check_trace_workers

    config = sim_config(merge(base, given_flags(args, SimConfig)))  # a calibration file goes under both
    check_trace_workers("trace.workers", check_trace("trace.path", config.trace.path), config.trace.workers, config.workers)
    result = run_and_write(config).result
    keys = ("mode", "workers", "reached", "tta_s", "final_metric", "iterations", "updates", "straggler_detections",
            "plan_switches", "amp_toggles", "sim_s", "wall_s")
    print("result: " + json.dumps({k: result.get(k) for k in keys}))
    return 0


def _calibrate_parser(sub) -> None:
    p = sub.add_parser("calibrate", allow_abbrev=False, help="fit the simulator to a short real clean-SSGD run of a built-in task")
    p.add_argument("--task", default="digits")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--ps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-time-s", type=float, default=150.0)
    p.add_argument("--out", required=True, help="directory: the run goes to OUT/ssgd, the fit to OUT/calibration.toml")
    p.set_defaults(handler=_run_calibrate)


def _run_calibrate(args: argparse.Namespace) -> int:
    from star.cli_checks import check_task
    from star.sim.calibrate import run_calibration

    check_task("task", args.task)
    tables = run_calibration(args.task, args.out, args.workers, args.ps, args.seed, args.max_time_s,
                             progress=lambda line: print(line, flush=True))
    print(json.dumps(tables))
    print(f"wrote {args.out}/calibration.toml")
    return 0


def _train_selector_parser(sub) -> None:
    p = sub.add_parser("train-selector", allow_abbrev=False, help="train the learned mode selector on simulated scenarios (deterministic per seed)")
    p.add_argument("--seed", type=int, default=0, help="seeds the scenarios and the model")
    p.add_argument("--scenarios", type=int, default=300, help="training scenarios (each simulates every candidate plan)")
    p.add_argument("--held-out", type=int, default=150, help="held-out scenarios for the regret report (0: none)")
    p.add_argument("--min-workers", type=int, default=4)
    p.add_argument("--max-workers", type=int, default=128)
    p.add_argument("--out", default=None, help="model JSON to write (required; the shipped model, which `auto-learned` "
                                               "uses, is star/policy/models/selector.json: name it to replace it)")
    p.set_defaults(handler=_run_train_selector)


def _run_train_selector(args: argparse.Namespace) -> int:
    from star.sim.selector_training import default_model_path, save_model, train_and_evaluate

    def progress(done: int, total: int) -> None:
        if done == total or done % 25 == 0:
            print(f"  scenarios {done}/{total}", file=sys.stderr, flush=True)

    for name, ok, rule in (("scenarios", args.scenarios >= 1, ">= 1"), ("held_out", args.held_out >= 0, ">= 0"),
                           ("min_workers", args.min_workers >= 1, ">= 1"),
                           ("max_workers", args.max_workers >= args.min_workers, f">= min_workers ({args.min_workers})")):
        if not ok:
            raise ConfigError(name, getattr(args, name), f"must be {rule}")
    if args.out is None:  # never overwrite the model the package ships by default
        raise ConfigError("out", None, f"give the file to write; --out {default_model_path()} replaces the shipped model")
    model, table = train_and_evaluate(args.seed, args.scenarios, args.held_out, args.min_workers, args.max_workers, progress)
    path = save_model(model, args.out)
    print(json.dumps({"model": str(path), "trees": len(model.trees), "ranges": model.ranges, "held_out_regret": table}, indent=1))
    return 0


def _bench_parser(sub) -> None:
    from star.bench import add_arguments

    p = sub.add_parser("bench", allow_abbrev=False, help="every strategy on every trace (simulated or real): TTA table, mitigation, plots")
    add_arguments(p)
    p.set_defaults(handler=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    from star.bench import run_from_args

    return run_from_args(args)


def _report_parser(sub) -> None:
    p = sub.add_parser("report", allow_abbrev=False, help="report.png + report.md of a run (heatmap, decisions, curve), or several runs' curves overlaid")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="output directories of finished star launch runs (one or more)")
    p.add_argument("--out", help="where to write (default: the run's directory; several runs: the first one's parent)")
    p.set_defaults(handler=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    from star.report import write_report

    print(f"wrote {write_report(args.run_dirs, args.out)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="star", description="STAR: straggler-tolerant parameter-server training")
    sub = parser.add_subparsers(dest="command", required=True)
    _job_parser(sub, "launch", "run a whole job on this host (PSs, coordinator, workers)", _run_launch)
    _job_parser(sub, "node", "run this host's part of a multi-host job (torchrun or srun start one on every host)", _run_node)
    _daemon_parser(sub, "ps", "run one parameter-server daemon", _run_ps, ready_file=True)
    _daemon_parser(sub, "worker", "run one worker daemon", _run_worker, ready_file=False)
    _daemon_parser(sub, "coordinator", "run the coordinator (and evaluator) daemon", _run_coordinator, ready_file=True)
    _sim_parser(sub)
    _calibrate_parser(sub)
    _train_selector_parser(sub)
    _bench_parser(sub)
    _report_parser(sub)
    return parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def main(argv: list[str] | None = None) -> int:
    from star.processes import die_with_parent

    die_with_parent()
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        from star.cli_suggest import unknown_option_message

        command = _subcommands(parser)[args.command]
        print(f"{command.prog}: error: {unknown_option_message(command, unknown[0])}", file=sys.stderr)
        return 2
    try:
        return args.handler(args)
    except ConfigError as exc:
        print(f"star {args.command}: bad config: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        from star.cli_checks import USER_ERRORS, describe_user_error

        if not isinstance(exc, USER_ERRORS):
            raise  # a bug: its traceback is what a report needs
        print(f"star {args.command}: error: {describe_user_error(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
