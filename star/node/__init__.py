"""`star node`: the entry point on every host of a multi-host job (torchrun, srun, or by hand).

    torchrun --nnodes 3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST0:29400 \\
        -m star.node --config job.toml

Every node samples its host's resources and publishes them in the rendezvous store
(star.rendezvous); node 0 places the PS shards on the hosts with the most CPU and NIC
headroom (star.placement) and publishes the placement; each node starts the PS shards
placed on it and publishes their addresses; node 0 starts the coordinator with them and
publishes its address; each node then starts its workers (worker w runs on node
w mod nodes) and its agent (resource reports, live shard moves). Node 0 writes the
job's results to OUT; node r > 0 keeps its logs in OUT/node<r>.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Callable

from star.checkpoint import clear_checkpoints
from star.child_configs import job_as_run
from star.cli_checks import check_out_free
from star.config import ConfigError, JobConfig, to_toml
from star.launch import (_monitor, clear_run_files, earlier_part, ps_command, start_coordinator, start_ps_daemons,
                         start_workers)
from star.placement import Placement, host_state, place
from star.processes import JOB_FILE, ProcessGroup
from star.rendezvous import NodeIdentity, RendezvousError, Store, identify, route_address
from star.resources import HostSample, ResourceSampler
from star.rpc.security import TOKEN_ENV, Credentials


class NodeError(RuntimeError):
    """This node cannot take part in the job (no token, a bad rendezvous, a peer that never came)."""


def node_labels(addresses: list[str]) -> list[str]:
    """Each node's host label: its address, made unique with '#rank' when several nodes share one (one machine)."""
    return [a if addresses.count(a) == 1 else f"{a}#{r}" for r, a in enumerate(addresses)]


def place_shards(config: JobConfig, total_numel: int, hosts: list[dict]) -> tuple[list[int], Placement]:
    """Node 0's decision: the rank that serves each shard, and the placement with its reasons.

    `hosts`: per rank, what that node published ({address, sample, can_host_ps}).
    """
    from star.flat import shard_ranges

    shard_bytes = [4.0 * r.numel for r in shard_ranges(total_numel, config.ps)]
    labels = node_labels([h["address"] for h in hosts])
    states = [host_state(HostSample.from_dict({**h["sample"], "host": label}), config.placement, h["can_host_ps"])
              for h, label in zip(hosts, labels)]
    candidates = [s for s in states if s.can_host_ps] or states
    placement = place(shard_bytes, candidates, config.workers, config.placement)
    ranks = [labels.index(label) for label in placement.hosts]
    return ranks, placement


def run_node(config: JobConfig, progress: Callable[[str], None] | None = None, environ=os.environ) -> dict | None:
    """Take part in the job as this node until it ends; node 0 returns result.json's content."""
    if config.resume is not None:  # not built here: a node must never clear the checkpoints it was asked to continue
        raise ConfigError("resume", config.resume, "star node does not resume a job (star launch does)")
    try:
        identity = identify(environ, config.node.rank, config.node.nodes, config.node.store)
    except RendezvousError as exc:
        raise NodeError(str(exc)) from None
    credentials = Credentials.load(config.security)
    if credentials.token is None:
        raise NodeError("a multi-host job needs one job token on every node: set STAR_JOB_TOKEN or security.token_file")
    advertise = config.node.advertise or route_address(identity.store_host, identity.store_port)
    rank = identity.rank
    out = Path(config.out) if rank == 0 else Path(config.out) / f"node{rank}"
    # A launcher's restart of a failed attempt (torchrun --max-restarts, a Slurm requeue) replaces the attempt's files,
    # kept as OUT/partN; a first attempt must not replace an earlier job's without --overwrite.
    restarted = int(environ.get("TORCHELASTIC_RESTART_COUNT") or environ.get("SLURM_RESTART_COUNT") or 0) > 0
    if not restarted:
        check_out_free("out", str(out), None, config.overwrite, config.faults.checkpoint_dir)
    clear_run_files(out, keep_as=earlier_part(out) if restarted else None)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    say = progress or (lambda line: None)
    say(f"node {rank}/{identity.nodes} ({identity.launcher}): {advertise}, store {identity.store_host}:{identity.store_port}")
    try:
        store = Store(identity, config.node.rendezvous_timeout_s)
    except RendezvousError as exc:
        raise NodeError(str(exc)) from None
    group = ProcessGroup(out / "logs", env={TOKEN_ENV: credentials.token})
    try:
        return _run(config, identity, store, advertise, out, group, credentials, say)
    except RendezvousError as exc:
        raise NodeError(str(exc)) from None
    finally:
        group.shutdown()


