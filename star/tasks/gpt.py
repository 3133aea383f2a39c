"""`gpt`: a byte-level decoder-only transformer on the Python standard library's own source.

Corpus: every top-level `*.py` file of the running interpreter's standard library
(`os.path.dirname(os.__file__)`, sorted by name; 168 files, 4.7 MB on CPython 3.11),
licensed under the Python Software Foundation License. It ships with every Python
install, so every process reads the same bytes with no download. Tokens are raw bytes
(vocabulary 256). The last 10% of the text is held out; evaluation uses a fixed,
evenly spread subset of held-out windows so it stays affordable on a CPU.

Model: pre-norm blocks (charlm's Block: causal attention through
F.scaled_dot_product_attention, GELU MLP), learned positions, and an output head tied
to the token embedding. Presets by parameter count are registered as `gpt-1m`,
`gpt-10m` (the default: plain `gpt`), `gpt-50m` and `gpt-120m`.
"""

from __future__ import annotations

import functools
import glob
import os
from dataclasses import dataclass

import torch
from torch import nn

from star.tasks.base import Task, seeded_build
from star.tasks.charlm import CharTransformer, eval_starts, sequence_loss, split_point, window_starts, windows

VOCAB_SIZE = 256
CONTEXT = 128


@dataclass(frozen=True)
class GptPreset:
    """One model size and the training defaults measured for it."""

    name: str  # registry suffix: gpt-<name>
    dim: int  # embedding width
    layers: int  # transformer blocks
    heads: int  # attention heads (dim must divide by it)
    batch_size: int  # default sequences per worker per iteration
    lr: float  # default AdamW learning rate
    target: float  # default held-out loss target (nats per byte)
    eval_windows: int  # held-out windows of CONTEXT bytes per evaluation


PRESETS: dict[str, GptPreset] = {
    p.name: p
    for p in (
        # 1m: 3.1, not 3.0. At 3.0 the held-out loss is on a plateau (about -0.001 per step), where runs of the
        # same arithmetic crossed 79-133 steps apart once floating-point order parted them; 3.1 is still on the
        # steep part (about -0.01 per step), reached after ~30 steps of 4 workers x 16 sequences.
        GptPreset("1m", dim=128, layers=5, heads=4, batch_size=16, lr=3e-3, target=3.1, eval_windows=32),
        GptPreset("10m", dim=320, layers=8, heads=5, batch_size=8, lr=1e-3, target=3.0, eval_windows=8),
        GptPreset("50m", dim=640, layers=10, heads=10, batch_size=8, lr=6e-4, target=3.0, eval_windows=8),
        GptPreset("120m", dim=896, layers=12, heads=14, batch_size=8, lr=4e-4, target=3.0, eval_windows=8),
    )
}
DEFAULT_PRESET = "10m"


def corpus_files() -> list[str]:
    """The stdlib's top-level source files, sorted: the whole corpus, in order."""
    stdlib = os.path.dirname(os.__file__)
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    if not files:
        raise FileNotFoundError(f"gpt corpus: no *.py files under {stdlib}")
    return files


@functools.lru_cache(maxsize=1)
def load_corpus() -> torch.Tensor:
    """The concatenated files as a 1-D uint8 tensor of byte tokens (cached: one read per process)."""
    chunks = []
    for path in corpus_files():
        with open(path, "rb") as handle:
            chunks.append(handle.read())
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8)


class GPT(CharTransformer):
    """Byte embedding + learned positions, pre-norm causal blocks, final norm, tied head."""

    def __init__(self, dim: int, layers: int, heads: int, context: int = CONTEXT) -> None:
        super().__init__(dim, heads, layers, context, vocab_size=VOCAB_SIZE, tied=True)
        # GPT-2's scaled init of the residual projections keeps deep stacks stable.
        for block in self.blocks:
            for projection in (block.attn.proj, block.mlp[2]):
                nn.init.normal_(projection.weight, std=0.02 / (2 * layers) ** 0.5)


def param_count(preset: GptPreset, context: int = CONTEXT) -> int:
    """Parameters of a preset's model, by formula (no allocation)."""
    d = preset.dim
    per_block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    return VOCAB_SIZE * d + context * d + preset.layers * per_block + 2 * d


def get_preset(name: str) -> GptPreset:
    if name not in PRESETS:
        raise ValueError(f"gpt preset {name!r} is not one of {', '.join(PRESETS)}")
    return PRESETS[name]


def model_factory(preset: GptPreset):
    return lambda: GPT(preset.dim, preset.layers, preset.heads)


def build_task_for(preset_name: str, name: str | None = None) -> Task:
    """The gpt task at one preset size (named `name`, default gpt-<preset>); the text (hence the data) is fixed."""
    preset = get_preset(preset_name)
    tokens = load_corpus()
    cut = split_point(len(tokens))
    factory = model_factory(preset)
    return Task(
        name=name or f"gpt-{preset.name}",
        build_model=lambda seed: seeded_build(factory, seed),
        train=windows(tokens, window_starts(0, cut, CONTEXT), CONTEXT),
        heldout=windows(tokens, eval_starts(len(tokens), preset.eval_windows, CONTEXT), CONTEXT),
        loss_fn=byte_loss,
        metric_name="loss",
        higher_is_better=False,
        default_target=preset.target,
        default_batch_size=preset.batch_size,
        default_lr=preset.lr,
        default_optimizer="adamw",
        default_momentum=0.9,
        eval_batch_size=16,
    )


def byte_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-byte cross-entropy in nats (perplexity = exp of it)."""
    return sequence_loss(logits, targets.long())


def build_task_1m() -> Task:
    return build_task_for("1m")


def build_task_10m() -> Task:
    return build_task_for("10m", name="gpt")  # the default size: plain `gpt`


def build_task_50m() -> Task:
    return build_task_for("50m")


def build_task_120m() -> Task:
    return build_task_for("120m")
