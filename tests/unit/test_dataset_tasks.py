"""Tasks whose data is a map-style Dataset: each worker's DataLoader reads only its shard, reshuffled
per epoch, at the batch size asked for; evaluation reads a held-out Dataset; bad data is refused."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset

from star.tasks import Task, TaskData, TaskSpecError, get_task
from star.tasks.dataset import DatasetStream, ShardBatchSampler, batch_stream, epoch_order
from star.tasks.sharding import BatchStream


class LazySquares(Dataset):
    """Ten million samples built on demand (never materialised); records which indices were read."""

    def __init__(self, size: int = 10**7):
        self.size, self.read = size, []

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        self.read.append(index)
        return torch.tensor([float(index)]), index % 2


def _task(train, heldout=None, **extra) -> Task:
    return Task(name="lazy", build_model=lambda seed: torch.nn.Linear(1, 2), train=train,
                heldout=heldout if heldout is not None else train, loss_fn=torch.nn.functional.cross_entropy,
                metric_name="accuracy", higher_is_better=True, default_target=0.5, default_batch_size=4, default_lr=0.1,
                default_optimizer="sgd", default_momentum=0.0, **extra)


def test_a_worker_reads_only_its_own_shard_of_a_dataset_far_larger_than_memory():
    data = LazySquares()
    stream = batch_stream(_task(data), worker_id=2, num_workers=3, seed=0, batch_size=8)
    assert isinstance(stream, DatasetStream)
    inputs, targets = stream.next_batch(8)
    assert inputs.shape == (8, 1) and targets.shape == (8,)
    assert len(data.read) == 8 and all(i % 3 == 2 for i in data.read)  # only the 8 samples asked for, all of shard 2


def test_each_epoch_visits_the_whole_shard_in_a_new_order_keyed_by_worker_and_epoch():
    sampler = ShardBatchSampler(num_samples=20, worker_id=1, num_workers=2, seed=7, batch_size=5)
    batches = iter(sampler)
    first = [i for _ in range(2) for i in next(batches)]
    second = [i for _ in range(2) for i in next(batches)]
    assert sorted(first) == sorted(second) == list(range(1, 20, 2))
    assert first != second and sampler.epoch == 1
    assert torch.equal(epoch_order(torch.arange(10), 7, 1, 0), epoch_order(torch.arange(10), 7, 1, 0))
    assert not torch.equal(epoch_order(torch.arange(10), 7, 1, 0), epoch_order(torch.arange(10), 7, 2, 0))


def test_a_live_batch_size_change_takes_effect_and_a_batch_crossing_an_epoch_is_completed():
    stream = DatasetStream(LazySquares(6), worker_id=0, num_workers=1, seed=0, batch_size=4)
    assert len(stream.next_batch(4)[0]) == 4
    assert len(stream.next_batch(2)[0]) in (2, 4)  # at most one batch was drawn ahead at the old size
    sizes = [len(stream.next_batch(5)[0]) for _ in range(3)]
    assert sizes[-1] == 5 and stream.epoch >= 1


def test_loader_worker_processes_and_a_collate_function_are_passed_through():
    def collate(samples):
        return torch.stack([x for x, _ in samples]) * 10, torch.tensor([y for _, y in samples])

    stream = batch_stream(_task(LazySquares(40), collate_fn=collate, loader_workers=2), 0, 2, 0, 4)
    assert stream.loader.num_workers == 2
    inputs, _ = stream.next_batch(4)
    assert all(int(v) % 20 == 0 for v in inputs.flatten())  # even indices (shard 0 of 2), times 10


def test_evaluation_reads_a_held_out_dataset_in_batches():
    class Exact(torch.nn.Module):
        def forward(self, x):  # predicts index % 2 perfectly
            odd = (x[:, 0] % 2).unsqueeze(1)
            return torch.cat([1 - odd, odd], dim=1)

    assert _task(LazySquares(10), heldout=LazySquares(9), eval_batch_size=4).evaluate(Exact()) == 1.0


def test_in_memory_tasks_keep_their_batch_stream():
    data = TaskData(torch.arange(8.0).unsqueeze(1), torch.arange(8) % 2)
    assert isinstance(batch_stream(_task(data), 0, 2, 0, 2), BatchStream)


def test_a_task_whose_data_is_neither_tensors_nor_a_map_style_dataset_is_refused_naming_the_field():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(())

    for bad in ([1, 2, 3], Stream(), (torch.zeros(3), torch.zeros(3))):
        with pytest.raises(TypeError, match=r"Task\.train must be a TaskData .* or a map-style torch\.utils\.data\.Dataset"):
            _task(bad, heldout=TaskData(torch.zeros(2, 1), torch.zeros(2)))


def test_a_dataset_that_does_not_collate_to_inputs_and_targets_is_refused_clearly():
    class Triples(LazySquares):
        def __getitem__(self, index):
            return torch.zeros(1), 0, "extra"

    with pytest.raises(TypeError, match=r"must collate to \(inputs, targets\), got list of 3 items"):
        batch_stream(_task(Triples(10)), 0, 1, 0, 2).next_batch(2)


def test_the_own_model_example_loads_as_a_user_task(monkeypatch):
    monkeypatch.syspath_prepend("examples/own_model")
    task = get_task("own_task:build_task")
    assert len(task.train) == 10_000_000 and task.metric_name == "accuracy"
    inputs, targets = batch_stream(task, 0, 4, 0, 16).next_batch(16)
    assert inputs.shape == (16, 32) and targets.dtype == torch.int64
    with pytest.raises(TaskSpecError, match="returned"):
        get_task("own_task:build_model")  # a function returning a model, not a Task


def test_calibration_times_the_steps_of_a_dataset_task(monkeypatch):
    """`star calibrate` timed steps through the in-memory batch stream only, so a Dataset task failed there."""
    from star.sim.calibrate import amp_factor, resize_cost_ratio

    monkeypatch.syspath_prepend("examples/own_model")
    assert 0.0 < amp_factor("own_task:build_task") < 10.0
    assert resize_cost_ratio("own_task:build_task", 16, changes=2, repeats=3) >= 0.0
