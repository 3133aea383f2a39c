"""Which job options a DDP baseline run (`star launch --mode ddp`) cannot honour.

Pure rules on plain data, so the config check (non-default values) and the CLI check
(options the user gave, even at their default value) are one implementation.
"""

from __future__ import annotations

from typing import Any

DDP_MODE = "ddp"

# Dotted JobConfig fields that only mean something with parameter servers.
PS_ONLY_FIELDS = (
    "ps",
    "plan.k",
    "plan.groups",
    "plan.staleness",
    "plan.late_policy",
    "plan.tree_fanout",
    "resume",
    "nonfinite",
    "transport",
    "wire",
)


def ps_only_options(asked: dict[str, Any]) -> list[tuple[str, Any]]:
    """(dotted field, value) of every PS-only option present in a nested dict of asked-for options."""
    found = []
    for dotted in PS_ONLY_FIELDS:
        node: Any = asked
        for part in dotted.split("."):
            node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
            if node is _MISSING:
                break
        else:
            if node is not None:
                found.append((dotted, node))
    return found


def ddp_refusal(asked: dict[str, Any]) -> tuple[str, Any, str] | None:
    """(field, value, reason) for the first PS-only option of a DDP run, or None when there is none."""
    mode = (asked.get("plan") or {}).get("mode") if isinstance(asked.get("plan"), dict) else None
    if mode != DDP_MODE:
        return None
    found = ps_only_options(asked)
    if not found:
        return None
    dotted, value = found[0]
    return dotted, value, "a DDP run (plan.mode='ddp') has no parameter servers, so it cannot honour this option"


_MISSING = object()
