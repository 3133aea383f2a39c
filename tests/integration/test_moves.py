"""Moving a PS shard to a new process while training, and pacing pushes through the plan.

A move must lose no update: the successor continues from exactly the handed-over state
(checked bit for bit against a run that never moved), every call to the old address is
redirected, and a whole job with a move ordered mid-run reaches its target.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest
import torch

from star.config import JobConfig, SecurityConfig, from_dict
from star.launch import launch
from star.plan import ssgd, with_tree
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CONTROL_CHANNEL_OPTIONS
from star.rpc.ps_client import PSClient, stats_at
from star.rpc.security import Credentials

pytestmark = pytest.mark.integration

NUMEL = 3000
RELAY = "127.0.0.1:1"
OPTIMIZER = ("--optimizer.name", "sgd", "--optimizer.lr", "0.1", "--optimizer.momentum", "0.9")


def _gradient(step: int, worker: int) -> torch.Tensor:
    return torch.randn(NUMEL, generator=torch.Generator().manual_seed(100 * step + worker))


def _observe(client: PSClient) -> torch.Tensor:
    out = torch.empty(NUMEL)
    client.pull(out, timeout_s=20, observer=True)
    return out


def _ssgd_steps(clients: list[PSClient], steps: range) -> None:
    params = torch.empty(NUMEL)
    for step in steps:
        for client in clients:
            client.pull(params, timeout_s=20)
        for w, client in enumerate(clients):
            client.push(_gradient(step, w), iteration=step, timeout_s=20)


def test_a_shard_handed_over_mid_round_continues_bit_for_bit_and_old_callers_are_redirected(cluster):
    [old] = cluster.start_ps(1, optimizer=OPTIMIZER)
    clients = [PSClient([old], worker_id=w) for w in (0, 1)]
    initial = torch.linspace(-1, 1, NUMEL)
    for client in clients:  # worker 0 names a tree relay (never dialled here): the successor must know it too
        client.init_if_needed(initial, client.register(NUMEL, relay_address=RELAY if client.worker_id == 0 else ""))
    clients[0].configure(with_tree(ssgd([0, 1], epoch=1), 2))
    _ssgd_steps(clients, range(4))
    params = torch.empty(NUMEL)
    for client in clients:  # round 4 is open: both pulled, worker 0 pushed, worker 1 still "computing"
        client.pull(params, timeout_s=20)
    clients[0].push(_gradient(4, 0), iteration=4, timeout_s=20)

    successor = cluster.spawn_ps(1, "--migrate-from", old, optimizer=OPTIMIZER)
    time.sleep(3.0)  # the successor asks for the shard; the old PS drains: it waits for worker 1's gradient
    assert stats_at(old, Credentials()).moved_to == ""
    clients[1].push(_gradient(4, 1), iteration=4, timeout_s=20)  # closes round 4 at the old PS; the hand-over follows
    [new] = successor()
    handed = stats_at(old, Credentials())
    assert handed.moved_to == new and handed.version == 5
    _ssgd_steps(clients, range(5, 8))  # the clients still dial the old address: they are redirected
    assert all(c.addresses == [new] for c in clients)
    [after] = clients[0].stats()
    assert after.counters["moved_in_at_version"] == 5 and after.version == 8
    assert after.accepted == after.applied == 16 and after.dropped == 0 and after.pending == 0
    assert clients[1].tree_role == (RELAY, ())  # learnt from the successor's pull
    moved = _observe(clients[0])

    [fresh] = cluster.start_ps(1, optimizer=OPTIMIZER)  # the same 8 steps, never moved
    reference = [PSClient([fresh], worker_id=w) for w in (0, 1)]
    for client in reference:
        client.init_if_needed(initial, client.register(NUMEL))
    reference[0].configure(ssgd([0, 1], epoch=1))
    _ssgd_steps(reference, range(8))
    assert torch.equal(_observe(reference[0]), moved)
    for client in clients + reference:
        client.close()


def test_a_plans_push_pace_reaches_workers_and_changing_it_keeps_the_open_round(cluster):
    addresses = cluster.start_ps(2, optimizer=OPTIMIZER)
    clients = [PSClient(addresses, worker_id=w) for w in (0, 1)]
    for client in clients:
        client.init_if_needed(torch.zeros(NUMEL), client.register(NUMEL))
    clients[0].configure(ssgd([0, 1], epoch=1))
    params = torch.empty(NUMEL)
    for client in clients:
        client.pull(params, timeout_s=20)
    assert clients[0].push_pace_bytes_per_s is None
    clients[0].push(_gradient(0, 0), iteration=0, timeout_s=20)
    replies = clients[0].configure(dataclasses.replace(ssgd([0, 1], epoch=2), push_pace_bytes_per_s=123456.0))
    assert [r.flushed for r in replies] == [0, 0]  # pacing does not close the round
    clients[1].push(_gradient(0, 1), iteration=0, timeout_s=20)  # pulled under epoch 1: still accepted
    assert [s.version for s in clients[0].stats()] == [1, 1]
    clients[1].pull(params, timeout_s=20)
    assert clients[1].push_pace_bytes_per_s == 123456.0
    for client in clients:
        client.close()


def test_a_job_whose_shard_is_moved_by_an_operator_mid_run_reaches_its_target_and_loses_no_update(tmp_path):
    # The job runs for its whole max_time_s: ending at the target could come before the move does, on a busy machine.
    config = from_dict(JobConfig, {"task": "digits", "workers": 3, "ps": 2, "out": str(tmp_path), "max_time_s": 35,
                                   "target": 0.9, "stop_at_target": False})
    outcome: dict = {}
    runner = threading.Thread(target=lambda: outcome.setdefault("result", launch(config)))
    runner.start()
    try:
        ready, curve = tmp_path / "logs" / "coordinator.ready", tmp_path / "curve.csv"
        deadline = time.monotonic() + 120
        while not (curve.exists() and len(curve.read_text().splitlines()) > 3):
            assert time.monotonic() < deadline, "no training"
            time.sleep(0.5)
        credentials = Credentials.load(SecurityConfig(token_file=str(tmp_path / "job.token")))
        channel = credentials.channel(f"127.0.0.1:{json.loads(ready.read_text())['port']}", CONTROL_CHANNEL_OPTIONS)
        reply = pb_grpc.CoordinatorStub(channel).MoveShard(pb.MoveShardRequest(ps_index=0, host="127.0.0.1"), timeout=10)
        channel.close()
        assert reply.accepted, reply.reason
    finally:
        runner.join(timeout=300)
    result = outcome["result"]
    assert result["reached"], result
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    [moved] = [e for e in events if e["kind"] == "ps_moved"]
    assert moved["shard"] == 0 and moved["updates_lost"] == 0
    assert moved["version_handed_over"] == moved["version_received"] > 0
    for ps in result["ps_stats"]:
        assert ps["accepted"] == ps["applied"] + ps["dropped"] + ps["pending"] and ps["dropped"] == 0
    # Both shards applied every round; the job stops on time, so the last round may have reached one shard only.
    versions = [ps["version"] for ps in result["ps_stats"]]
    assert max(versions) == result["updates"] and max(versions) - min(versions) <= 1, versions
