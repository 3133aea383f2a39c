"""The task contract shared by workers, parameter servers and the coordinator.

A task bundles everything a training run needs besides the cluster: how to
build the model deterministically, the data, the loss, and how to judge
progress. Every process builds the same task independently, so nothing here
may depend on process-local state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, IterableDataset

METRICS = ("accuracy", "loss")
OPTIMIZERS = ("sgd", "adam", "adamw")


@dataclass(frozen=True, eq=False)
class TaskData:
    """Paired inputs/targets; row i of each belongs to sample i.

    eq=False: field-wise == on tensors is ambiguous, so identity it is.
    """

    inputs: torch.Tensor
    targets: torch.Tensor

    def __post_init__(self) -> None:
        for field in ("inputs", "targets"):
            value = getattr(self, field)
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"TaskData.{field} must be a torch.Tensor, got {type(value).__name__}")
            if value.dim() == 0:
                raise ValueError(f"TaskData.{field} must have a sample dimension, got a scalar")
        if self.inputs.shape[0] != self.targets.shape[0]:
            raise ValueError(
                f"TaskData.targets has {self.targets.shape[0]} samples but inputs has {self.inputs.shape[0]}"
            )

    def __len__(self) -> int:
        return self.inputs.shape[0]


@dataclass(frozen=True, eq=False)
class Task:
    """A model/data/loss bundle plus the defaults it was calibrated with.

    default_momentum is SGD's momentum, or beta1 for adam/adamw.
    eval_batch_size only bounds evaluate's memory; it never affects results.
    """

    name: str
    build_model: Callable[[int], torch.nn.Module]
    train: TaskData | Dataset  # in-memory tensors, or a map-style Dataset each worker reads its shard of through a DataLoader
    heldout: TaskData | Dataset
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    metric_name: str
    higher_is_better: bool
    default_target: float
    default_batch_size: int
    default_lr: float
    default_optimizer: str
    default_momentum: float
    eval_batch_size: int = 256
    collate_fn: Callable | None = None  # Dataset tasks: turns a list of samples into (inputs, targets); default torch's
    loader_workers: int = 0  # Dataset tasks: DataLoader num_workers in each worker process
    pin_memory: bool = False  # Dataset tasks: DataLoader pin_memory (for CUDA workers)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("Task.name must be non-empty")
        for field in ("build_model", "loss_fn"):
            if not callable(getattr(self, field)):
                raise TypeError(f"Task.{field} must be callable")
        for field in ("train", "heldout"):
            value = getattr(self, field)
            if not isinstance(value, TaskData) and not is_map_dataset(value):
                raise TypeError(f"Task.{field} must be a TaskData (inputs and targets tensors) or a map-style "
                                f"torch.utils.data.Dataset (with __len__ and __getitem__), got {type(value).__name__}")
            if len(value) == 0:
                raise ValueError(f"Task.{field} is empty")
        if self.collate_fn is not None and not callable(self.collate_fn):
            raise TypeError("Task.collate_fn must be callable or None")
        if not isinstance(self.loader_workers, int) or self.loader_workers < 0:
            raise ValueError(f"Task.loader_workers must be an int >= 0, got {self.loader_workers!r}")
        if self.metric_name not in METRICS:
            raise ValueError(f"Task.metric_name must be one of {METRICS}, got {self.metric_name!r}")
        if self.default_optimizer not in OPTIMIZERS:
            raise ValueError(f"Task.default_optimizer must be one of {OPTIMIZERS}, got {self.default_optimizer!r}")
        for field in ("default_batch_size", "eval_batch_size"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"Task.{field} must be a positive int, got {value!r}")
        if not self.default_lr > 0:
            raise ValueError(f"Task.default_lr must be > 0, got {self.default_lr!r}")
        if not 0 <= self.default_momentum < 1:
            raise ValueError(f"Task.default_momentum must be in [0, 1), got {self.default_momentum!r}")

    def evaluate(self, model: torch.nn.Module) -> float:
        """Held-out metric, batched so memory stays flat; restores the model's mode."""
        was_training = model.training
        device = _device_of(model)
        model.eval()
        total, count = 0.0, 0
        try:
            with torch.no_grad():
                for inputs, targets in self.heldout_batches():
                    inputs, targets = inputs.to(device), targets.to(device)
                    outputs = model(inputs)
                    n = inputs.shape[0]
                    if self.metric_name == "accuracy":
                        total += (outputs.argmax(dim=-1) == targets).sum().item()
                    else:
                        total += float(self.loss_fn(outputs, targets).item()) * n
                    count += n
        finally:
            model.train(was_training)
        return total / count

    def heldout_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Held-out (inputs, targets) batches of eval_batch_size, in order, from tensors or a Dataset."""
        data = self.heldout
        if isinstance(data, TaskData):
            for start in range(0, len(data), self.eval_batch_size):
                yield data.inputs[start:start + self.eval_batch_size], data.targets[start:start + self.eval_batch_size]
            return
        for batch in DataLoader(data, batch_size=self.eval_batch_size, shuffle=False, collate_fn=self.collate_fn):
            yield as_pair(batch)

    def reached(self, metric: float, target: float) -> bool:
        """Whether `metric` is at least as good as `target` in this task's direction."""
        return metric >= target if self.higher_is_better else metric <= target


def classification_task(name: str, build_model: Callable[[int], torch.nn.Module], train: TaskData | Dataset,
                        heldout: TaskData | Dataset, *, target: float, batch_size: int, lr: float,
                        eval_batch_size: int = 256) -> Task:
    """A classifier trained with cross-entropy and SGD with momentum 0.9, judged by held-out accuracy:
    what the built-in image tasks share; only their data, model and calibrated numbers differ."""
    return Task(name=name, build_model=build_model, train=train, heldout=heldout, loss_fn=F.cross_entropy,
                metric_name="accuracy", higher_is_better=True, default_target=target, default_batch_size=batch_size,
                default_lr=lr, default_optimizer="sgd", default_momentum=0.9, eval_batch_size=eval_batch_size)


def is_map_dataset(data: object) -> bool:
    """A map-style Dataset: indexable, with a length (an IterableDataset cannot be sharded by index)."""
    return isinstance(data, Dataset) and not isinstance(data, IterableDataset) and hasattr(data, "__len__")


def as_pair(batch: object) -> tuple[torch.Tensor, torch.Tensor]:
    """A collated batch must be (inputs, targets): a clear error otherwise."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        items = f" of {len(batch)} items" if isinstance(batch, (tuple, list)) else ""
        raise TypeError(f"a batch of the task's Dataset must collate to (inputs, targets), got {type(batch).__name__}{items}")
    return batch[0], batch[1]


def _device_of(model: torch.nn.Module) -> torch.device:
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")


def seeded_build(factory: Callable[[], torch.nn.Module], seed: int) -> torch.nn.Module:
    """Build a float32 model from `seed` without disturbing the caller's RNG.

    Forking the RNG keeps build_model side-effect free, so a worker building
    its replica cannot shift the data order or dropout of anything else.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = factory()
    return model.to(torch.float32)


def init_relu_convnet(features: torch.nn.Module, head: torch.nn.Linear) -> None:
    """Kaiming-normal ReLU convs and a zero head: trains stably at the lrs our tasks use
    (PyTorch's default init stalled or diverged there)."""
    for module in features.modules():
        if isinstance(module, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            torch.nn.init.zeros_(module.bias)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
