"""The real-size tasks: gpt presets and resnet build the models they claim, deterministically."""

from __future__ import annotations

import pytest
import torch

from star.tasks import TASK_NAMES, TaskSpecError, get_task
from star.tasks import gpt, resnet
from star.tasks.registry import PRESET_SPECS

NOMINAL = {"1m": 1e6, "10m": 10e6, "50m": 50e6, "120m": 120e6}


@pytest.mark.parametrize("name", list(gpt.PRESETS))
def test_gpt_preset_has_its_nominal_size_counted_on_the_meta_device(name):
    preset = gpt.PRESETS[name]
    with torch.device("meta"):  # no memory: 120M parameters would be 480 MB
        model = gpt.GPT(preset.dim, preset.layers, preset.heads)
    counted = sum(p.numel() for p in model.parameters())
    assert counted == gpt.param_count(preset)
    assert 0.9 * NOMINAL[name] <= counted <= 1.1 * NOMINAL[name]
    assert f"gpt-{name}" in set(PRESET_SPECS) | set(TASK_NAMES)


def test_plain_gpt_is_the_10m_preset():
    task = get_task("gpt")
    assert task.name == "gpt"
    assert task.default_target == gpt.PRESETS["10m"].target
    assert task.heldout.inputs.shape[0] == gpt.PRESETS["10m"].eval_windows


def test_gpt_head_is_tied_to_the_token_embedding_and_predicts_every_position():
    task = get_task("gpt-1m")
    model = task.build_model(0)
    logits = model(task.train.inputs[:2])
    assert logits.shape == (2, gpt.CONTEXT, gpt.VOCAB_SIZE)
    names = [n for n, _ in model.named_parameters()]
    assert not any(n.startswith("head") for n in names)  # the output projection is tokens.weight itself
    assert sum(p.numel() for p in model.parameters()) == gpt.param_count(gpt.PRESETS["1m"])


def _first_loss(name: str, seed: int) -> torch.Tensor:
    task = get_task(name)
    model = task.build_model(seed)
    inputs, targets = task.train.inputs[:2], task.train.targets[:2]
    return task.loss_fn(model(inputs), targets).detach()


@pytest.mark.parametrize("name", ["gpt-1m", "resnet"])
def test_same_seed_gives_the_same_first_loss_bit_for_bit(name):
    torch.set_num_threads(1)
    first, again, other = _first_loss(name, 3), _first_loss(name, 3), _first_loss(name, 4)
    assert torch.equal(first, again)
    if name.startswith("gpt"):  # resnet's zero-initialised head makes every seed's first loss ln(10)
        assert not torch.equal(first, other)


def test_gpt_corpus_is_stdlib_source_and_heldout_windows_come_after_training_text():
    tokens = gpt.load_corpus()
    assert tokens.dtype == torch.uint8 and len(tokens) > 2_000_000  # "a few MB"
    task = get_task("gpt-1m")
    train_end = gpt.split_point(len(tokens))
    heldout_first = gpt.eval_starts(len(tokens), gpt.PRESETS["1m"].eval_windows, gpt.CONTEXT)[0]
    assert heldout_first >= train_end
    assert torch.equal(task.train.targets[0, :-1], task.train.inputs[0, 1:])  # next-byte targets
    assert task.heldout.inputs.shape == (gpt.PRESETS["1m"].eval_windows, gpt.CONTEXT)


def test_unknown_gpt_preset_is_refused_naming_it():
    with pytest.raises(ValueError, match="'7m'"):
        gpt.get_preset("7m")
    with pytest.raises(TaskSpecError, match="gpt-7m"):
        get_task("gpt-7m")


def test_resnet_is_resnet18_sized_and_takes_uint8_images():
    model = resnet.build_model(0)
    assert 11.0e6 < sum(p.numel() for p in model.parameters()) < 11.3e6
    assert not list(model.buffers())  # GroupNorm: nothing the PSs would not aggregate
    images = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    assert model(images).shape == (2, resnet.NUM_CLASSES)


def test_resnet_images_are_a_deterministic_function_of_the_data_seed():
    def draw(seed: int):
        generator = torch.Generator().manual_seed(seed)
        return resnet.generate(40, generator, resnet.class_textures(generator))

    first, again, other = draw(0), draw(0), draw(1)
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.targets, again.targets)
    assert not torch.equal(first.inputs, other.inputs)
    assert first.inputs.shape == (40, 3, 32, 32) and first.inputs.dtype == torch.uint8
    assert torch.bincount(first.targets, minlength=resnet.NUM_CLASSES).tolist() == [4] * resnet.NUM_CLASSES

