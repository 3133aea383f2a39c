"""Built-in tasks honour the Task contract; sharding and spec loading behave."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from star.tasks import (
    TASK_NAMES,
    BatchStream,
    Task,
    TaskData,
    TaskSpecError,
    get_task,
    shard_indices,
)
from star.tasks import calibrate, charlm, digits, synthetic
from star.tasks.base import seeded_build


@pytest.fixture
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


# --- user tasks loaded by spec --------------------------------------------------------------

def tiny_task() -> Task:
    generator = torch.Generator().manual_seed(7)
    inputs = torch.randn(96, 4, generator=generator)
    targets = (inputs[:, 0] + 0.5 * inputs[:, 1] > 0).long()
    data = TaskData(inputs, targets)
    return Task(
        name="tiny",
        build_model=lambda seed: seeded_build(lambda: nn.Linear(4, 2), seed),
        train=data,
        heldout=data,
        loss_fn=F.cross_entropy,
        metric_name="accuracy",
        higher_is_better=True,
        default_target=0.9,
        default_batch_size=8,
        default_lr=0.1,
        default_optimizer="sgd",
        default_momentum=0.9,
    )


def tiny_task_seeded(data_seed: int) -> Task:
    return dataclasses.replace(tiny_task(), name=f"tiny-{data_seed}")


def not_a_task():
    return 42


NOT_CALLABLE = "digits"


# --- the contract, for every built-in task --------------------------------------------------

@pytest.mark.parametrize("name", TASK_NAMES)
def test_build_model_is_deterministic_per_seed(name):
    task = get_task(name)
    rng_before = torch.get_rng_state()
    first, again, other = (_params(task.build_model(s)) for s in (3, 3, 4))
    assert torch.equal(torch.get_rng_state(), rng_before), "build_model must not consume global RNG"
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert any(not torch.equal(a, b) for a, b in zip(first, other))


@pytest.mark.parametrize("name", TASK_NAMES)
def test_parameters_are_float32(name):
    model = get_task(name).build_model(0)
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize("name", TASK_NAMES)
@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16"])
def test_forward_backward_gives_finite_loss_and_grads(name, amp):
    task = get_task(name)
    model = task.build_model(0)
    inputs, targets = task.train.inputs[:4], task.train.targets[:4]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        loss = task.loss_fn(model(inputs), targets)
    assert loss.dim() == 0 and math.isfinite(loss.item())
    loss.backward()
    for param in model.parameters():
        assert param.grad is not None and param.grad.shape == param.shape
        assert torch.isfinite(param.grad).all()


@pytest.mark.parametrize("name", TASK_NAMES)
def test_evaluate_returns_metric_in_range_and_restores_mode(name):
    task = get_task(name)
    model = task.build_model(0)
    metric = task.evaluate(model)
    assert isinstance(metric, float)
    if task.metric_name == "accuracy":
        assert 0.0 <= metric <= 1.0
    else:
        assert 0.0 < metric < 2 * math.log(charlm.VOCAB_SIZE)
    assert model.training
    model.eval()
    task.evaluate(model)
    assert not model.training


@pytest.mark.parametrize("name", TASK_NAMES)
def test_reached_respects_direction(name):
    task = get_task(name)
    better, worse = (1.0, 0.5) if task.higher_is_better else (0.5, 1.0)
    assert task.reached(better, 0.75)
    assert not task.reached(worse, 0.75)
    assert task.reached(0.75, 0.75)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_defaults_are_sane(name):
    task = get_task(name)
    assert task.name == name
    assert len(task.train) >= 4 * task.default_batch_size
    assert task.default_optimizer in ("sgd", "adam", "adamw")
    assert task.metric_name in ("accuracy", "loss")


def test_get_task_caches_per_spec():
    assert get_task("digits") is get_task("digits", data_seed=0) is get_task("digits", 0)
    assert get_task("digits", data_seed=1) is not get_task("digits")


@pytest.mark.parametrize(
    "field, value",
    [("metric_name", "f1"), ("default_optimizer", "lion"), ("default_batch_size", 0), ("default_lr", 0.0)],
)
def test_task_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(tiny_task(), **{field: value})


def test_taskdata_rejects_mismatched_rows():
    with pytest.raises(ValueError, match="targets"):
        TaskData(torch.zeros(3, 2), torch.zeros(4))


# --- held-out data never overlaps training data ---------------------------------------------

def test_digits_split_is_disjoint_stratified_and_used():
    images, labels = digits.load_arrays()
    train, heldout = digits.split_indices(labels, 0)
    assert len(set(train) & set(heldout)) == 0
    assert len(train) + len(heldout) == len(labels) == 1797
    assert 0.18 < len(heldout) / len(labels) < 0.22
    held_counts = torch.bincount(torch.from_numpy(labels[heldout]), minlength=10)
    assert held_counts.min() >= 30
    task = get_task("digits")
    standardised = digits.standardise(images, train)
    assert torch.equal(task.train.inputs, torch.from_numpy(standardised[train]))
    assert torch.equal(task.heldout.inputs, torch.from_numpy(standardised[heldout]))
    assert torch.equal(task.heldout.targets, torch.from_numpy(labels[heldout]))
    assert task.train.inputs.shape[1:] == (1, 8, 8)


def test_digits_inputs_are_standardised_with_the_training_split_alone():
    """The held-out images must not leak into the statistics the inputs are scaled by."""
    images, labels = digits.load_arrays()
    train, heldout = digits.split_indices(labels, 0)
    task = get_task("digits")
    assert abs(float(task.train.inputs.mean())) < 1e-4
    assert abs(float(task.train.inputs.std()) - 1.0) < 1e-3
    changed_heldout = images.copy()
    changed_heldout[heldout] = 1.0
    assert np.array_equal(digits.standardise(changed_heldout, train)[train], digits.standardise(images, train)[train])


def test_charlm_heldout_windows_lie_after_training_text():
    tokens = charlm.load_corpus()
    cut = charlm.split_point(len(tokens))
    train_starts = charlm.window_starts(0, cut)
    held_starts = charlm.eval_starts(len(tokens))
    assert train_starts.max() + charlm.CONTEXT < cut  # last target position is before the cut
    assert held_starts.min() >= cut
    task = get_task("charlm")
    assert torch.equal(task.train.inputs, tokens[train_starts[:, None] + torch.arange(charlm.CONTEXT)])
    assert torch.equal(task.train.targets[:, :-1], task.train.inputs[:, 1:])
    assert torch.equal(task.heldout.inputs[:, 0], tokens[held_starts])
    assert int(task.train.inputs.max()) < charlm.VOCAB_SIZE
    assert len(task.heldout) == charlm.EVAL_WINDOWS


def test_synthetic_data_is_reproducible_and_balanced():
    train, heldout = synthetic.generate(0)
    again, _ = synthetic.generate(0)
    other, _ = synthetic.generate(1)
    assert torch.equal(train.inputs, again.inputs) and torch.equal(train.targets, again.targets)
    assert not torch.equal(train.inputs, other.inputs)
    counts = torch.bincount(train.targets, minlength=synthetic.NUM_CLASSES)
    assert counts.min() > 0.03 * len(train)
    assert len(heldout) == synthetic.HELDOUT_SAMPLES


# --- sharding and batching ------------------------------------------------------------------

def _numbered(rows: int = 103) -> TaskData:
    return TaskData(torch.arange(rows).float()[:, None], torch.arange(rows))


@pytest.mark.parametrize("num_workers", [1, 3, 4])
def test_shards_are_disjoint_and_cover_all_rows(num_workers):
    shards = [shard_indices(103, w, num_workers) for w in range(num_workers)]
    merged = torch.cat(shards).sort().values
    assert torch.equal(merged, torch.arange(103))
    assert torch.equal(shards[-1][:2], torch.tensor([num_workers - 1, 2 * num_workers - 1]))


@pytest.mark.parametrize("worker_id, num_workers", [(-1, 2), (2, 2), (0, 0)])
def test_shard_indices_rejects_bad_ids(worker_id, num_workers):
    with pytest.raises(ValueError, match="worker_id|num_workers"):
        shard_indices(10, worker_id, num_workers)


def test_batch_stream_honours_changing_batch_sizes_and_covers_shard_each_epoch():
    stream = BatchStream(_numbered(), worker_id=1, num_workers=4, seed=5)
    shard = set(stream.shard.tolist())
    seen = []
    for size in [5, 1, 7, 3, 10]:  # 26 = shard size
        inputs, targets = stream.next_batch(size)
        assert inputs.shape == (size, 1) and targets.shape == (size,)
        assert torch.equal(inputs[:, 0].long(), targets)
        seen += targets.tolist()
    assert sorted(seen) == sorted(shard)
    assert stream.epoch == 0
    _, targets = stream.next_batch(40)  # spans two epoch boundaries
    assert len(targets) == 40 and set(targets.tolist()) <= shard
    assert stream.epoch == 2


def test_batch_stream_reshuffles_deterministically():
    def epochs(seed: int) -> list[list[int]]:
        stream = BatchStream(_numbered(), worker_id=0, num_workers=2, seed=seed)
        return [stream.next_indices(52).tolist() for _ in range(3)]

    first = epochs(9)
    assert first == epochs(9)
    assert first != epochs(10)
    assert first[0] != first[1] and sorted(first[0]) == sorted(first[1])


def test_batch_stream_rejects_bad_batch_sizes_and_empty_shards():
    stream = BatchStream(_numbered(), worker_id=0, num_workers=1)
    for bad in (0, -3, 2.0):
        with pytest.raises(ValueError, match="batch_size"):
            stream.next_batch(bad)
    with pytest.raises(ValueError, match="worker_id"):
        BatchStream(_numbered(3), worker_id=3, num_workers=4)


# --- task specs -----------------------------------------------------------------------------

def test_user_task_spec_loads():
    task = get_task(f"{__name__}:tiny_task")
    assert task.name == "tiny"
    assert get_task(f"{__name__}:tiny_task_seeded", data_seed=3).name == "tiny-3"


@pytest.mark.parametrize(
    "spec",
    [
        "no-such-task",
        "",
        "star_no_such_module_xyz:make",
        f"{__name__}:missing_function",
        f"{__name__}:not_a_task",
        f"{__name__}:NOT_CALLABLE",
        ":tiny_task",
        f"{__name__}:",
    ],
)
def test_bad_task_specs_raise_naming_task(spec):
    with pytest.raises(TaskSpecError, match="task"):
        get_task(spec)


def raises_inside() -> Task:
    raise RuntimeError("boom inside the factory")


def test_a_factory_that_raises_is_a_bad_task_in_one_line_naming_it_and_its_error():
    """Before, the user's exception reached `star launch` as a traceback (exit 1)."""
    with pytest.raises(TaskSpecError, match=r"raises_inside\(\) raised RuntimeError: boom inside the factory"):
        get_task(f"{__name__}:raises_inside")


def test_a_task_module_with_a_syntax_error_is_a_bad_task(tmp_path, monkeypatch):
    (tmp_path / "star_broken_task_mod.py").write_text("def build(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TaskSpecError, match="cannot import module 'star_broken_task_mod'"):
        get_task("star_broken_task_mod:build")


def test_non_int_data_seed_raises_naming_task():
    with pytest.raises(TaskSpecError, match="task"):
        get_task("digits", data_seed="0")


def test_simulate_reaches_target_on_tiny_task():
    result = calibrate.simulate(tiny_task(), workers=2, max_steps=100, eval_every=5)
    assert result.steps_to_target is not None


# --- a real, short training run -------------------------------------------------------------

def test_digits_trains_to_90_percent(one_thread):
    task = get_task("digits")
    result = calibrate.simulate(task, workers=1, max_steps=200, eval_every=25, lr=0.005, target=0.9)
    assert result.steps_to_target is not None, result.history
