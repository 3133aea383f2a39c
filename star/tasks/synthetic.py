"""A compute-heavy convnet on generated images, for throughput experiments.

Labels come from a fixed random linear "teacher" on a hidden low-resolution
latent, so the data is learnable by a convnet yet needs no download, and
anyone can regenerate it bit-for-bit from the seed.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from star.tasks.base import Task, TaskData, classification_task, init_relu_convnet, seeded_build

NUM_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)
LATENT_SHAPE = (3, 4, 4)
NOISE_STD = 0.5
TRAIN_SAMPLES = 4096
HELDOUT_SAMPLES = 512


def teacher_labels(latents: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Argmax of a linear map of the latents, standardised per class.

    Standardising each class score over the dataset keeps the classes
    roughly balanced, so accuracy is not won by predicting one label.
    """
    scores = latents.flatten(1) @ weights.T
    scores = (scores - scores.mean(0)) / scores.std(0)
    return scores.argmax(dim=1)


def generate(data_seed: int) -> tuple[TaskData, TaskData]:
    """(train, heldout) drawn i.i.d. from one generator seeded by data_seed.

    Each image is a smooth upsampled latent plus pixel noise: the label
    depends only on the latent, so a convnet must denoise and localise.
    """
    generator = torch.Generator().manual_seed(1_000_003 + data_seed)
    latent_size = LATENT_SHAPE[0] * LATENT_SHAPE[1] * LATENT_SHAPE[2]
    weights = torch.randn(NUM_CLASSES, latent_size, generator=generator)
    total = TRAIN_SAMPLES + HELDOUT_SAMPLES
    latents = torch.randn(total, *LATENT_SHAPE, generator=generator)
    labels = teacher_labels(latents, weights)
    smooth = F.interpolate(latents, size=IMAGE_SHAPE[1:], mode="bilinear", align_corners=False)
    images = smooth + NOISE_STD * torch.randn(smooth.shape, generator=generator)
    return (
        TaskData(images[:TRAIN_SAMPLES].clone(), labels[:TRAIN_SAMPLES].clone()),
        TaskData(images[TRAIN_SAMPLES:].clone(), labels[TRAIN_SAMPLES:].clone()),
    )


class SyntheticNet(nn.Module):
    """Conv stack at 32x32 and 16x16, average-pooled to the latent grid, linear head."""

    def __init__(self, width: int = 48) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(IMAGE_SHAPE[0], width, 5, padding=2),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Linear(2 * width * LATENT_SHAPE[1] * LATENT_SHAPE[2], NUM_CLASSES)
        init_relu_convnet(self.features, self.head)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        pooled = F.adaptive_avg_pool2d(self.features(images), LATENT_SHAPE[1:])
        return self.head(pooled.flatten(1))


def build_model(seed: int) -> nn.Module:
    return seeded_build(SyntheticNet, seed)


def build_task(data_seed: int = 0) -> Task:
    """`data_seed` regenerates images, teacher and labels from scratch."""
    train, heldout = generate(data_seed)
    return classification_task("synthetic-cnn", build_model, train, heldout, target=0.7, batch_size=32, lr=0.005,
                               eval_batch_size=128)
