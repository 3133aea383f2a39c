"""Built-in training tasks and the contract user tasks follow."""

from star.tasks.base import Task, TaskData, seeded_build
from star.tasks.registry import TASK_NAMES, TaskSpecError, get_task
from star.tasks.sharding import BatchStream, shard_indices

__all__ = [
    "TASK_NAMES",
    "BatchStream",
    "Task",
    "TaskData",
    "TaskSpecError",
    "get_task",
    "seeded_build",
    "shard_indices",
]
