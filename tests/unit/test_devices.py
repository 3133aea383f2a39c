"""Which device each process computes on, the DDP backend that follows from it, and the refusals a job
on a device this host lacks gets before anything starts (exit 2, naming `device`)."""

from __future__ import annotations

import pytest
import torch

from star.cli import main
from star.config import ConfigError, JobConfig, from_dict
from star.ddp_rules import ddp_backend
from star.devices import check_device_available, process_device
from star.flat import FlatModel
from star.worker.config import WorkerConfig
from star.worker.staging import HostStaging

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a host without CUDA")


@pytest.mark.parametrize("index, gpus, expected", [(0, 1, "cuda:0"), (3, 1, "cuda:0"), (1, 2, "cuda:1"), (5, 4, "cuda:1")])
def test_cuda_processes_go_round_the_visible_gpus_by_index(index, gpus, expected):
    assert str(process_device("cuda", index, gpus)) == expected


def test_cpu_processes_all_compute_on_the_cpu_whatever_gpus_exist():
    assert {str(process_device("cpu", i, 8)) for i in range(4)} == {"cpu"}


def test_a_cuda_process_on_a_host_without_gpus_is_refused_naming_device():
    with pytest.raises(ConfigError, match="device='cuda'"):
        process_device("cuda", 0, 0)


@pytest.mark.parametrize("device, local_world, gpus, backend", [
    ("cpu", 4, 0, "gloo"), ("cpu", 4, 8, "gloo"),
    ("cuda", 4, 4, "nccl"), ("cuda", 2, 8, "nccl"),
    ("cuda", 4, 1, "gloo"),  # four ranks on one GPU: NCCL refuses a shared device
])
def test_ddp_uses_nccl_only_when_every_local_rank_has_its_own_gpu(device, local_world, gpus, backend):
    assert ddp_backend(device, local_world, gpus) == backend


@pytest.mark.parametrize("cls", [JobConfig, WorkerConfig])
def test_an_unknown_device_kind_is_refused_naming_the_field(cls):
    with pytest.raises(ConfigError, match="device='tpu'"):
        from_dict(cls, {"device": "tpu"})


def test_the_job_device_reaches_every_worker_config():
    from star.child_configs import worker_config

    job = from_dict(JobConfig, {"device": "cuda", "workers": 2})
    assert worker_config(job, worker_id=1, coordinator="127.0.0.1:1", relay_host="127.0.0.1").device == "cuda"


@needs_no_cuda
def test_a_cuda_job_without_cuda_is_refused_before_starting(tmp_path):
    with pytest.raises(ConfigError, match="device='cuda'.*no CUDA device"):
        check_device_available("device", "cuda")
    check_device_available("device", "cpu")


@needs_no_cuda
@pytest.mark.parametrize("mode", ["ssgd", "ddp"])
def test_cli_launch_on_cuda_without_cuda_exits_2_naming_device(mode, capsys, tmp_path):
    extra = ["--ps", "1"] if mode != "ddp" else []
    code = main(["launch", "--mode", mode, "--workers", "2", *extra, "--device", "cuda", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "device='cuda'" in err and "Traceback" not in err
    assert not (tmp_path / "logs").exists()  # refused before any process started


def test_host_staging_on_cpu_is_the_flat_buffers_themselves():
    flat = FlatModel(torch.nn.Linear(3, 2))
    staging = HostStaging(flat)
    assert staging.params is flat.params and staging.grads is flat.grads
    assert staging.params_down() is flat.params and staging.grads_down() is flat.grads


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_host_staging_on_cuda_moves_parameters_up_and_gradients_down_exactly():
    flat = FlatModel(torch.nn.Linear(64, 32).cuda())
    staging = HostStaging(flat)
    assert staging.params.is_pinned() and staging.params.device.type == "cpu"
    assert torch.equal(staging.params_down(), flat.params.cpu())
    pulled = torch.randn(flat.numel)
    staging.params.copy_(pulled)
    staging.params_up()
    assert torch.equal(flat.params.cpu(), pulled)
    flat.grads.copy_(torch.randn(flat.numel, device="cuda"))
    assert torch.equal(staging.grads_down(), flat.grads.cpu())
