"""Shard checkpoints: bit-exact round trips, atomic files, complete sets, safe loading."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from star.aggregate import Aggregator
from star.checkpoint import (
    CheckpointError, JobManifest, ShardCheckpoint, clear_checkpoints, latest_complete, latest_shard, load_shard, save_shard,
    write_manifest,
)
from star.plan import PlanError, asgd, kofn, plan_from_dict, plan_to_dict, ssgd


def _trained_shard(ps_index: int = 0, steps: int = 3, job_id: str = "job-a", num_ps: int = 1) -> ShardCheckpoint:
    torch.manual_seed(ps_index)
    param = torch.nn.Parameter(torch.randn(1000))
    optimizer = torch.optim.SGD([param], lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    aggregator = Aggregator(ssgd([0, 1]))
    for _ in range(steps):
        param.grad = torch.randn(1000)
        optimizer.step()
        for w in (0, 1):
            aggregator.pull(w)
        for w in (0, 1):
            aggregator.push(w, 0)
    return ShardCheckpoint(job_id, ps_index, num_ps, 1000 * num_ps, ps_index * 1000, ps_index * 1000 + 1000,
                           param.detach().clone(), optimizer.state_dict(), aggregator.export_state())


def test_shard_round_trip_is_bit_exact(tmp_path):
    shard = _trained_shard()
    save_shard(tmp_path, shard)
    loaded = latest_shard(tmp_path, 0)
    assert torch.equal(loaded.param, shard.param)
    assert loaded.version == 3
    momentum = shard.optimizer["state"][0]["momentum_buffer"]
    assert torch.equal(loaded.optimizer["state"][0]["momentum_buffer"], momentum)
    assert loaded.optimizer["param_groups"] == shard.optimizer["param_groups"]
    assert loaded.aggregator == shard.aggregator


def test_restored_optimizer_continues_exactly_like_the_original(tmp_path):
    shard = _trained_shard()
    save_shard(tmp_path, shard)
    loaded = latest_shard(tmp_path, 0)
    results = []
    for source in (shard, loaded):
        param = torch.nn.Parameter(source.param.clone())
        optimizer = torch.optim.SGD([param], lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
        optimizer.load_state_dict(source.optimizer)
        param.grad = torch.ones(1000)
        optimizer.step()
        results.append(param.detach())
    assert torch.equal(results[0], results[1])


def test_save_leaves_no_temporary_files_and_keeps_the_two_newest(tmp_path):
    for steps in (1, 2, 3):
        save_shard(tmp_path, _trained_shard(steps=steps))
    files = sorted(p.name for p in (tmp_path / "ps0").iterdir())
    assert files == ["latest.json", "v000000000002.pt", "v000000000003.pt"]
    assert json.loads((tmp_path / "ps0" / "latest.json").read_text())["version"] == 3


def test_complete_set_needs_every_shard_of_the_manifest(tmp_path):
    write_manifest(tmp_path, JobManifest("job-a", num_ps=2, task="digits", total_numel=2000))
    save_shard(tmp_path, _trained_shard(0, num_ps=2))
    with pytest.raises(CheckpointError, match="ps1 has no checkpoint"):
        latest_complete(tmp_path)
    save_shard(tmp_path, _trained_shard(1, num_ps=2))
    manifest, shards = latest_complete(tmp_path)
    assert manifest.job_id == "job-a" and [s.ps_index for s in shards] == [0, 1]


def test_shard_of_another_job_is_refused(tmp_path):
    write_manifest(tmp_path, JobManifest("job-a", num_ps=1))
    save_shard(tmp_path, _trained_shard(job_id="job-b"))
    with pytest.raises(CheckpointError, match="belongs to job 'job-b'"):
        latest_complete(tmp_path)


def test_corrupted_shard_is_detected_by_its_digest(tmp_path):
    path = save_shard(tmp_path, _trained_shard())
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256"):
        latest_shard(tmp_path, 0)


class _RunsCode:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"format": 1, "payload": _RunsCode()}, protocol=2))
    with pytest.raises(CheckpointError, match="cannot be loaded safely"):
        load_shard(path)
    assert "this must never run" not in capsys.readouterr().out


def test_missing_manifest_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no manifest"):
        latest_complete(tmp_path)


@pytest.mark.parametrize("plan", [ssgd([0, 1, 2]), asgd([0, 1], staleness_bound=3), kofn([0, 1, 2, 3], 3, epoch=7)])
def test_plan_dict_round_trip(plan):
    assert plan_from_dict(json.loads(json.dumps(plan_to_dict(plan)))) == plan


def test_plan_dict_missing_field_names_it():
    with pytest.raises(PlanError, match="'quorum'"):
        plan_from_dict({"epoch": 0, "groups": [[0]]})


def test_restored_aggregator_accounts_lost_open_round_gradients_as_dropped():
    aggregator = Aggregator(ssgd([0, 1]))
    for w in (0, 1):
        aggregator.pull(w)
    aggregator.push(0, 0)  # waits in the open round when the checkpoint is taken
    restored = Aggregator.restore(aggregator.export_state())
    counts = restored.accounting()
    assert counts["accepted"] == counts["applied"] + counts["dropped"] + counts["pending"]
    assert restored.counters["dropped_lost_in_restart"] == 1
    assert restored.version == aggregator.version and restored.plan == aggregator.plan


def test_restored_aggregator_makes_workers_pull_before_pushing():
    aggregator = Aggregator(ssgd([0, 1]))
    for w in (0, 1):
        aggregator.pull(w)
    restored = Aggregator.restore(aggregator.export_state())
    from star.aggregate import PushRejected
    with pytest.raises(PushRejected, match="without a pull"):
        restored.push(0, 0)
    for w in (0, 1):
        assert restored.pull(w).ready
    restored.push(0, 0)
    outcome = restored.push(1, 0)
    assert outcome.effects.applies and restored.version == 1


@pytest.mark.parametrize(
    "every_updates, every_s, version, last_version, elapsed_s, due",
    [
        (10, 0.0, 9, 0, 100.0, False),  # count not reached, time not used
        (10, 0.0, 10, 0, 0.0, True),
        (0, 5.0, 1, 0, 5.0, True),
        (0, 5.0, 1, 0, 4.9, False),
        (10, 5.0, 3, 0, 6.0, True),  # whichever comes first
        (10, 5.0, 7, 7, 60.0, False),  # nothing new since the last checkpoint
        (0, 0.0, 100, 0, 100.0, False),  # disabled
    ],
)
def test_checkpoint_schedule(every_updates, every_s, version, last_version, elapsed_s, due):
    from star.ps_server.checkpointing import CheckpointSchedule

    assert CheckpointSchedule(every_updates, every_s).due(version, last_version, 100.0 + elapsed_s, 100.0) is due


@pytest.mark.parametrize(
    "every_updates, every_s, last_write_s, elapsed_s, due",
    [
        (0, 10.0, 0.01, 10.0, True),  # a small shard's write changes nothing
        (0, 10.0, 4.0, 10.0, False),  # a 4 s write: at most 10% of the time, so not before 40 s
        (0, 10.0, 4.0, 40.0, True),
        (1, 0.0, 4.0, 39.0, False),  # the floor applies to checkpoints by count too
        (1, 0.0, 4.0, 40.0, True),
    ],
)
def test_a_slow_checkpoint_write_spaces_the_next_so_writing_takes_at_most_its_share(every_updates, every_s, last_write_s,
                                                                                      elapsed_s, due):
    from star.ps_server.checkpointing import CheckpointSchedule

    schedule = CheckpointSchedule(every_updates, every_s, max_write_share=0.1)
    assert schedule.due(5, 0, 100.0 + elapsed_s, 100.0, last_write_s) is due


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5])
def test_a_write_share_outside_zero_to_one_is_refused_with_the_field_named(share):
    from star.config import FaultConfig
    from star.errors import ConfigError
    from star.ps_server.checkpointing import CheckpointSchedule

    with pytest.raises(ConfigError, match="checkpoint_max_write_share"):
        CheckpointSchedule(max_write_share=share)
    with pytest.raises(ConfigError, match="faults.checkpoint_max_write_share"):
        FaultConfig(checkpoint_max_write_share=share)


def test_a_stray_higher_version_never_deletes_the_checkpoint_just_written(tmp_path):
    """An earlier job's v110/v144 left in the folder (an --overwrite) made the new job delete its own v38 and point
    latest.json at a missing file."""
    for steps in (5, 6):
        save_shard(tmp_path, _trained_shard(steps=steps, job_id="earlier"))
    save_shard(tmp_path, _trained_shard(steps=2, job_id="new"))
    assert latest_shard(tmp_path, 0).version == 2


def test_clearing_removes_an_earlier_job_s_checkpoint_set_and_nothing_else(tmp_path):
    write_manifest(tmp_path, JobManifest("earlier", 2, "digits"))
    for ps in (0, 1):
        save_shard(tmp_path, _trained_shard(ps_index=ps, num_ps=2, job_id="earlier"))
        (tmp_path / f"ps{ps}" / "version").write_text("3\n")
    (tmp_path / "notes.txt").write_text("the user's")
    assert clear_checkpoints(tmp_path, shards=[1]) == 3  # a node's own shards only: v*.pt, latest.json, version
    assert (tmp_path / "manifest.json").exists() and latest_shard(tmp_path, 0) is not None
    assert clear_checkpoints(tmp_path) == 4  # the manifest and ps0's three files
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["notes.txt"]
