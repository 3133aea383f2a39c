"""The CUDA paths, end to end: STAR workers and DDP ranks on a GPU, and fp16 autocast with loss
scaling. Skipped where torch sees no CUDA device (CI never has one); run on a GPU machine."""

from __future__ import annotations

import json

import psutil
import pytest
import torch

from star.config import JobConfig, from_dict
from star.flat import FlatModel
from star.launch import launch
from star.tasks import get_task
from star.worker.amp import AmpSwitch

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _events(out) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def test_star_workers_on_cuda_reach_a_tiny_gpt_target(tmp_path):
    config = from_dict(JobConfig, {"task": "gpt-1m", "workers": 2, "ps": 1, "out": str(tmp_path), "max_time_s": 90.0,
                                   "batch_size": 4, "target": 3.6, "plan": {"mode": "ssgd"}, "device": "cuda"})
    result = launch(config)
    assert result["reached"], f"final {result['final_metric']} after {result['train_s']} s"
    assert result["best_metric"] <= 3.6
    log = (tmp_path / "logs" / "worker0.log").read_text()
    assert "cuda" in (tmp_path / "config.toml").read_text() and "Traceback" not in log


def test_ddp_ranks_sharing_the_gpus_reach_a_tiny_gpt_target(tmp_path):
    config = from_dict(JobConfig, {"task": "gpt-1m", "workers": 2, "out": str(tmp_path), "max_time_s": 90.0,
                                   "batch_size": 4, "target": 3.6, "plan": {"mode": "ddp"}, "device": "cuda"})
    result = launch(config)
    assert result["mode"] == "ddp" and result["reached"], f"final {result['final_metric']}"
    start = next(e for e in _events(tmp_path) if e["kind"] == "ddp_start")
    assert start["device"].startswith("cuda")
    assert start["backend"] == ("nccl" if torch.cuda.device_count() >= 2 else "gloo")
    assert not [p for p in psutil.Process().children(recursive=True) if "star.ddp_rank" in " ".join(p.cmdline())]


def test_fp16_autocast_with_loss_scaling_gives_the_fp32_gradient_and_recovers_from_overflow():
    task = get_task("gpt-1m")
    model = task.build_model(0).cuda()
    flat = FlatModel(model)
    inputs, targets = _batch(task)
    amp = AmpSwitch(torch.device("cuda"), enabled=False)
    flat.zero_grad()
    amp.backward(task.loss_fn(model(inputs), targets), flat.grads)
    reference = flat.grads.clone()
    amp.set(True)
    assert amp.scaler is not None and amp.dtype == torch.float16
    amp.scaler.scale = 2.0**100  # overflows fp16 for sure: the step must be refused and the scale lowered
    flat.zero_grad()
    with amp.autocast():
        loss = task.loss_fn(model(inputs), targets)
    assert not amp.backward(loss, flat.grads) and amp.scaler.scale == 2.0**99
    amp.scaler.scale = 2.0**12
    flat.zero_grad()
    with amp.autocast():
        loss = task.loss_fn(model(inputs), targets)
    assert amp.backward(loss, flat.grads)
    error = float((flat.grads - reference).norm() / reference.norm())
    assert error < 3e-2, error  # fp16 activations: about 1e-3..1e-2 from the fp32 gradient


def _batch(task):
    from star.tasks import BatchStream

    inputs, targets = BatchStream(task.train, 0, 1, seed=0).next_batch(4)
    return inputs.cuda(), targets.cuda()