def _run(config: JobConfig, identity: NodeIdentity, store: Store, advertise: str, out: Path, group: ProcessGroup,
         credentials: Credentials, say: Callable[[str], None]) -> dict | None:
    from star.node_agent import NodeAgent
    from star.tasks import get_task

    rank, nodes = identity.rank, identity.nodes
    if not store.claim(f"rank/{rank}"):  # two nodes given one rank would both start its PSs and overwrite its entry
        raise NodeError(f"node rank {rank} is already taken by another node of this job: give each node its own "
                        f"--node.rank in 0..{nodes - 1}")
    sampler = ResourceSampler(advertise, job_address=advertise)
    time.sleep(config.node.sample_s)
    sample = sampler.sample()
    ps_ranks = config.node.ps_rank_set(nodes)
    store.set(f"host/{rank}", json.dumps({"address": advertise, "sample": sample.to_dict(), "can_host_ps": rank in ps_ranks}))
    task = get_task(config.task)
    if rank == 0:
        hosts = [json.loads(store.get(f"host/{r}")) for r in range(nodes)]
        total_numel = sum(p.numel() for p in task.build_model(config.seed).parameters())
        shard_ranks, placement = place_shards(config, total_numel, hosts)
        described = {**placement.describe(), "ranks": shard_ranks,
                     "hosts": {h["address"]: {"cpu_percent": h["sample"]["cpu_percent"], "nic": h["sample"]["job_nic"],
                                              "link_bytes_per_s": _link(h["sample"])} for h in hosts}}
        store.set("placement", json.dumps({"ranks": shard_ranks, "job_id": secrets.token_hex(8), "described": described}))
        say(f"placement ({placement.strategy}): shard -> node {shard_ranks}")
    decided = json.loads(store.get("placement"))
    mine = [i for i, r in enumerate(decided["ranks"]) if r == rank]
    checkpoints = Path(config.faults.checkpoint_dir or out / "checkpoints")
    clear_checkpoints(checkpoints, mine)  # a new job: an earlier one's checkpoints of these shards must not mix in
    job_file = out / JOB_FILE  # this node's children derive their configs from it (star.child_configs)
    job_file.write_text(to_toml(job_as_run(config, task)))

    def ps_args(shard: int, ready: Path) -> list[str]:
        return ps_command(job_file, advertise, shard, ready, checkpoints, decided["job_id"])

    served = start_ps_daemons(group, ps_args, mine, advertise, 120.0, checkpoints)
    for shard, (_, address_text) in served.items():
        store.set(f"ps/{shard}", address_text)
    if rank == 0:
        addresses = [store.get(f"ps/{i}") for i in range(config.ps)]
        placement_file = out / "placement.json"
        placement_file.write_text(json.dumps(decided["described"]))
        coordinator = start_coordinator(group, job_file, advertise, addresses, 120.0, placement_file)
        store.set("coordinator", coordinator)
    coordinator = store.get("coordinator")
    start_workers(group, job_file, [w for w in range(config.workers) if w % nodes == rank], coordinator, advertise)
    agent = NodeAgent(advertise, rank, group, ps_args, credentials, str(checkpoints))
    for shard, (child, address_text) in served.items():
        agent.adopt_ps(shard, child, address_text)
    agent.start(coordinator)
    try:
        # A node whose own workers all died still serves its PS shards: only the coordinator's node decides the end.
        _monitor(group, coordinator, say if rank == 0 else None, credentials, config.faults.max_restarts,
                 fail_without_workers=False, workers=config.workers)
    finally:
        agent.stop()
        store.set(f"done/{rank}", "1")
    if rank != 0:
        return None
    _wait_for_peers(store, nodes, timeout_s=30.0)  # they stop their workers before the coordinator goes away
    result_path = out / "result.json"
    if not result_path.exists():
        raise NodeError(f"no result written to {result_path}")
    result = json.loads(result_path.read_text())
    result.update(nodes=nodes, placement=decided["described"], launcher=identity.launcher)
    result_path.write_text(json.dumps(result, indent=2))
    return result


def _link(sample: dict) -> float | None:
    nic = next((n for n in sample["nics"] if n["name"] == sample.get("job_nic")), None)
    return None if nic is None else nic["link_bytes_per_s"]


def _wait_for_peers(store: Store, nodes: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(store.has(f"done/{r}") for r in range(nodes)):
        time.sleep(0.2)
