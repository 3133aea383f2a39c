"""One line for an option `star` does not know, naming the flag the user most likely meant.

Old spellings (`--plan-mode`, `--control.lost-after-s`, `--max_time_s`) name a field whose
one flag is known, so they map to it exactly; anything else gets the closest flag, if any.
"""

from __future__ import annotations

import argparse
import difflib


def unknown_option_message(parser: argparse.ArgumentParser, option: str) -> str:
    option = option.split("=", 1)[0]
    if not option.startswith("-"):
        return f"unexpected argument {option!r}"
    match = _same_field(parser, option) or _closest(parser, option)
    hint = f"; did you mean {match}?" if match else f"; {parser.prog} --help-all lists every option"
    return f"unknown option {option}{hint}"


def _key(text: str) -> str:
    """A spelling-blind key: --plan-mode, --plan.mode and plan_mode all become plan_mode."""
    return text.lstrip("-").lower().replace("-", "_").replace(".", "_")


def _same_field(parser: argparse.ArgumentParser, option: str) -> str | None:
    """The flag of the field an old spelling names (by its flag's or its dotted field's key)."""
    keys: dict[str, str] = {}
    for action in parser._actions:
        if not action.option_strings:
            continue
        positive = action.option_strings[0]
        keys.setdefault(_key(action.dest), positive)
        for flag in action.option_strings:
            keys.setdefault(_key(flag), flag)
        if isinstance(action, argparse.BooleanOptionalAction):
            keys.setdefault("no_" + _key(action.dest), action.option_strings[1])
    return keys.get(_key(option))


def _closest(parser: argparse.ArgumentParser, option: str) -> str | None:
    flags = [flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")]
    found = difflib.get_close_matches(option, flags, n=1, cutoff=0.75)
    return found[0] if found else None
