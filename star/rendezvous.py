"""Who this node is in a multi-host job, and the store the nodes meet through.

`star node` runs once per host, started by torchrun, Slurm's srun, or by hand. This
module reads the standard variables of each launcher (pure: the environment is passed
in) and opens a key-value store all nodes share:

- torchrun (`--nproc-per-node 1`): GROUP_RANK / GROUP_WORLD_SIZE name the node, and
  MASTER_ADDR:MASTER_PORT is the store torchrun's own agents already host
  (TORCHELASTIC_USE_AGENT_STORE=True), so every node connects as a client;
- Slurm (`srun --ntasks-per-node 1`): SLURM_NODEID / SLURM_NNODES name the node and the
  batch script exports MASTER_ADDR / MASTER_PORT; node 0 hosts the store;
- by hand: `--node.rank`, `--node.nodes`, `--node.store host:port` (node 0 hosts it).

The store carries only addresses and resource samples, never the job token.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Mapping


class RendezvousError(RuntimeError):
    """This node cannot tell who it is or where the others are; the message says which variable."""


@dataclass(frozen=True)
class NodeIdentity:
    rank: int  # this node, 0..nodes-1; rank 0 runs the coordinator
    nodes: int
    store_host: str
    store_port: int
    store_is_external: bool  # True: someone else (torchrun's agent) hosts the store; every node is a client
    run_id: str  # keys are namespaced by run (and torchrun restart), so a restarted job never reads stale keys
    launcher: str  # torchrun | slurm | manual

    @property
    def hosts_store(self) -> bool:
        return self.rank == 0 and not self.store_is_external


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except KeyError:
        raise RendezvousError(f"{name} is not set") from None
    except ValueError:
        raise RendezvousError(f"{name}={env[name]!r} is not an integer") from None


def _split_store(text: str, where: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RendezvousError(f"{where}={text!r} is not host:port")
    return host.strip("[]"), int(port)


def identify(env: Mapping[str, str], rank: int | None = None, nodes: int | None = None, store: str | None = None) -> NodeIdentity:
    """This node's identity from explicit values, else torchrun's, else Slurm's variables."""
    if "TORCHELASTIC_RUN_ID" in env:
        if env.get("LOCAL_WORLD_SIZE", "1") != "1":
            raise RendezvousError(
                f"LOCAL_WORLD_SIZE={env['LOCAL_WORLD_SIZE']}: start one star node per host (torchrun --nproc-per-node 1)")
        launcher = "torchrun"
        rank = _int(env, "GROUP_RANK") if rank is None else rank
        nodes = _int(env, "GROUP_WORLD_SIZE") if nodes is None else nodes
        external = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true" and store is None
        run_id = f"{env['TORCHELASTIC_RUN_ID']}-{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    elif "SLURM_NODEID" in env and rank is None:
        launcher, external = "slurm", False
        rank = _int(env, "SLURM_NODEID")
        nodes = _int(env, "SLURM_NNODES") if nodes is None else nodes
        run_id = f"slurm-{env.get('SLURM_JOB_ID', '0')}-{env.get('SLURM_STEP_ID', '0')}"
    else:
        launcher, external = "manual", False
        if rank is None or nodes is None:
            raise RendezvousError("no torchrun or Slurm variables: give --node.rank and --node.nodes")
        run_id = "manual"
    if store is not None:
        host, port = _split_store(store, "node.store")
    else:
        if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
            raise RendezvousError("MASTER_ADDR and MASTER_PORT are not set: export them, or give --node.store host:port")
        host, port = env["MASTER_ADDR"], _int(env, "MASTER_PORT")
    if not 0 <= rank < nodes:
        raise RendezvousError(f"node rank {rank} is outside 0..{nodes - 1}")
    return NodeIdentity(rank, nodes, host, port, external, run_id, launcher)


def route_address(peer_host: str, peer_port: int = 9) -> str:
    """The local address this host uses to reach `peer_host` (a UDP connect sends nothing)."""
    family = socket.AF_INET6 if ":" in peer_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((peer_host, peer_port))
        return probe.getsockname()[0]


class Store:
    """The nodes' shared key-value store (torch.distributed.TCPStore), with JSON-free string values."""

    def __init__(self, identity: NodeIdentity, timeout_s: float):
        from torch.distributed import TCPStore

        self.prefix = f"star/{identity.run_id}/"
        try:
            self._store = TCPStore(identity.store_host, identity.store_port, is_master=identity.hosts_store,
                                   timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
        except (RuntimeError, OSError) as exc:
            role = "host" if identity.hosts_store else "reach"
            raise RendezvousError(f"cannot {role} the rendezvous store at {identity.store_host}:{identity.store_port}: {exc}") from None

    def set(self, key: str, value: str) -> None:
        self._store.set(self.prefix + key, value)

    def get(self, key: str) -> str:
        """Waits (up to the store's timeout) until some node has set `key`."""
        try:
            return self._store.get(self.prefix + key).decode()
        except RuntimeError as exc:
            raise RendezvousError(f"timed out waiting for {key!r} from the other nodes: {exc}") from None

    def has(self, key: str) -> bool:
        return bool(self._store.check([self.prefix + key]))

    def claim(self, key: str) -> bool:
        """Whether this caller is the first to claim `key` in this run (an atomic counter in the store)."""
        return int(self._store.add(self.prefix + "claim/" + key, 1)) == 1
