"""Which torch device each process of a job computes on.

A job names a device kind (`device`: cpu | cuda); each process then takes one
device of that kind. Workers and DDP ranks on CUDA go round the visible GPUs by
their index, so N processes on fewer GPUs share them (a single-GPU machine runs
every worker on cuda:0). Pure rules, plus one availability check for the launcher:
a job asked to run on CUDA where torch sees none fails before any process starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from star.errors import ConfigError

if TYPE_CHECKING:
    import torch

DEVICE_KINDS = ("cpu", "cuda")


def process_device(kind: str, index: int, gpu_count: int) -> "torch.device":
    """The device of process `index` (worker id, or DDP local rank) in a job on `kind`."""
    import torch  # here, not at the top: configs import this module and are built without torch

    if kind not in DEVICE_KINDS:
        raise ConfigError("device", kind, f"one of {', '.join(DEVICE_KINDS)}")
    if kind == "cpu":
        return torch.device("cpu")
    if gpu_count < 1:
        raise ConfigError("device", kind, "torch sees no CUDA device on this host")
    return torch.device("cuda", index % gpu_count)


def check_device_available(field_name: str, kind: str) -> None:
    """Refuse a CUDA job where torch cannot use CUDA (a CPU build, or no GPU visible)."""
    import torch

    if kind == "cuda" and not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else f"torch built for CUDA {torch.version.cuda}"
        raise ConfigError(field_name, kind, f"torch sees no CUDA device here ({build}, {torch.__version__})")


def local_device(kind: str, index: int) -> "torch.device":
    """process_device on this host's visible GPUs."""
    import torch

    return process_device(kind, index, torch.cuda.device_count() if kind == "cuda" else 0)
