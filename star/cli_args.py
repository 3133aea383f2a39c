"""Map config dataclasses onto argparse flags: one flag per field, help from the field's comment.

Flags only override what they name, so a TOML file plus a few flags compose. Which flag
a field gets, and which fields `--help` shows, is star.cli_names' business.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Iterator, NamedTuple

from star.cli_names import Groups, flag_name, short_names
from star.config import dotted_to_nested, field_docs, from_dict, merge


class Field(NamedTuple):
    dotted: str  # plan.mode
    hint: Any
    default: Any
    doc: str  # the comment beside the field in its dataclass


def config_fields(cls: type, prefix: str = "", defaults: Any = None) -> Iterator[Field]:
    """Every leaf field of a (nested) config dataclass, in declaration order, with its default."""
    if defaults is None:
        defaults = _default_instance(cls)
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        dotted, hint = f"{prefix}{f.name}", hints[f.name]
        default = getattr(defaults, f.name, None)
        if dataclasses.is_dataclass(hint):
            yield from config_fields(hint, f"{dotted}.", default)
        else:
            yield Field(dotted, hint, default, docs.get(f.name, ""))


def _default_instance(cls: type) -> Any:
    try:
        return cls()
    except Exception:  # a config without defaults for everything: no default to show
        return None


def add_config_args(parser: argparse.ArgumentParser, cls: type, common: Groups = (), show_all: bool = True) -> None:
    """One flag per field of `cls`. With `show_all` every field is listed under its config section;
    else only the `common` settings are, in their groups, and the rest parse but stay unlisted."""
    short = short_names(common)
    fields = {f.dotted: f for f in config_fields(cls)}
    if show_all:
        for f in fields.values():
            _add(_section(parser, f.dotted), f, short)
        return
    for title, members in common:
        group = parser.add_argument_group(title)
        for dotted, _ in members:
            _add(group, fields.pop(dotted), short)
    for f in fields.values():
        _add(parser, f, short, listed=False)


def _section(parser: argparse.ArgumentParser, dotted: str):
    """The argument group of a field's config section ([plan], [control.detector]; top-level fields: 'job')."""
    title = f"[{dotted.rsplit('.', 1)[0]}]" if "." in dotted else "job"
    for group in parser._action_groups:
        if group.title == title:
            return group
    return parser.add_argument_group(title)


def _add(group, f: Field, short: dict[str, str], listed: bool = True) -> None:
    flag = "--" + flag_name(f.dotted, short)
    help_text = _help(f) if listed else argparse.SUPPRESS
    if f.hint is bool or bool in typing.get_args(f.hint):
        group.add_argument(flag, dest=f.dotted, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_text)
    else:
        group.add_argument(flag, dest=f.dotted, default=argparse.SUPPRESS, metavar=f.dotted.rsplit(".", 1)[-1].upper(), help=help_text)


def _help(f: Field) -> str:
    """What the field means, and its default unless the comment already says it."""
    text = f.doc
    if "default" not in text.lower():
        default = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default
        text = f"{text} (default: {default})".strip()
    return text.replace("%", "%%")


def option_for(cls: type, common: Groups = ()) -> dict[str, str]:
    """Dotted field -> its one flag (with dashes), for messages and for building child argv."""
    short = short_names(common)
    return {f.dotted: "--" + flag_name(f.dotted, short) for f in config_fields(cls)}


def given_flags(namespace: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The flags the user actually gave, as a nested dict of the config's fields."""
    names = {f.dotted for f in config_fields(cls)}
    return dotted_to_nested({k: v for k, v in vars(namespace).items() if k in names})


def config_from_args(cls: type, namespace: argparse.Namespace, base: dict[str, Any] | None = None) -> Any:
    return from_dict(cls, merge(base or {}, given_flags(namespace, cls)))


class _HelpAll(argparse.Action):
    """`--help-all`: print the help of the same command built with every field listed, then exit."""

    def __init__(self, option_strings, dest, build=None, **kwargs):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs)
        self.build = build

    def __call__(self, parser, namespace, values, option_string=None):
        full = argparse.ArgumentParser(prog=parser.prog, usage=parser.usage, description=parser.description, allow_abbrev=False)
        self.build(full, True)
        full.print_help()
        parser.exit()


def add_job_style_args(parser: argparse.ArgumentParser, build) -> None:
    """Lay out a config-driven command: `build(parser, show_all)` adds its flags; `--help` shows the
    common ones, `--help-all` every one."""
    parser.add_argument("--help-all", action=_HelpAll, build=build, help="list every option, grouped by config section, and exit")
    build(parser, False)
