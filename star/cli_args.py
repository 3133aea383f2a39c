"""Map config dataclasses onto argparse flags: every field is a flag, nested ones dotted.

`--plan.mode kofn` (and `--plan-mode kofn`) set `JobConfig.plan.mode`. Flags only
override what they name, so a TOML file plus a few flags compose.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

from star.config import dotted_to_nested, field_docs, from_dict, merge


def add_config_args(parser: argparse.ArgumentParser, cls: type, prefix: str = "", skip: tuple[str, ...] = ()) -> None:
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        dotted = f"{prefix}{f.name}"
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            add_config_args(parser, hint, prefix=f"{dotted}.")
            continue
        # --plan.late_policy, --plan.late-policy and --plan-late-policy all name plan.late_policy.
        flags = sorted({f"--{dotted}", f"--{dotted.replace('_', '-')}", f"--{dotted.replace('_', '-').replace('.', '-')}"}, key=len)
        help_text = docs.get(f.name, "")
        if hint is bool or bool in typing.get_args(hint):
            parser.add_argument(*flags, dest=dotted, action="store_const", const=True, default=argparse.SUPPRESS, help=help_text)
            no_flag = f"--no-{dotted.replace('_', '-').replace('.', '-')}"
            parser.add_argument(no_flag, dest=dotted, action="store_const", const=False, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        else:
            parser.add_argument(*flags, dest=dotted, default=argparse.SUPPRESS, metavar=f.name.upper(), help=help_text)


def given_flags(namespace: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The flags the user actually gave, as a nested dict of the config's fields."""
    names = _dotted_names(cls)
    return dotted_to_nested({k: v for k, v in vars(namespace).items() if k in names})


def config_from_args(cls: type, namespace: argparse.Namespace, base: dict[str, Any] | None = None) -> Any:
    return from_dict(cls, merge(base or {}, given_flags(namespace, cls)))


def _dotted_names(cls: type, prefix: str = "") -> set[str]:
    hints = typing.get_type_hints(cls)
    names: set[str] = set()
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            names |= _dotted_names(hints[f.name], f"{prefix}{f.name}.")
        else:
            names.add(f"{prefix}{f.name}")
    return names
