"""The worker daemon's configuration: its own module, so that configs can be built and tested without torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from star.config import SecurityConfig, TraceConfig, check_transport_fields, check_worker_count
from star.devices import DEVICE_KINDS
from star.errors import ConfigError


@dataclass(frozen=True)
class WorkerConfig:
    """One worker process."""

    worker_id: int = 0  # 0..workers-1
    workers: int = 1  # the job's worker count: decides this worker's data shard
    task: str = "digits"  # built-in task name or module:function
    seed: int = 0  # model init (identical on every worker) and data order
    batch_size: int | None = None  # per iteration; default the task's; the coordinator may change it
    coordinator: str | None = None  # host:port; PS addresses come from Join
    ps_addresses: tuple[str, ...] = field(default=())  # direct PS addresses when there is no coordinator
    trace: TraceConfig = field(default_factory=TraceConfig)  # slowdown trace to replay (as the job's [trace])
    amp: bool = False  # start with autocast on
    device: str = "cpu"  # cpu | cuda (cuda: GPU worker_id % visible GPUs)
    threads: int = 1  # torch intra-op threads
    max_iterations: int | None = None  # stop after this many iterations (None: until told)
    pull_poll_s: float = 1.0  # a blocked pull is re-issued this often (and a heartbeat sent), so a stop is noticed
    ps_retry_attempts: int = 8  # unreachable PS: tries before exiting non-zero
    ps_retry_base_s: float = 0.25  # first backoff delay, doubled per try (capped at 5 s)
    security: SecurityConfig = field(default_factory=SecurityConfig)  # job token file and TLS for every channel
    relay_host: str | None = None  # tree aggregation: serve a relay for tree children on this host (None: never a parent)
    tree_wait_s: float = 2.0  # a tree parent waits this long past its own gradient for missing children's
    max_workers: int = 4096  # worker ids a relay accepts from children
    transport: str = "auto"  # payloads to the PSs: auto (shared memory with a co-located PS, else its socket channel, else gRPC) | shm | socket | grpc
    wire: str = "float32"  # gRPC payload dtype: float32 | bfloat16
    measure_step_cost: bool = False  # time a step at two batch sizes before joining (the job's batch sizing reads it)

    def __post_init__(self) -> None:
        check_worker_count(self.workers, self.worker_id)
        check_transport_fields(self.transport, self.wire)
        if self.device not in DEVICE_KINDS:
            raise ConfigError("device", self.device, f"one of {', '.join(DEVICE_KINDS)}")
