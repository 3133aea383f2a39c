"""Model <-> one flat buffer; shard ranges; raw-bytes chunk codecs.

Parameters and gradients live in one contiguous float32 buffer each, and every
`param.data` / `param.grad` is a view into it, so the hot path (push a gradient,
load pulled parameters) is a handful of memcpy-sized operations, not a per-tensor loop.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np
import torch

MAX_CHUNK_BYTES = 4 * 1024 * 1024  # the largest chunk a receiver accepts
# What senders cut payloads into. Smaller chunks let serialisation, the socket and the receiver's
# copy overlap (and keep each buffer under malloc's mmap threshold): 16 MiB push+pull on loopback
# measured ~40% faster at 512 KiB than at 4 MiB; below ~256 KiB per-message overhead dominates.
SEND_CHUNK_BYTES = 512 * 1024
WIRE_DTYPE = "float32"  # little-endian IEEE float32 on the wire (the default)
BF16_WIRE = "bfloat16"  # the bf16 wire option: half the bytes, round-to-nearest-even from float32
WIRE_ELEMENT_BYTES = {WIRE_DTYPE: 4, BF16_WIRE: 2}  # every dtype a payload may travel in


def wire_dtype(name: str) -> str:
    """The wire dtype called `name` ("" means float32); FlatError names an unknown one."""
    name = name or WIRE_DTYPE
    if name not in WIRE_ELEMENT_BYTES:
        raise FlatError(f"dtype {name!r} is not one of {sorted(WIRE_ELEMENT_BYTES)}")
    return name


class FlatError(ValueError):
    """A model or payload does not fit the flat-buffer layout; the message names the field."""


class FlatModel:
    """Rebinds a module's parameters (and their gradients) as views of two flat buffers."""

    def __init__(self, module: torch.nn.Module):
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise FlatError("model has no trainable parameters")
        for name, p in module.named_parameters():
            if p.requires_grad and p.dtype != torch.float32:
                raise FlatError(f"parameter {name} has dtype {p.dtype}; only float32 parameters are supported")
        self.module = module
        self.numel = sum(p.numel() for p in params)
        device = params[0].device
        self.params = torch.empty(self.numel, dtype=torch.float32, device=device)
        self.grads = torch.zeros(self.numel, dtype=torch.float32, device=device)
        offset = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                self.params[offset : offset + n].copy_(p.data.reshape(-1))
                p.data = self.params[offset : offset + n].view_as(p)
                p.grad = self.grads[offset : offset + n].view_as(p)
                offset += n
        self._params = params

    def rebind_grads(self, buffer: torch.Tensor) -> None:
        """Make `buffer` (e.g. a shared-memory segment, star/shm.py GradSegment) the flat gradient: every
        `param.grad` becomes a view of it, so backward writes the gradient there and a push copies nothing."""
        if buffer.numel() != self.numel or buffer.dtype != torch.float32 or buffer.device != self.grads.device:
            raise FlatError(f"gradient buffer of {buffer.numel()} {buffer.dtype} on {buffer.device} does not fit "
                            f"{self.numel} float32 on {self.grads.device}")
        buffer.copy_(self.grads)
        self.grads = buffer
        offset = 0
        for p in self._params:
            n = p.numel()
            p.grad = buffer[offset : offset + n].view_as(p)
            offset += n

    def zero_grad(self) -> None:
        """Zero in place: `optimizer.zero_grad(set_to_none=True)` would break the views."""
        self.grads.zero_()

    def grads_are_views(self) -> bool:
        """True while autograd still accumulates into the flat buffer (checked in tests)."""
        base = self.grads.untyped_storage().data_ptr()
        return all(p.grad is not None and p.grad.untyped_storage().data_ptr() == base for p in self._params)


@dataclass(frozen=True)
class ShardRange:
    """[start, end) in elements of the flat vector."""

    index: int
    start: int
    end: int

    @property
    def numel(self) -> int:
        return self.end - self.start


def shard_ranges(total_numel: int, num_shards: int) -> list[ShardRange]:
    """Contiguous ranges balanced by bytes (single dtype, so by element count)."""
    if total_numel <= 0:
        raise FlatError(f"total_numel must be > 0, got {total_numel}")
    if not 1 <= num_shards <= total_numel:
        raise FlatError(f"num_shards={num_shards} must be in 1..{total_numel}")
    base, extra = divmod(total_numel, num_shards)
    ranges, start = [], 0
    for i in range(num_shards):
        end = start + base + (1 if i < extra else 0)
        ranges.append(ShardRange(i, start, end))
        start = end
    return ranges


def tensor_chunks(tensor: torch.Tensor, max_chunk_bytes: int = SEND_CHUNK_BYTES, dtype: str = WIRE_DTYPE) -> list[tuple[int, bytes]]:
    """(element offset, raw bytes) pieces of at most max_chunk_bytes in wire `dtype`: one copy per byte
    (bfloat16: one rounding pass first)."""
    if dtype == BF16_WIRE:
        array = tensor.detach().to("cpu", torch.bfloat16).contiguous().view(torch.int16).numpy()
    else:
        array = tensor.detach().to("cpu", torch.float32).contiguous().numpy().astype("<f4", copy=False)
    step = max(1, max_chunk_bytes // WIRE_ELEMENT_BYTES[dtype])
    return [(start, array[start : start + step].tobytes()) for start in range(0, array.size, step)]


def write_chunk(out: torch.Tensor, offset: int, data: bytes, dtype: str = WIRE_DTYPE) -> None:
    """Copy one received chunk (raw `dtype` elements) into a float32 CPU tensor at an element offset."""
    count = len(data) // WIRE_ELEMENT_BYTES[dtype]
    if dtype == BF16_WIRE:
        out[offset : offset + count].copy_(torch.frombuffer(bytearray(data), dtype=torch.bfloat16))
    else:
        out[offset : offset + count].numpy()[:] = np.frombuffer(data, dtype="<f4")


class ChunkAssembler:
    """Reassembles chunks into a float32 tensor, checking that they tile [0, numel) exactly."""

    def __init__(self, numel: int, max_chunk_bytes: int = MAX_CHUNK_BYTES, dtype: str = WIRE_DTYPE):
        self.numel = numel
        self.max_chunk_bytes = max_chunk_bytes
        self.dtype = dtype
        self.element_bytes = WIRE_ELEMENT_BYTES[dtype]
        self.buffer = torch.empty(numel, dtype=torch.float32)
        self._covered = 0
        self._next_offset = 0

    def add(self, offset: int, data: bytes) -> None:
        if len(data) > self.max_chunk_bytes:
            raise FlatError(f"chunk of {len(data)} bytes exceeds the {self.max_chunk_bytes}-byte chunk limit")
        if len(data) == 0 or len(data) % self.element_bytes:
            raise FlatError(f"chunk length {len(data)} is not a positive multiple of {self.element_bytes} bytes ({self.dtype})")
        if offset != self._next_offset:
            raise FlatError(f"chunk offset {offset} does not follow the previous chunk (expected {self._next_offset})")
        count = len(data) // self.element_bytes
        if offset + count > self.numel:
            raise FlatError(f"chunk [{offset}, {offset + count}) runs past the shard length {self.numel}")
        write_chunk(self.buffer, offset, data, self.dtype)
        self._next_offset = offset + count
        self._covered += count

    def finish(self) -> torch.Tensor:
        if self._covered != self.numel:
            raise FlatError(f"received {self._covered} elements, expected the shard length {self.numel}")
        return self.buffer
