"""Turn a task spec string into a Task, once per process.

Every worker and server process calls get_task with the same spec, so data
is built lazily on first use and cached rather than at import time. Built-in
names are just aliases for specs, so built-in and user tasks load one way.
"""

from __future__ import annotations

import functools
import importlib
import inspect

from star.tasks.base import Task

_BUILTIN_SPECS = {
    "digits": "star.tasks.digits:build_task",
    "charlm": "star.tasks.charlm:build_task",
    "synthetic-cnn": "star.tasks.synthetic:build_task",
    "gpt-1m": "star.tasks.gpt:build_task_1m",
    "resnet": "star.tasks.resnet:build_task",
}
TASK_NAMES: tuple[str, ...] = tuple(_BUILTIN_SPECS)
# More built-in names, loadable but not in TASK_NAMES (the contract tests build, train and evaluate every
# TASK_NAMES entry, and gpt-1m already covers the gpt code): plain "gpt" is the 10M default.
PRESET_SPECS = {"gpt": "star.tasks.gpt:build_task_10m",
                **{f"gpt-{size}": f"star.tasks.gpt:build_task_{size}" for size in ("10m", "50m", "120m")}}
_BUILTIN_SPECS.update(PRESET_SPECS)


class TaskSpecError(ValueError):
    """A task spec that names nothing loadable."""


def get_task(spec: str, data_seed: int = 0) -> Task:
    """A registered task name, or "package.module:function" returning a Task.

    A user function is called as function(data_seed=...) if it has a
    `data_seed` parameter, else with no arguments.
    """
    if not isinstance(spec, str) or not spec:
        raise TaskSpecError(f"task must be a non-empty string, got {spec!r}")
    if not isinstance(data_seed, int) or isinstance(data_seed, bool):
        raise TaskSpecError(f"task {spec!r}: data_seed must be an int, got {data_seed!r}")
    return _load(spec, data_seed)


@functools.lru_cache(maxsize=None)
def _load(spec: str, data_seed: int) -> Task:
    target = _BUILTIN_SPECS.get(spec, spec)
    if ":" not in target:
        raise TaskSpecError(
            f"task {spec!r} is not one of {', '.join(TASK_NAMES + tuple(PRESET_SPECS))} "
            "and not a 'package.module:function' spec"
        )
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise TaskSpecError(f"task {spec!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except (ImportError, SyntaxError) as exc:
        raise TaskSpecError(f"task {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    factory = getattr(module, attr, None)
    if factory is None:
        raise TaskSpecError(f"task {spec!r}: module {module_name!r} has no attribute {attr!r}")
    if not callable(factory):
        raise TaskSpecError(f"task {spec!r}: {attr!r} is not callable")
    try:  # the user's code: its failure is a bad --task, reported in one line, not a launcher's traceback
        task = factory(data_seed=data_seed) if _takes_data_seed(factory) else factory()
    except Exception as exc:
        raise TaskSpecError(f"task {spec!r}: {attr}() raised {type(exc).__name__}: {exc} "
                            f"(python -c 'import {module_name}; {module_name}.{attr}()' shows where)") from exc
    if not isinstance(task, Task):
        raise TaskSpecError(f"task {spec!r}: {attr}() returned {type(task).__name__}, expected Task")
    return task


def _takes_data_seed(factory) -> bool:
    try:
        return "data_seed" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # some builtins have no inspectable signature
        return False
