"""A complete user task in one file: model, dataset, loss, metric — trained by STAR as it is.

    PYTHONPATH=examples/own_model star launch --task own_task:build_task --workers 4 --ps 2 --out runs/own

The dataset is map-style and lazy: sample i is generated from (seed, i) only when a batch asks
for it, so its 10 million samples never sit in memory. Each STAR worker reads its own shard of
it through a torch DataLoader (reshuffled every epoch); the coordinator evaluates on the
held-out set the same way. Swap in your own Dataset, model and loss: the contract is the
`Task` below (see the README's "Bring your own model and data").
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from star.tasks import Task, seeded_build

FEATURES, CLASSES = 32, 8


class GeneratedBlobs(Dataset):
    """`size` samples of CLASSES Gaussian blobs in FEATURES dimensions; sample i is built on demand."""

    def __init__(self, size: int, seed: int, noise: float = 1.6):
        self.size, self.seed, self.noise = size, seed, noise
        self.centers = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(1234))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not 0 <= index < self.size:
            raise IndexError(index)
        generator = torch.Generator().manual_seed(self.seed * 100_000_007 + index)
        label = int(torch.randint(CLASSES, (1,), generator=generator))
        return self.centers[label] + self.noise * torch.randn(FEATURES, generator=generator), label


def build_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, CLASSES))


def build_task(data_seed: int = 0) -> Task:
    return Task(
        name="own-blobs",
        build_model=lambda seed: seeded_build(build_model, seed),  # identical on every worker for one seed
        train=GeneratedBlobs(10_000_000, seed=data_seed),  # lazy: never materialised
        heldout=GeneratedBlobs(2_000, seed=data_seed + 1),  # a different stream of samples
        loss_fn=torch.nn.functional.cross_entropy,
        metric_name="accuracy",  # or "loss"
        higher_is_better=True,
        default_target=0.85,  # held-out accuracy the job stops at
        default_batch_size=32,
        default_lr=0.05,
        default_optimizer="sgd",
        default_momentum=0.9,
        loader_workers=0,  # DataLoader num_workers inside each STAR worker (raise it when samples are costly)
    )
