"""Where `star ps|worker|coordinator` get their config: their own flags (a daemon started by hand), or
the job's config file (`--job TOML`, how `star launch` and `star node` start them).

With `--job`, the daemon loads the job and derives its config with its pure function in
star.child_configs. Beside `--job` it takes only the runtime facts the file cannot hold: the
function's keyword-only arguments, spelled as the flags of the config fields of the same
names (`--ps-index`, `--host`, `--port`, ...). Any other flag is refused, naming it, so that
no setting of a launched daemon has two sources.
"""

from __future__ import annotations

import argparse
import inspect
from typing import Any, Callable

from star.child_configs import coordinator_config, ps_config, worker_config
from star.cli_args import add_config_args, config_fields, config_from_args
from star.cli_names import flag_name
from star.config import ConfigError, JobConfig, field_value, from_dict, load_toml
from star.coordinator_config import CoordinatorConfig
from star.ps_server.config import PSConfig
from star.worker.config import WorkerConfig

# role -> (its config class, the pure function that derives it from a job)
DAEMONS: dict[str, tuple[type, Callable[..., Any]]] = {
    "ps": (PSConfig, ps_config),
    "worker": (WorkerConfig, worker_config),
    "coordinator": (CoordinatorConfig, coordinator_config),
}


def runtime_fields(derive: Callable[..., Any]) -> dict[str, bool]:
    """The runtime facts a pure config function takes (its keyword-only arguments): name -> required."""
    return {p.name: p.default is inspect.Parameter.empty
            for p in inspect.signature(derive).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def add_daemon_args(parser: argparse.ArgumentParser, role: str) -> None:
    """`--job TOML` (its help naming the runtime flags it goes with), then one flag per field of the daemon's config."""
    cls, derive = DAEMONS[role]
    flags = ", ".join("--" + flag_name(name, {}) for name in runtime_fields(derive))
    parser.add_argument("--job", metavar="TOML", help=f"the job's config file (how launchers start this daemon): its config "
                                                      f"is derived from the job; beside it only {flags} are taken")
    add_config_args(parser, cls)


def daemon_config(role: str, args: argparse.Namespace) -> Any:
    """The config a `star ps|worker|coordinator` command line describes, by its flags or by --job."""
    cls, derive = DAEMONS[role]
    if getattr(args, "job", None) is None:
        return config_from_args(cls, args)
    job = from_dict(JobConfig, load_toml(args.job, "job"))
    return derive(job, **runtime_args(cls, derive, args))


def runtime_args(cls: type, derive: Callable[..., Any], args: argparse.Namespace) -> dict[str, Any]:
    """The runtime flags given beside --job, typed as `cls`'s fields; any other config flag is refused."""
    wanted = runtime_fields(derive)
    given = {f.dotted: vars(args)[f.dotted] for f in config_fields(cls) if f.dotted in vars(args)}
    for dotted, value in given.items():
        if dotted not in wanted:
            raise ConfigError(dotted, value, "comes from the job file given with --job (set it there); beside --job only "
                                             + ", ".join("--" + flag_name(name, {}) for name in wanted) + " are taken")
    for name, required in wanted.items():
        if required and name not in given:
            raise ConfigError(name, None, f"--job needs --{flag_name(name, {})}: a runtime fact the job file does not hold")
    return {name: field_value(cls, name, value) for name, value in given.items()}
