"""The one flag of every config field, and which flags `--help` shows.

A field's flag is its short name when it has one (the settings users change: `--mode`,
`--lr`), else its dashed name at the top level (`--max-time-s`, which TOML also accepts)
and its dotted TOML path below it (`--control.detector.k`). The common settings are
listed here once, grouped as `--help` shows them; `--help-all` shows every field.
"""

from __future__ import annotations

# (group title, ((dotted field, short name or None for its usual flag), ...)); the order is --help's.
Groups = tuple[tuple[str, tuple[tuple[str, str | None], ...]], ...]

JOB_COMMON: Groups = (
    ("job", (("task", None), ("workers", None), ("ps", None), ("seed", None))),
    ("synchronisation", (("plan.mode", "mode"), ("plan.k", "k"), ("plan.groups", "groups"),
                         ("plan.staleness", "staleness"), ("plan.tree_fanout", "tree-fanout"))),
    ("slowdown trace", (("trace.path", "trace"), ("trace.workers", "trace-workers"), ("trace.stretch", "trace-stretch"))),
    ("training", (("target", None), ("max_time_s", None), ("batch_size", None),
                  ("optimizer.name", "optimizer"), ("optimizer.lr", "lr"))),
    ("data path", (("transport", None), ("wire", None))),
    ("control switches (default: as --mode says)", (("control.amp", "control-amp"), ("control.selector", "control-selector"),
                                                    ("control.batch", "control-batch"), ("control.exclude", "control-exclude"))),
    ("output", (("out", None), ("resume", None), ("metrics_port", None), ("tensorboard", None))),
)

SIM_COMMON: Groups = (
    ("job", (("workers", None), ("iterations", None), ("max_time_s", None), ("seed", None), ("calibration", None))),
    ("synchronisation", (("plan.mode", "mode"), ("plan.k", "k"), ("plan.groups", "groups"), ("plan.staleness", "staleness"))),
    ("slowdown trace", (("trace.path", "trace"), ("trace.workers", "trace-workers"), ("trace.stretch", "trace-stretch"))),
    ("control switches (default: as --mode says)", (("control.amp", "control-amp"), ("control.selector", "control-selector"),
                                                    ("control.batch", "control-batch"), ("control.exclude", "control-exclude"))),
    ("output", (("out", None),)),
)


def short_names(common: Groups) -> dict[str, str]:
    """Dotted field -> short name, for the common settings that have one."""
    return {dotted: name for _, fields in common for dotted, name in fields if name}


def flag_name(dotted: str, short: dict[str, str]) -> str:
    """A field's one flag, without the leading dashes."""
    if dotted in short:
        return short[dotted]
    return dotted if "." in dotted else dotted.replace("_", "-")
