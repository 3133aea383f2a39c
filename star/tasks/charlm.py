"""Character-level causal transformer on CPython's own standard-library source.

The text ships with every Python install, so the task needs no download and
every process reads the same bytes. Held-out text is the tail of the corpus,
so no held-out character ever appears in a training window.
"""

from __future__ import annotations

import os

import torch
from torch import nn
from torch.nn import functional as F

from star.tasks.base import Task, TaskData, seeded_build

# Sorted; all exist as plain modules or packages in CPython 3.11+.
MODULES = (
    "argparse",
    "contextlib",
    "dataclasses",
    "fractions",
    "functools",
    "heapq",
    "pprint",
    "random",
    "shutil",
    "statistics",
    "string",
    "textwrap",
)
VOCAB_SIZE = 128
OTHER_ID = 0  # non-ASCII bytes; NUL never occurs in source text
CONTEXT = 64
HELDOUT_FRACTION = 0.1
EVAL_WINDOWS = 256


def module_path(name: str) -> str:
    """Source file of a stdlib module, whether a plain module or a package."""
    stdlib = os.path.dirname(os.__file__)
    for candidate in (os.path.join(stdlib, name + ".py"), os.path.join(stdlib, name, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"charlm corpus module {name!r} not found under {stdlib}")


def load_corpus() -> torch.Tensor:
    """The concatenated sources as a 1-D tensor of token ids."""
    chunks = []
    for name in MODULES:
        with open(module_path(name), "rb") as handle:
            chunks.append(handle.read())
    raw = torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8).long()
    return torch.where(raw < VOCAB_SIZE, raw, torch.full_like(raw, OTHER_ID))


def window_starts(begin: int, end: int, context: int = CONTEXT) -> torch.Tensor:
    """Non-overlapping window offsets whose input+shifted target fit in [begin, end)."""
    return torch.arange(begin, end - context, context, dtype=torch.long)


def windows(tokens: torch.Tensor, starts: torch.Tensor, context: int = CONTEXT) -> TaskData:
    """Inputs tokens[s:s+ctx] and next-char targets tokens[s+1:s+ctx+1]."""
    offsets = starts[:, None] + torch.arange(context + 1)
    block = tokens[offsets]
    return TaskData(block[:, :-1].contiguous(), block[:, 1:].contiguous())


def split_point(num_tokens: int) -> int:
    """First held-out position: everything before it is training text."""
    return int(num_tokens * (1 - HELDOUT_FRACTION))


def eval_starts(tokens_len: int, count: int = EVAL_WINDOWS, context: int = CONTEXT) -> torch.Tensor:
    """A fixed, evenly spread subset of held-out windows, so evaluate stays fast."""
    starts = window_starts(split_point(tokens_len), tokens_len, context)
    if len(starts) <= count:
        return starts
    picks = torch.linspace(0, len(starts) - 1, count).round().long()
    return starts[picks]


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=-1)
        shape = (batch, length, self.heads, dim // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(attended.transpose(1, 2).reshape(batch, length, dim))


class Block(nn.Module):
    """Pre-norm transformer block."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class CharTransformer(nn.Module):
    """Token + learned position embeddings, causal blocks, per-position logits.

    tied: the output head is the token embedding itself (no separate head parameters).
    """

    def __init__(self, dim: int = 96, heads: int = 4, layers: int = 2, context: int = CONTEXT,
                 vocab_size: int = VOCAB_SIZE, tied: bool = False) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} must be divisible by heads {heads}")
        self.tokens = nn.Embedding(vocab_size, dim)
        self.positions = nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*(Block(dim, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(dim)
        self.head = None if tied else nn.Linear(dim, vocab_size)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.long()  # a corpus may be stored as uint8
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.blocks(self.tokens(ids) + self.positions(positions)))
        return x @ self.tokens.weight.t() if self.head is None else self.head(x)


def build_model(seed: int) -> nn.Module:
    return seeded_build(CharTransformer, seed)


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-character cross-entropy in nats."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def build_task(data_seed: int = 0) -> Task:
    """`data_seed` is accepted for interface symmetry; the text is fixed."""
    tokens = load_corpus()
    cut = split_point(len(tokens))
    return Task(
        name="charlm",
        build_model=build_model,
        train=windows(tokens, window_starts(0, cut)),
        heldout=windows(tokens, eval_starts(len(tokens))),
        loss_fn=sequence_loss,
        metric_name="loss",
        higher_is_better=False,
        default_target=2.0,
        default_batch_size=32,
        default_lr=3e-3,
        default_optimizer="adamw",
        default_momentum=0.9,
    )
