"""Turn a task spec string into a Task, once per process.

Every worker and server process calls get_task with the same spec, so data
is built lazily on first use and cached rather than at import time.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Callable

from star.tasks.base import Task


class TaskSpecError(ValueError):
    """A task spec that names nothing loadable."""


def _builtin_builders() -> dict[str, Callable[[int], Task]]:
    from star.tasks import charlm, digits, synthetic

    return {
        "digits": digits.build_task,
        "charlm": charlm.build_task,
        "synthetic-cnn": synthetic.build_task,
    }


TASK_NAMES: tuple[str, ...] = ("digits", "charlm", "synthetic-cnn")


@functools.lru_cache(maxsize=None)
def get_task(spec: str, data_seed: int = 0) -> Task:
    """A registered task name, or "package.module:function" returning a Task.

    A user function is called as function(data_seed=...) if it has a
    `data_seed` parameter, else with no arguments.
    """
    if not isinstance(spec, str) or not spec:
        raise TaskSpecError(f"task must be a non-empty string, got {spec!r}")
    if spec in TASK_NAMES:
        return _builtin_builders()[spec](data_seed)
    if ":" not in spec:
        raise TaskSpecError(
            f"task {spec!r} is not one of {', '.join(TASK_NAMES)} and not a 'package.module:function' spec"
        )
    return _load_user_task(spec, data_seed)


def _load_user_task(spec: str, data_seed: int) -> Task:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise TaskSpecError(f"task {spec!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TaskSpecError(f"task {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    factory = getattr(module, attr, None)
    if factory is None:
        raise TaskSpecError(f"task {spec!r}: module {module_name!r} has no attribute {attr!r}")
    if not callable(factory):
        raise TaskSpecError(f"task {spec!r}: {attr!r} is not callable")
    takes_seed = "data_seed" in inspect.signature(factory).parameters
    task = factory(data_seed=data_seed) if takes_seed else factory()
    if not isinstance(task, Task):
        raise TaskSpecError(f"task {spec!r}: {attr}() returned {type(task).__name__}, expected Task")
    return task
