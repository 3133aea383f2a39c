"""What `star calibrate` measured on a built-in task, shipped with the package (star/sim/calibrations/<task>.toml).

The simulator takes its cost and convergence models from these files; the coordinator takes from them the
one measured fact its policies need and cannot observe live: how much a stale update is worth (the
convergence table's staleness_penalty), which the mode selector weighs asynchronous plans with.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from star.config import load_toml
from star.errors import ConfigError


def calibration_path(task: str) -> Path | None:
    """The shipped calibration of `task` (None: the task has none)."""
    path = Path(str(resources.files("star.sim").joinpath("calibrations", f"{task}.toml")))
    return path if path.is_file() else None


def shipped_calibration(task: str) -> str:
    """The shipped calibration of `task` for the simulator; a task without one is refused, naming it."""
    path = calibration_path(task)
    if path is None:
        raise ConfigError("task", task, "no shipped simulator calibration for this task; give one with --calibration "
                                        "(`star calibrate` measures it)")
    return str(path)


def staleness_penalty(task: str) -> float | None:
    """The staleness penalty measured on `task` (None: not measured)."""
    path = calibration_path(task)
    if path is None:
        return None
    value = load_toml(path, "calibration").get("convergence", {}).get("staleness_penalty")
    return None if value is None else float(value)
