"""Flat buffers: parameters and gradients are views; chunk codecs round-trip and refuse bad pieces."""

from __future__ import annotations

import pytest
import torch

from star.flat import MAX_CHUNK_BYTES, ChunkAssembler, FlatError, FlatModel, shard_ranges, tensor_chunks, write_chunk


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))


def test_parameters_become_views_of_one_flat_buffer():
    model = _model()
    expected = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    flat = FlatModel(model)
    assert torch.equal(flat.params, expected)
    flat.params.fill_(0.5)
    assert all(bool((p == 0.5).all()) for p in model.parameters())


def test_backward_accumulates_into_the_flat_gradient_buffer():
    model = _model()
    flat = FlatModel(model)
    for _ in range(2):
        flat.zero_grad()
        model(torch.randn(4, 5)).sum().backward()
        assert flat.grads_are_views()
        assert torch.equal(flat.grads, torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        assert flat.grads.abs().sum() > 0


def test_non_float32_parameters_are_refused_naming_the_parameter():
    model = torch.nn.Linear(2, 2).double()
    with pytest.raises(FlatError, match="weight"):
        FlatModel(model)


@pytest.mark.parametrize("numel, shards", [(10, 1), (10, 3), (7, 7), (1_000_003, 4)])
def test_shard_ranges_are_contiguous_balanced_and_cover_everything(numel, shards):
    ranges = shard_ranges(numel, shards)
    assert ranges[0].start == 0 and ranges[-1].end == numel
    assert all(a.end == b.start for a, b in zip(ranges, ranges[1:]))
    assert max(r.numel for r in ranges) - min(r.numel for r in ranges) <= 1


@pytest.mark.parametrize("numel, shards", [(0, 1), (3, 4), (5, 0)])
def test_impossible_shard_layouts_are_refused(numel, shards):
    with pytest.raises(FlatError):
        shard_ranges(numel, shards)


@pytest.mark.parametrize("numel, chunk_bytes", [(1, 4), (10, 8), (10, 40), (1000, 4096), (3 * 1024 * 1024 // 4 + 3, MAX_CHUNK_BYTES)])
def test_chunks_round_trip_through_the_assembler(numel, chunk_bytes):
    values = torch.randn(numel)
    chunks = tensor_chunks(values, chunk_bytes)
    assert all(len(data) <= chunk_bytes for _, data in chunks)
    assembler = ChunkAssembler(numel, chunk_bytes)
    for offset, data in chunks:
        assembler.add(offset, data)
    assert torch.equal(assembler.finish(), values)


def test_write_chunk_places_bytes_at_the_element_offset():
    out = torch.zeros(6)
    write_chunk(out, 2, torch.tensor([1.0, 2.0]).numpy().tobytes())
    assert out.tolist() == [0, 0, 1, 2, 0, 0]


@pytest.mark.parametrize(
    "pieces, message",
    [
        ([(0, b"\x00" * 20)], "exceeds"),
        ([(0, b"\x00" * 6)], "multiple of 4"),
        ([(1, b"\x00" * 4)], "does not follow"),
        ([(0, b"\x00" * 8), (0, b"\x00" * 8)], "does not follow"),
        ([(0, b"\x00" * 16), (4, b"\x00" * 16)], "runs past"),
    ],
)
def test_assembler_refuses_bad_chunks(pieces, message):
    assembler = ChunkAssembler(6, max_chunk_bytes=16)
    with pytest.raises(FlatError, match=message):
        for offset, data in pieces:
            assembler.add(offset, data)


def test_assembler_refuses_a_short_payload():
    assembler = ChunkAssembler(4)
    assembler.add(0, b"\x00" * 8)
    with pytest.raises(FlatError, match="expected the shard length"):
        assembler.finish()


def test_backward_writes_into_a_rebound_gradient_buffer_in_place():
    model = _model()
    flat = FlatModel(model)
    buffer = torch.full((flat.numel,), float("nan"))  # stands for a shared-memory segment
    flat.rebind_grads(buffer)
    assert flat.grads.data_ptr() == buffer.data_ptr() and not bool(buffer.isnan().any())  # the old values moved over
    flat.zero_grad()
    model(torch.randn(4, 5)).sum().backward()
    assert flat.grads_are_views()
    assert torch.equal(buffer, torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    assert buffer.abs().sum() > 0


def test_a_gradient_buffer_of_the_wrong_size_is_refused():
    flat = FlatModel(_model())
    with pytest.raises(FlatError, match=f"does not fit {flat.numel} float32"):
        flat.rebind_grads(torch.zeros(flat.numel + 1))
