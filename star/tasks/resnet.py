"""`resnet`: a ResNet-18-style CNN (11.2M parameters) on generated CIFAR-shaped 32x32x3 images.

Real CIFAR cannot be downloaded here, and no installed package ships a colour image
set of that shape, so the images are generated, deterministically from `data_seed`:

* 10 classes. Class c is a texture: the sum of GRATINGS sinusoidal gratings, each
  with its own spatial frequency (1.5-6 cycles per image), orientation and colour
  (a random RGB direction).
* Every image draws a fresh random phase per grating (the texture shifts anywhere in
  the frame, so position tells nothing), a random contrast in [0.5, 1], a random
  brightness offset, a distractor (another class's texture at DISTRACTOR weight) and
  per-pixel Gaussian noise (NOISE); then it is clipped and quantised to uint8.

Why it is a fair stand-in for CIFAR in this project: the network, input shape and
therefore the compute and parameter traffic per step are exactly CIFAR ResNet-18's;
the labels can only be read from colour and oriented spatial frequency integrated over
the whole image, which is what the early conv layers learn on natural images; and the
noise and distractors keep it from being solved in a few steps, so the accuracy curve
rises over hundreds of iterations as on real data. It is not a claim about CIFAR
accuracy: the target below is for this set only.

Model: CIFAR ResNet-18 (3x3 stem, 4 stages of 2 basic blocks at 64/128/256/512
channels, global average pool, linear head) with GroupNorm instead of BatchNorm:
BatchNorm's running statistics are buffers, not parameters, so the PSs would never
aggregate them and the evaluator's copy of the model would use untrained statistics.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from star.tasks.base import Task, TaskData, classification_task, seeded_build

NUM_CLASSES = 10
IMAGE_SIZE = 32
GRATINGS = 3
NOISE = 0.35  # per-pixel Gaussian noise, in units of the [-1, 1] image range
DISTRACTOR = 0.4  # weight of another class's texture mixed into each image
TRAIN_IMAGES = 10_000
HELDOUT_IMAGES = 256  # ResNet-18 costs ~0.56 GFLOP per 32x32 image: evaluation stays a few CPU seconds
WIDTHS = (64, 128, 256, 512)
GROUPS = 8  # GroupNorm groups
CHUNK = 1000  # images generated at a time


def class_textures(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per class and grating: (fx, fy) frequencies in cycles per image, and an RGB colour."""
    frequency = 1.5 + 4.5 * torch.rand(NUM_CLASSES, GRATINGS, generator=generator)
    angle = math.pi * torch.rand(NUM_CLASSES, GRATINGS, generator=generator)
    colour = F.normalize(torch.randn(NUM_CLASSES, GRATINGS, 3, generator=generator), dim=-1)
    return frequency * torch.cos(angle), frequency * torch.sin(angle), colour


def render(labels: torch.Tensor, textures, generator: torch.Generator) -> torch.Tensor:
    """Images of the given classes, float in [-1, 1], shape (N, 3, 32, 32), random phases."""
    fx, fy, colour = textures
    n = len(labels)
    grid = torch.arange(IMAGE_SIZE, dtype=torch.float32) / IMAGE_SIZE
    phase = 2 * math.pi * torch.rand(n, GRATINGS, generator=generator)
    # (N, G, H, W): sin(2*pi*(fx*x + fy*y) + phase)
    argument = 2 * math.pi * (fx[labels][:, :, None, None] * grid[None, None, None, :]
                              + fy[labels][:, :, None, None] * grid[None, None, :, None]) + phase[:, :, None, None]
    waves = torch.sin(argument)
    return torch.einsum("nghw,ngc->nchw", waves, colour[labels]) / math.sqrt(GRATINGS)


def generate(count: int, generator: torch.Generator, textures) -> TaskData:
    """`count` labelled images, uint8 (N, 3, 32, 32); labels balanced and shuffled."""
    labels = torch.arange(count) % NUM_CLASSES
    labels = labels[torch.randperm(count, generator=generator)]
    distractors = (labels + 1 + torch.randint(0, NUM_CLASSES - 1, (count,), generator=generator)) % NUM_CLASSES
    pixels = torch.empty(count, 3, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.uint8)
    for start in range(0, count, CHUNK):  # bounded float temporaries: every process generates its own copy
        rows = slice(start, start + CHUNK)
        n = len(labels[rows])
        contrast = 0.5 + 0.5 * torch.rand(n, 1, 1, 1, generator=generator)
        brightness = 0.3 * (torch.rand(n, 1, 1, 1, generator=generator) - 0.5)
        images = contrast * render(labels[rows], textures, generator) + DISTRACTOR * render(distractors[rows], textures, generator)
        images = images + brightness + NOISE * torch.randn(images.shape, generator=generator)
        pixels[rows] = ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return TaskData(pixels, labels)


def generate_split(data_seed: int) -> tuple[TaskData, TaskData]:
    """(train, heldout) drawn from the same class textures; heldout images are fresh draws."""
    generator = torch.Generator().manual_seed(10_007 + data_seed)
    textures = class_textures(generator)
    return generate(TRAIN_IMAGES, generator, textures), generate(HELDOUT_IMAGES, generator, textures)


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(GROUPS, outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(GROUPS, outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.GroupNorm(GROUPS, outputs))
        nn.init.zeros_(self.norm2.weight)  # each block starts as the identity: trains stably without warm-up

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        return F.relu(self.norm2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    """CIFAR ResNet-18 with GroupNorm; takes uint8 or float images."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, WIDTHS[0], 3, 1, 1, bias=False), nn.GroupNorm(GROUPS, WIDTHS[0]), nn.ReLU())
        stages, inputs = [], WIDTHS[0]
        for index, width in enumerate(WIDTHS):
            stride = 1 if index == 0 else 2
            stages += [BasicBlock(inputs, width, stride), BasicBlock(width, width, 1)]
            inputs = width
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(WIDTHS[-1], NUM_CLASSES)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype == torch.uint8:
            images = images.float() / 127.5 - 1.0
        features = self.stages(self.stem(images))
        return self.head(F.adaptive_avg_pool2d(features, 1).flatten(1))


def build_model(seed: int) -> nn.Module:
    return seeded_build(ResNet18, seed)


def build_task(data_seed: int = 0) -> Task:
    """`data_seed` picks the class textures and the images."""
    train, heldout = generate_split(data_seed)
    return classification_task("resnet", build_model, train, heldout, target=0.8, batch_size=16, lr=0.05, eval_batch_size=64)
