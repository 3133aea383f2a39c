"""Which job options a DDP baseline run (`star launch --mode ddp`) cannot honour.

Pure rules on plain data, so the config check (non-default values) and the CLI check
(options the user gave, even at their default value) are one implementation.
"""

from __future__ import annotations

from typing import Any

DDP_MODE = "ddp"

# Dotted JobConfig fields that only mean something with parameter servers (and the coordinator beside them).
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
    "max_workers",  # elastic admission is the coordinator's
    "metrics_port",  # the coordinator's and PSs' Prometheus endpoints
    "control",  # every live decision (detection, AMP, batch sizes, the selector) is the coordinator's
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
            while isinstance(node, dict) and node:  # a whole section: name its first option
                key = next(iter(node))
                dotted, node = f"{dotted}.{key}", node[key]
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
    return dotted, value, ("a DDP run (plan.mode='ddp') has no parameter servers and no coordinator, so it cannot "
                           "honour this option")


_MISSING = object()


def ddp_backend(device_type: str, local_world_size: int, gpu_count: int) -> str:
    """The process-group backend of a DDP run: NCCL when every local rank has a GPU of its own;
    gloo on CPU, and on CUDA when ranks must share GPUs (NCCL refuses two ranks on one device;
    gloo all-reduces CUDA tensors through host memory)."""
    if device_type == "cuda" and 1 <= local_world_size <= gpu_count:
        return "nccl"
    return "gloo"
