"""What a restarted coordinator recovers, and from where (pure functions and one small file).

- The plan in force: from the PSs (the source of truth), the newest plan any of them holds.
- Policy state (detector windows, AMP and batch decisions, selector dwell, lost workers) and
  the per-worker directives: from OUT/coordinator_state.json, rewritten atomically (temp file,
  fsync, rename) after every decision period. The file carries a SHA-256 of its payload, so a
  truncated or corrupted file is refused (StateFileError, naming what is wrong) and the
  coordinator starts from the PSs' state alone.
- The evaluator's curve: from OUT/curve.csv.

Policy objects are saved as plain data, attribute by attribute (`plain_state`): numbers,
strings, lists, dicts, sets, deques, enums and objects of star's own classes; `config`
attributes (the new process has its own) and anything else are skipped.
"""

from __future__ import annotations

import csv
import enum
import hashlib
import importlib
import json
import os
from collections import deque
from pathlib import Path
from typing import Any

from star.tta import EvalPoint
from star.plan import SyncPlan
from star.rpc.common import plan_from_proto

STATE_FILE = "coordinator_state.json"
FORMAT = 1
SKIPPED_ATTRIBUTES = frozenset({"config", "model"})  # the new process's own settings and shipped models


class StateFileError(ValueError):
    """A state file that cannot be trusted; the message names the file and what is wrong."""


def plan_in_force(stats: list) -> SyncPlan | None:
    """The newest plan the PSs hold (PsStats messages; errors and PSs without a plan are skipped)."""
    plans = [plan_from_proto(s.plan_in_force) for s in stats if hasattr(s, "HasField") and s.HasField("plan_in_force")]
    return max(plans, key=lambda p: p.epoch, default=None)


def read_curve(path: str | Path) -> list[EvalPoint]:
    """The points of a curve.csv (an unreadable or partial last line is dropped)."""
    points = []
    try:
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                try:
                    points.append(EvalPoint(float(row["time_s"]), int(row["version"]), float(row["metric"])))
                except (KeyError, TypeError, ValueError):
                    break
    except FileNotFoundError:
        return []
    return points


# ---- plain-data state of policy objects ---------------------------------------------------


def _class_path(value: Any) -> str:
    return f"{type(value).__module__}:{type(value).__qualname__}"


def _own_class(path: str) -> type:
    module, _, name = path.partition(":")
    if not module.startswith("star.") or not name.isidentifier():
        raise StateFileError(f"class {path!r} is not one of star's")
    cls = getattr(importlib.import_module(module), name, None)
    if not isinstance(cls, type):
        raise StateFileError(f"no class {path!r}")
    return cls


_SKIP = object()


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return {"enum": _class_path(value), "value": value.value}
    if isinstance(value, dict):
        items = [(_encode(k), _encode(v)) for k, v in value.items()]
        return {"dict": [[k, v] for k, v in items if k is not _SKIP and v is not _SKIP]}
    if isinstance(value, deque):
        return {"deque": [_encode(v) for v in value], "maxlen": value.maxlen}
    if isinstance(value, (set, frozenset)):
        return {"set": sorted(_encode(v) for v in value), "frozen": isinstance(value, frozenset)}
    if isinstance(value, (list, tuple)):
        items = [_encode(v) for v in value]
        return _SKIP if _SKIP in items else {"list" if isinstance(value, list) else "tuple": items}
    if type(value).__module__.startswith("star.") and hasattr(value, "__dict__"):
        return {"object": _class_path(value), "fields": plain_state(value)}
    return _SKIP


def _decode(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    if "enum" in data:
        return _own_class(data["enum"])(data["value"])
    if "dict" in data:
        return {_decode(k): _decode(v) for k, v in data["dict"]}
    if "deque" in data:
        return deque((_decode(v) for v in data["deque"]), maxlen=data["maxlen"])
    if "set" in data:
        return (frozenset if data["frozen"] else set)(_decode(v) for v in data["set"])
    if "list" in data:
        return [_decode(v) for v in data["list"]]
    if "tuple" in data:
        return tuple(_decode(v) for v in data["tuple"])
    if "object" in data:
        cls = _own_class(data["object"])
        obj = cls.__new__(cls)
        for name, value in data["fields"].items():
            object.__setattr__(obj, name, _decode(value))
        return obj
    raise StateFileError(f"unknown value {data!r}")


def plain_state(obj: Any) -> dict[str, Any]:
    """An object's attributes as JSON-able data (see the module docstring for what is kept)."""
    out = {}
    for name, value in vars(obj).items():
        if name in SKIPPED_ATTRIBUTES:
            continue
        encoded = _encode(value)
        if encoded is not _SKIP:
            out[name] = encoded
    return out


def restore_plain_state(obj: Any, state: dict[str, Any]) -> None:
    """Set `obj`'s attributes from plain_state(...) data; nested star objects are restored in place."""
    for name, data in state.items():
        current = getattr(obj, name, None)
        if isinstance(data, dict) and "object" in data and current is not None and _class_path(current) == data["object"]:
            restore_plain_state(current, data["fields"])
        else:
            object.__setattr__(obj, name, _decode(data))


# ---- the file ------------------------------------------------------------------------------


def _digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def write_state(path: str | Path, payload: dict) -> None:
    """Atomically replace the state file: a crash mid-write leaves the previous one."""
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as handle:
        json.dump({"format": FORMAT, "sha256": _digest(payload), "payload": payload}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def load_state(path: str | Path) -> dict | None:
    """The payload of a state file; None when there is none; StateFileError when it cannot be trusted."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StateFileError(f"{path}: unreadable ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateFileError(f"{path}: not JSON (truncated or corrupt at byte {exc.pos} of {len(text)})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("payload"), dict):
        raise StateFileError(f"{path}: not a coordinator state file of format {FORMAT}")
    if data.get("sha256") != _digest(data["payload"]):
        raise StateFileError(f"{path}: checksum mismatch (the file was changed or corrupted)")
    return data["payload"]
