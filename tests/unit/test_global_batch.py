"""Batches cut from each round's global batch: without resizes they are exactly the workers' own
shard batches; resized batches that tile the global batch train on the same rows; offsets reach
every worker with a batch decision."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils.data import Dataset

from star.policy.batch import batch_offsets, directed_from_iteration, first_iteration_of_new_batches
from star.tasks import TaskData
from star.tasks.dataset import DatasetStream
from star.tasks.global_batch import ShardTape, round_slice
from star.tasks.sharding import BatchStream, shard_tape

SAMPLES, WORKERS, BASE = 203, 4, 16  # a shard of ~50 rows: rounds cross epochs every ~3 batches


def _data(n: int = SAMPLES) -> TaskData:
    return TaskData(torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.arange(n))


class Rows(Dataset):
    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int):
        return torch.tensor([float(index)]), index


def _streams(kind: str, seed: int = 3):
    if kind == "tensors":
        return [BatchStream(_data(), w, WORKERS, seed=seed) for w in range(WORKERS)]
    return [DatasetStream(Rows(), w, WORKERS, seed, BASE) for w in range(WORKERS)]


@pytest.mark.parametrize("kind", ["tensors", "dataset"])
def test_unresized_round_batches_are_exactly_each_workers_own_next_batches(kind):
    own, cut = _streams(kind), _streams(kind)
    for round_index in range(12):  # past several epochs of every shard
        for w in range(WORKERS):
            expected = own[w].next_batch(BASE)[1]
            got = cut[w].round_batch(round_index, w * BASE, BASE, BASE)[1]
            assert torch.equal(got, expected), (round_index, w)


@pytest.mark.parametrize("kind", ["tensors", "dataset"])
@pytest.mark.parametrize("sizes", [[5, 30, 21, 8], [1, 1, 1, 61], [64]])
def test_batches_that_tile_the_global_batch_train_on_the_same_rows_as_even_ones(kind, sizes):
    streams = _streams(kind)
    offsets = batch_offsets(dict(enumerate(sizes)))
    for round_index in (0, 4, 9):
        even = torch.cat([streams[w].round_batch(round_index, w * BASE, BASE, BASE)[1] for w in range(WORKERS)])
        resized = torch.cat([streams[w % WORKERS].round_batch(round_index, offsets[w], size, BASE)[1]
                             for w, size in enumerate(sizes)])
        assert Counter(resized.tolist()) == Counter(even.tolist())


def test_positions_past_the_global_batch_continue_into_the_next_round():
    tapes = [shard_tape(SAMPLES, j, WORKERS, 0) for j in range(WORKERS)]
    beyond = round_slice(tapes, 2, WORKERS * BASE, BASE, BASE)
    assert torch.equal(beyond, round_slice(tapes, 3, 0, BASE, BASE))


def test_a_tape_asked_for_an_epoch_it_dropped_replays_it_from_the_seed():
    tape = shard_tape(SAMPLES, 1, WORKERS, 5)
    first = tape.indices(0, 204)  # four epochs of a 51-row shard
    tape.indices(1000, 10)
    assert torch.equal(tape.indices(0, 204), first)
    shard_len = tape.shard_len
    for epoch in range(4):
        assert sorted(first[epoch * shard_len:(epoch + 1) * shard_len].tolist()) == list(range(1, SAMPLES, WORKERS))


def test_round_slice_refuses_bad_positions_naming_them():
    tapes = [ShardTape(lambda e: torch.arange(4), 4)]
    with pytest.raises(ValueError, match="offset >= 0"):
        round_slice(tapes, 0, -1, 2, 2)
    with pytest.raises(ValueError, match="shard_len"):
        ShardTape(lambda e: torch.arange(0), 0)


def test_offsets_are_the_sizes_of_the_workers_before_in_worker_order():
    assert batch_offsets({2: 10, 0: 30, 1: 20, 3: 4}) == {0: 0, 1: 30, 2: 50, 3: 60}
    assert batch_offsets({}) == {}


@pytest.mark.parametrize("pending_from, reported, furthest, expected", [
    (9, 7, 8, 9),  # pending, not reached: kept (moved on it would be 9 too)
    (9, 8, 9, 9),  # pending, not reached, the others past it: kept, not moved to 10
    (9, 9, 9, first_iteration_of_new_batches(9)),  # reached: in force, the new one starts after the furthest report
    (0, 0, 0, first_iteration_of_new_batches(0)),  # nothing directed yet
])
def test_a_pending_batch_directive_keeps_its_iteration_when_a_newer_one_replaces_it(pending_from, reported, furthest,
                                                                                    expected):
    assert directed_from_iteration(pending_from, reported, furthest) == expected


class _Link:
    def __init__(self, directives):
        self.latest = directives

    def directives(self):
        return self.latest


@pytest.fixture
def worker():
    """A worker built in this process and never run: closed here, or its shared gradient segment, named after this
    process, would stay in /dev/shm after the test run (no sweep takes a live process's segment)."""
    from star.worker.config import WorkerConfig
    from star.worker.worker import Worker

    with Worker(WorkerConfig(worker_id=1, workers=4, task="digits")) as built:
        yield built


def test_a_worker_takes_bigger_batches_from_the_named_iteration_not_when_the_directive_arrives(worker):
    from star.rpc import star_pb2 as pb

    base = worker.batch_size
    worker.iteration = 3
    link = _Link(pb.Directives(batch_size=100, batch_offset=base, batch_from_iteration=5))
    worker._obey(link)
    worker._compute()  # iteration 3: still the old batch, from its own shard
    assert (worker.batch_size, worker.batch_offset) == (base, None)
    worker.iteration = 5
    worker._obey(link)  # the same directive read again changes nothing
    worker._compute()
    assert (worker.batch_size, worker.batch_offset) == (100, base)
    link.latest = pb.Directives(batch_size=100, batch_offset=base, batch_from_iteration=5)
    worker._obey(link)  # already in force: nothing pending
    assert worker.pending_batches == []
    link.latest = pb.Directives(batch_size=130, batch_offset=10, batch_from_iteration=2)  # arrived late: at once
    worker._obey(link)
    worker._compute()
    assert (worker.batch_size, worker.batch_offset) == (130, 10)


@pytest.mark.parametrize("at_once", [True, False])
def test_a_cut_marked_at_once_starts_as_the_first_samples_of_the_old_batch_and_moves_when_due(at_once, worker):
    """The straggler whose report woke the decision need not wait for the iteration all workers switch at: the samples
    it computes before then are the head of the slice it had, so no sample of that round is computed twice. A cut
    not so marked (the control) waits like any other change."""
    from star.rpc import star_pb2 as pb

    base = worker.batch_size
    worker.batch_offset, worker.iteration = 64, 3  # tiled: the second slice of each round's global batch
    link = _Link(pb.Directives(batch_size=20, batch_offset=0, batch_from_iteration=5, cut_at_once=at_once))
    worker._obey(link)
    worker._compute()  # iteration 3: 20 samples at offset 64 if at once, else still the old batch
    assert (worker.batch_size, worker.batch_offset) == ((20, 64) if at_once else (base, 64))
    head, _ = worker.batches.round_batch(3, 64, 20, base)
    whole, _ = worker.batches.round_batch(3, 64, base, base)
    assert torch.equal(head, whole[:20])
    if at_once:  # the cut's 20 samples stand for the whole place of 64: its gradient is weighted as that place
        assert worker.placed_batch == base
        worker.flat.grads.fill_(1.0)
        worker._weigh()
        assert torch.all(worker.flat.grads == 1.0)
    worker.iteration = 5
    worker._obey(link)
    worker._compute()
    assert (worker.batch_size, worker.batch_offset) == (20, 0) and worker.pending_batches == []
    assert worker.placed_batch == 20  # its own place from now on, weighted as such
    worker.flat.grads.fill_(1.0)
    worker._weigh()
    assert torch.all(worker.flat.grads == 20 / base)


def test_a_straggler_cut_twice_in_a_row_keeps_its_first_placement_for_the_round_the_others_tiled_with_it(worker):
    """Real mid3x, seed 1: the straggler, cut at once to 31 samples in iteration 12 with its place (offset 225) due
    at 13, got a second cut (22 samples, offset 234 from 14) before computing iteration 13. It used to drop the first
    placement and take 22 samples of its own shard in iteration 13, which the others had already tiled with its place
    at 225: that round missed 31 of its samples and took 22 of the round before. It now computes the head of the
    placement due at 13, and the second one from 14."""
    from star.rpc import star_pb2 as pb

    base = worker.batch_size
    worker.iteration = 12
    link = _Link(pb.Directives(batch_size=31, batch_offset=225, batch_from_iteration=13, cut_at_once=True))
    worker._obey(link)
    worker._compute()  # iteration 12: cut at once, still its own shard's batch
    assert (worker.batch_size, worker.batch_offset) == (31, None)
    worker.iteration = 13
    link.latest = pb.Directives(batch_size=22, batch_offset=234, batch_from_iteration=14, cut_at_once=True)
    worker._obey(link)
    assert [(p.size, p.offset, p.from_iteration) for p in worker.pending_batches] == [(31, 225, 13), (22, 234, 14)]
    worker._compute()  # iteration 13: the first placement, cut to the second size
    assert (worker.batch_size, worker.batch_offset) == (22, 225)
    head, _ = worker.batches.round_batch(13, 225, 22, base)
    placed, _ = worker.batches.round_batch(13, 225, 31, base)
    assert torch.equal(head, placed[:22])
    worker.iteration = 14
    worker._obey(link)  # the same directive read again queues nothing new
    worker._compute()
    assert (worker.batch_size, worker.batch_offset) == (22, 234) and worker.pending_batches == []


def test_a_newer_directive_replaces_the_pending_ones_due_at_or_after_its_iteration(worker):
    from star.rpc import star_pb2 as pb

    worker.iteration = 3
    link = _Link(pb.Directives(batch_size=80, batch_offset=0, batch_from_iteration=5))
    worker._obey(link)
    link.latest = pb.Directives(batch_size=90, batch_offset=0, batch_from_iteration=5)  # same iteration: replaces
    worker._obey(link)
    assert [(p.size, p.from_iteration) for p in worker.pending_batches] == [(90, 5)]
    link.latest = pb.Directives(batch_size=70, batch_offset=0, batch_from_iteration=4)  # earlier: replaces the later one
    worker._obey(link)
    assert [(p.size, p.from_iteration) for p in worker.pending_batches] == [(70, 4)]
    link.latest = pb.Directives(batch_size=70, batch_offset=0, batch_from_iteration=6)  # what 4 puts in force already
    worker._obey(link)
    assert [(p.size, p.from_iteration) for p in worker.pending_batches] == [(70, 4)]
