"""A PS process checkpoints its shard and a restarted one continues from it, bit for bit."""

from __future__ import annotations

import signal

import pytest
import torch

from star.checkpoint import latest_shard
from star.plan import ssgd
from star.rpc.ps_client import PSClient

pytestmark = pytest.mark.integration

NUMEL = 5000
OPTIMIZER = ("--optimizer.name", "sgd", "--optimizer.lr", "0.1", "--optimizer.momentum", "0.9")


def _train(clients: list[PSClient], steps: int, start: int = 0) -> None:
    params = torch.empty(NUMEL)
    for step in range(start, start + steps):
        for client in clients:
            client.pull(params, timeout_s=10)
        for w, client in enumerate(clients):
            client.push(torch.randn(NUMEL, generator=torch.Generator().manual_seed(100 * step + w)), iteration=step, timeout_s=10)


def _observe(client: PSClient) -> torch.Tensor:
    out = torch.empty(NUMEL)
    client.pull(out, timeout_s=10, observer=True)
    return out


def test_a_restarted_ps_serves_exactly_the_checkpointed_parameters_and_continues_identically(cluster, tmp_path):
    ckpt = tmp_path / "ckpt"
    flags = ("--checkpoint-dir", str(ckpt), "--checkpoint-every-updates", "1000", "--job-id", "job-x")
    addresses = cluster.start_ps(2, *flags, optimizer=OPTIMIZER)
    clients = [PSClient(addresses, worker_id=w) for w in (0, 1)]
    initial = torch.linspace(-1, 1, NUMEL)
    for client in clients:
        client.init_if_needed(initial, client.register(NUMEL))
    clients[0].configure(ssgd([0, 1], epoch=1))
    _train(clients, 5)
    before = _observe(clients[0])
    for client in clients:
        client.close()
    for child in cluster.group.children:  # SIGTERM: every PS writes a final checkpoint
        child.process.send_signal(signal.SIGTERM)
        assert child.process.wait(timeout=30) == 0

    shards = [latest_shard(ckpt, i) for i in (0, 1)]
    assert [s.version for s in shards] == [5, 5]
    assert torch.equal(torch.cat([s.param for s in shards]), before)

    restarted = cluster.start_ps(2, *flags, "--restore-dir", str(ckpt), optimizer=OPTIMIZER)
    clients = [PSClient(restarted, worker_id=w) for w in (0, 1)]
    for client in clients:
        assert client.init_if_needed(initial, client.register(NUMEL)) == 0  # nothing re-initialised
    assert torch.equal(_observe(clients[0]), before)
    assert [s.version for s in clients[0].stats()] == [5, 5]
    _train(clients, 3, start=5)
    continued = _observe(clients[0])

    # The same 8 steps without any restart give the same parameters (momentum survived).
    fresh = cluster.start_ps(2, optimizer=OPTIMIZER)
    reference = [PSClient(fresh, worker_id=w) for w in (0, 1)]
    for client in reference:
        client.init_if_needed(initial, client.register(NUMEL))
    reference[0].configure(ssgd([0, 1], epoch=1))
    _train(reference, 8)
    assert torch.equal(_observe(reference[0]), continued)
    for client in clients + reference:
        client.close()


def _kill(cluster) -> None:
    for child in list(cluster.group.children):
        child.process.send_signal(signal.SIGKILL)
        child.process.wait(timeout=10)
    cluster.group.children.clear()


@pytest.mark.parametrize("every, steps, restored_version", [(5, 8, 5), (1000, 2, 0)],
                         ids=["after_a_checkpoint", "before_the_first_scheduled_checkpoint"])
def test_a_killed_ps_restores_its_newest_checkpoint_and_counts_exactly_the_updates_it_lacks(cluster, tmp_path, every, steps,
                                                                                            restored_version):
    ckpt = tmp_path / "ckpt"
    flags = ("--checkpoint-dir", str(ckpt), "--checkpoint-every-updates", str(every), "--job-id", "job-k")
    addresses = cluster.start_ps(1, *flags, optimizer=OPTIMIZER)
    clients = [PSClient(addresses, worker_id=w) for w in (0, 1)]
    for client in clients:
        client.init_if_needed(torch.linspace(-1, 1, NUMEL), client.register(NUMEL))
    clients[0].configure(ssgd([0, 1], epoch=1))
    _train(clients, steps)
    import time

    time.sleep(0.5)  # let a scheduled checkpoint write (it runs in a thread) finish
    for client in clients:
        client.close()
    _kill(cluster)  # SIGKILL: no final checkpoint

    restarted = cluster.start_ps(1, *flags, "--restore-dir", str(ckpt), optimizer=OPTIMIZER)
    with PSClient(restarted, worker_id=0) as client:
        [stats] = client.stats()
    assert stats.version == restored_version  # initialised even when no scheduled checkpoint had been written
    assert stats.counters["restores"] == 1
    assert stats.counters["updates_lost_in_restart"] == steps - restored_version
