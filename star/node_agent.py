"""One host's agent inside `star launch` / `star node`: report the host's resources, obey the coordinator.

Every `period_s` it samples the host (star.resources), sends the sample with the PS
daemons this host serves to the coordinator (ReportResources), and carries out the
orders in the answer: start a PS that takes a shard over from its current address (a
live move), or stop a PS whose shard moved away. The coordinator decides; the agent
only spawns and stops processes, so it needs no policy of its own.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import grpc

from star.processes import Child, ProcessGroup, with_flag
from star.logs import log
from star.resources import ResourceSampler
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CONTROL_CHANNEL_OPTIONS, address, sample_to_proto
from star.rpc.security import Credentials

logger = logging.getLogger("node")

PsArgs = Callable[[int, Path], list[str]]  # (shard, ready file) -> `star ps` arguments (no --migrate-from / --restore-dir)


@dataclass
class _ServedShard:
    child: Child
    address: str


@dataclass
class _Arriving:
    """A PS started to take a shard over; it serves once its ready file appears."""

    shard: int
    child: Child
    ready: Path
    args: list[str]


@dataclass
class NodeAgent:
    host: str  # this node's label: the address its daemons bind and advertise
    node_rank: int
    group: ProcessGroup
    ps_args: PsArgs
    credentials: Credentials
    checkpoint_dir: str  # where this host's PSs checkpoint (a moved-in PS restarts from here after a crash)
    period_s: float = 2.0
    busy_tick_s: float = 0.05  # the job NIC's counters are read this often, to tell a busy link from an idle one
    served: dict[int, _ServedShard] = field(default_factory=dict)
    _arriving: list[_Arriving] = field(default_factory=list)
    _moves_started: int = 0

    def __post_init__(self) -> None:
        self.sampler = ResourceSampler(self.host, job_address=self.host, job_pids=self._job_pids, busy_tick_s=self.busy_tick_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _job_pids(self) -> list[int]:
        with self.group.lock:
            return [c.process.pid for c in self.group.children if c.process.poll() is None]

    def adopt_ps(self, shard: int, child: Child, address_text: str) -> None:
        """A PS the launcher started here at the beginning."""
        self.served[shard] = _ServedShard(child, address_text)

    # ---- the loop --------------------------------------------------------------------
    def start(self, coordinator_address: str) -> None:
        self._thread = threading.Thread(target=self._run, args=(coordinator_address,), name="node-agent", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        self.sampler.close()

    def _run(self, coordinator_address: str) -> None:
        channel = self.credentials.channel(coordinator_address, CONTROL_CHANNEL_OPTIONS)
        stub = pb_grpc.CoordinatorStub(channel)
        warned = False
        try:
            while not self._stop.wait(self.period_s):
                self._check_arrivals()
                report = sample_to_proto(self.sampler.sample(), self.node_rank, {s: v.address for s, v in self.served.items()})
                try:
                    orders = stub.ReportResources(report, timeout=5.0)
                    warned = False
                except grpc.RpcError as exc:
                    if not warned:
                        log(logger, logging.WARNING, "resource report failed", error=exc.code(), detail=exc.details())
                        warned = True
                    continue
                for start in orders.start_ps:
                    self._start_ps(start.ps_index, start.migrate_from)
                for address_text in orders.stop_ps:
                    self._stop_ps(address_text)
        finally:
            channel.close()

    # ---- orders ----------------------------------------------------------------------
    def _start_ps(self, shard: int, migrate_from: str) -> None:
        self._moves_started += 1
        name = f"ps{shard}-moved{self._moves_started}"
        ready = self.group.log_dir / f"{name}.ready"
        ready.unlink(missing_ok=True)
        args = self.ps_args(shard, ready)
        child = self.group.spawn(name, args + ["--migrate-from", migrate_from])
        child.critical = False  # a failed take-over leaves the shard where it was; the job goes on
        self._arriving.append(_Arriving(shard, child, ready, args))
        log(logger, logging.INFO, "starting a PS to take a shard over", shard=shard, source=migrate_from)

    def _check_arrivals(self) -> None:
        for arriving in list(self._arriving):
            if arriving.ready.exists():
                port = int(json.loads(arriving.ready.read_text())["port"])
                # From now on it is this shard's PS here: a crash restarts it from its own checkpoint, same port.
                arriving.child.critical = True
                arriving.child.restart_args = with_flag(arriving.args, "--port", str(port)) + ["--restore-dir", self.checkpoint_dir]
                self.served[arriving.shard] = _ServedShard(arriving.child, address(self.host, port))
                self._arriving.remove(arriving)
                log(logger, logging.INFO, "PS took the shard over", shard=arriving.shard, address=address(self.host, port))
            elif arriving.child.process.poll() is not None:
                self._arriving.remove(arriving)
                self.group.stop_child(arriving.child)
                log(logger, logging.WARNING, "PS could not take the shard over", shard=arriving.shard,
                    code=arriving.child.process.returncode, log=str(arriving.child.log_path))

    def _stop_ps(self, address_text: str) -> None:
        """Stop the PS serving at `address_text` (its shard moved away; it has only been redirecting)."""
        with self.group.lock:
            candidates = [c for c in self.group.children if c.name.startswith("ps")]
        for shard, served in list(self.served.items()):
            if served.address == address_text:
                del self.served[shard]
        for child in candidates:
            if child.restart_args is not None and _port_of(child.restart_args) == _port(address_text):
                child.restart_args = None
                code = self.group.stop_child(child)
                log(logger, logging.INFO, "stopped a PS whose shard moved away", address=address_text, code=code)
                return


def _port_of(args: list[str]) -> int | None:
    try:
        return int(args[args.index("--port") + 1])
    except (ValueError, IndexError):
        return None


def _port(address_text: str) -> int:
    return int(address_text.rsplit(":", 1)[1])
