from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TensorChunk(_message.Message):
    __slots__ = ("offset", "data")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthReply(_message.Message):
    __slots__ = ("status", "role", "uptime_s", "pid")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    status: str
    role: str
    uptime_s: float
    pid: int
    def __init__(self, status: _Optional[str] = ..., role: _Optional[str] = ..., uptime_s: _Optional[float] = ..., pid: _Optional[int] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("worker_id", "total_numel", "relay_address", "want_shm", "shm_grad_name", "shm_grad_nonce", "shm_grad_shards", "shm_grad_shard")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    TOTAL_NUMEL_FIELD_NUMBER: _ClassVar[int]
    RELAY_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    WANT_SHM_FIELD_NUMBER: _ClassVar[int]
    SHM_GRAD_NAME_FIELD_NUMBER: _ClassVar[int]
    SHM_GRAD_NONCE_FIELD_NUMBER: _ClassVar[int]
    SHM_GRAD_SHARDS_FIELD_NUMBER: _ClassVar[int]
    SHM_GRAD_SHARD_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    total_numel: int
    relay_address: str
    want_shm: bool
    shm_grad_name: str
    shm_grad_nonce: bytes
    shm_grad_shards: int
    shm_grad_shard: int
    def __init__(self, worker_id: _Optional[int] = ..., total_numel: _Optional[int] = ..., relay_address: _Optional[str] = ..., want_shm: _Optional[bool] = ..., shm_grad_name: _Optional[str] = ..., shm_grad_nonce: _Optional[bytes] = ..., shm_grad_shards: _Optional[int] = ..., shm_grad_shard: _Optional[int] = ...) -> None: ...

class RegisterReply(_message.Message):
    __slots__ = ("initialized", "range_start", "range_end", "total_numel", "ps_index", "num_ps", "shm_name", "shm_nonce", "shm_board_name", "shm_board_nonce", "shm_board_slots", "shm_doorbell", "socket_port", "shm_grad_mapped")
    INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    RANGE_START_FIELD_NUMBER: _ClassVar[int]
    RANGE_END_FIELD_NUMBER: _ClassVar[int]
    TOTAL_NUMEL_FIELD_NUMBER: _ClassVar[int]
    PS_INDEX_FIELD_NUMBER: _ClassVar[int]
    NUM_PS_FIELD_NUMBER: _ClassVar[int]
    SHM_NAME_FIELD_NUMBER: _ClassVar[int]
    SHM_NONCE_FIELD_NUMBER: _ClassVar[int]
    SHM_BOARD_NAME_FIELD_NUMBER: _ClassVar[int]
    SHM_BOARD_NONCE_FIELD_NUMBER: _ClassVar[int]
    SHM_BOARD_SLOTS_FIELD_NUMBER: _ClassVar[int]
    SHM_DOORBELL_FIELD_NUMBER: _ClassVar[int]
    SOCKET_PORT_FIELD_NUMBER: _ClassVar[int]
    SHM_GRAD_MAPPED_FIELD_NUMBER: _ClassVar[int]
    initialized: bool
    range_start: int
    range_end: int
    total_numel: int
    ps_index: int
    num_ps: int
    shm_name: str
    shm_nonce: bytes
    shm_board_name: str
    shm_board_nonce: bytes
    shm_board_slots: int
    shm_doorbell: str
    socket_port: int
    shm_grad_mapped: bool
    def __init__(self, initialized: _Optional[bool] = ..., range_start: _Optional[int] = ..., range_end: _Optional[int] = ..., total_numel: _Optional[int] = ..., ps_index: _Optional[int] = ..., num_ps: _Optional[int] = ..., shm_name: _Optional[str] = ..., shm_nonce: _Optional[bytes] = ..., shm_board_name: _Optional[str] = ..., shm_board_nonce: _Optional[bytes] = ..., shm_board_slots: _Optional[int] = ..., shm_doorbell: _Optional[str] = ..., socket_port: _Optional[int] = ..., shm_grad_mapped: _Optional[bool] = ...) -> None: ...

class InitHeader(_message.Message):
    __slots__ = ("total_numel", "dtype")
    TOTAL_NUMEL_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    total_numel: int
    dtype: str
    def __init__(self, total_numel: _Optional[int] = ..., dtype: _Optional[str] = ...) -> None: ...

class InitRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: InitHeader
    chunk: TensorChunk
    def __init__(self, header: _Optional[_Union[InitHeader, _Mapping]] = ..., chunk: _Optional[_Union[TensorChunk, _Mapping]] = ...) -> None: ...

class InitReply(_message.Message):
    __slots__ = ("applied", "version")
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    applied: bool
    version: int
    def __init__(self, applied: _Optional[bool] = ..., version: _Optional[int] = ...) -> None: ...

class PushHeader(_message.Message):
    __slots__ = ("worker_id", "plan_epoch", "base_version", "iteration", "dtype", "numel", "batch_size", "contributors", "shm_seq", "shm_grad")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    NUMEL_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTORS_FIELD_NUMBER: _ClassVar[int]
    SHM_SEQ_FIELD_NUMBER: _ClassVar[int]
    SHM_GRAD_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    plan_epoch: int
    base_version: int
    iteration: int
    dtype: str
    numel: int
    batch_size: int
    contributors: _containers.RepeatedScalarFieldContainer[int]
    shm_seq: int
    shm_grad: bool
    def __init__(self, worker_id: _Optional[int] = ..., plan_epoch: _Optional[int] = ..., base_version: _Optional[int] = ..., iteration: _Optional[int] = ..., dtype: _Optional[str] = ..., numel: _Optional[int] = ..., batch_size: _Optional[int] = ..., contributors: _Optional[_Iterable[int]] = ..., shm_seq: _Optional[int] = ..., shm_grad: _Optional[bool] = ...) -> None: ...

class PushRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: PushHeader
    chunk: TensorChunk
    def __init__(self, header: _Optional[_Union[PushHeader, _Mapping]] = ..., chunk: _Optional[_Union[TensorChunk, _Mapping]] = ...) -> None: ...

class PushReply(_message.Message):
    __slots__ = ("status", "version", "gradient_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_ID_FIELD_NUMBER: _ClassVar[int]
    status: str
    version: int
    gradient_id: int
    def __init__(self, status: _Optional[str] = ..., version: _Optional[int] = ..., gradient_id: _Optional[int] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("worker_id", "observer", "shm", "dtype", "min_version", "wait_s")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_FIELD_NUMBER: _ClassVar[int]
    SHM_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    MIN_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    observer: bool
    shm: bool
    dtype: str
    min_version: int
    wait_s: float
    def __init__(self, worker_id: _Optional[int] = ..., observer: _Optional[bool] = ..., shm: _Optional[bool] = ..., dtype: _Optional[str] = ..., min_version: _Optional[int] = ..., wait_s: _Optional[float] = ...) -> None: ...

class PullHeader(_message.Message):
    __slots__ = ("version", "plan_epoch", "numel", "dtype", "range_start", "since_first_update_s", "push_pace_bytes_per_s", "tree_parent", "tree_children", "shm_seq", "shm_slot", "version_applied_s")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PLAN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NUMEL_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    RANGE_START_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIRST_UPDATE_S_FIELD_NUMBER: _ClassVar[int]
    PUSH_PACE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    TREE_PARENT_FIELD_NUMBER: _ClassVar[int]
    TREE_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    SHM_SEQ_FIELD_NUMBER: _ClassVar[int]
    SHM_SLOT_FIELD_NUMBER: _ClassVar[int]
    VERSION_APPLIED_S_FIELD_NUMBER: _ClassVar[int]
    version: int
    plan_epoch: int
    numel: int
    dtype: str
    range_start: int
    since_first_update_s: float
    push_pace_bytes_per_s: float
    tree_parent: str
    tree_children: _containers.RepeatedScalarFieldContainer[int]
    shm_seq: int
    shm_slot: int
    version_applied_s: float
    def __init__(self, version: _Optional[int] = ..., plan_epoch: _Optional[int] = ..., numel: _Optional[int] = ..., dtype: _Optional[str] = ..., range_start: _Optional[int] = ..., since_first_update_s: _Optional[float] = ..., push_pace_bytes_per_s: _Optional[float] = ..., tree_parent: _Optional[str] = ..., tree_children: _Optional[_Iterable[int]] = ..., shm_seq: _Optional[int] = ..., shm_slot: _Optional[int] = ..., version_applied_s: _Optional[float] = ...) -> None: ...

class PullReply(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: PullHeader
    chunk: TensorChunk
    def __init__(self, header: _Optional[_Union[PullHeader, _Mapping]] = ..., chunk: _Optional[_Union[TensorChunk, _Mapping]] = ...) -> None: ...

class PlanGroup(_message.Message):
    __slots__ = ("workers", "quorum")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedScalarFieldContainer[int]
    quorum: int
    def __init__(self, workers: _Optional[_Iterable[int]] = ..., quorum: _Optional[int] = ...) -> None: ...

class Plan(_message.Message):
    __slots__ = ("epoch", "groups", "staleness_bound", "scale", "late_policy", "label", "push_pace_bytes_per_s", "tree_fanout")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    STALENESS_BOUND_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    LATE_POLICY_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PUSH_PACE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    TREE_FANOUT_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    groups: _containers.RepeatedCompositeFieldContainer[PlanGroup]
    staleness_bound: int
    scale: str
    late_policy: str
    label: str
    push_pace_bytes_per_s: float
    tree_fanout: int
    def __init__(self, epoch: _Optional[int] = ..., groups: _Optional[_Iterable[_Union[PlanGroup, _Mapping]]] = ..., staleness_bound: _Optional[int] = ..., scale: _Optional[str] = ..., late_policy: _Optional[str] = ..., label: _Optional[str] = ..., push_pace_bytes_per_s: _Optional[float] = ..., tree_fanout: _Optional[int] = ...) -> None: ...

class ConfigureReply(_message.Message):
    __slots__ = ("epoch", "version", "released", "flushed")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    version: int
    released: int
    flushed: int
    def __init__(self, epoch: _Optional[int] = ..., version: _Optional[int] = ..., released: _Optional[int] = ..., flushed: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PsStats(_message.Message):
    __slots__ = ("ps_index", "version", "plan_epoch", "plan", "accepted", "applied", "dropped", "pending", "counters", "staleness", "since_first_update_s", "waiting_pulls", "range_start", "range_end", "noise_small_sq", "noise_big_sq", "noise_small_batch", "noise_big_batch", "moved_to", "push_bytes_received", "pushes_received", "plan_in_force")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class StalenessEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    PS_INDEX_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PLAN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    STALENESS_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIRST_UPDATE_S_FIELD_NUMBER: _ClassVar[int]
    WAITING_PULLS_FIELD_NUMBER: _ClassVar[int]
    RANGE_START_FIELD_NUMBER: _ClassVar[int]
    RANGE_END_FIELD_NUMBER: _ClassVar[int]
    NOISE_SMALL_SQ_FIELD_NUMBER: _ClassVar[int]
    NOISE_BIG_SQ_FIELD_NUMBER: _ClassVar[int]
    NOISE_SMALL_BATCH_FIELD_NUMBER: _ClassVar[int]
    NOISE_BIG_BATCH_FIELD_NUMBER: _ClassVar[int]
    MOVED_TO_FIELD_NUMBER: _ClassVar[int]
    PUSH_BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    PUSHES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    PLAN_IN_FORCE_FIELD_NUMBER: _ClassVar[int]
    ps_index: int
    version: int
    plan_epoch: int
    plan: str
    accepted: int
    applied: int
    dropped: int
    pending: int
    counters: _containers.ScalarMap[str, int]
    staleness: _containers.ScalarMap[int, int]
    since_first_update_s: float
    waiting_pulls: int
    range_start: int
    range_end: int
    noise_small_sq: float
    noise_big_sq: float
    noise_small_batch: float
    noise_big_batch: float
    moved_to: str
    push_bytes_received: int
    pushes_received: int
    plan_in_force: Plan
    def __init__(self, ps_index: _Optional[int] = ..., version: _Optional[int] = ..., plan_epoch: _Optional[int] = ..., plan: _Optional[str] = ..., accepted: _Optional[int] = ..., applied: _Optional[int] = ..., dropped: _Optional[int] = ..., pending: _Optional[int] = ..., counters: _Optional[_Mapping[str, int]] = ..., staleness: _Optional[_Mapping[int, int]] = ..., since_first_update_s: _Optional[float] = ..., waiting_pulls: _Optional[int] = ..., range_start: _Optional[int] = ..., range_end: _Optional[int] = ..., noise_small_sq: _Optional[float] = ..., noise_big_sq: _Optional[float] = ..., noise_small_batch: _Optional[float] = ..., noise_big_batch: _Optional[float] = ..., moved_to: _Optional[str] = ..., push_bytes_received: _Optional[int] = ..., pushes_received: _Optional[int] = ..., plan_in_force: _Optional[_Union[Plan, _Mapping]] = ...) -> None: ...

class MigrateOutRequest(_message.Message):
    __slots__ = ("new_address", "drain_timeout_s")
    NEW_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DRAIN_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    new_address: str
    drain_timeout_s: float
    def __init__(self, new_address: _Optional[str] = ..., drain_timeout_s: _Optional[float] = ...) -> None: ...

class MigrateChunk(_message.Message):
    __slots__ = ("data", "total_bytes")
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    total_bytes: int
    def __init__(self, data: _Optional[bytes] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class JoinRequest(_message.Message):
    __slots__ = ("worker_id", "host", "pid", "batch_size")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    host: str
    pid: int
    batch_size: int
    def __init__(self, worker_id: _Optional[int] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., batch_size: _Optional[int] = ...) -> None: ...

class Directives(_message.Message):
    __slots__ = ("amp", "batch_size", "stop", "batch_offset", "batch_from_iteration", "cut_at_once")
    AMP_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    BATCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BATCH_FROM_ITERATION_FIELD_NUMBER: _ClassVar[int]
    CUT_AT_ONCE_FIELD_NUMBER: _ClassVar[int]
    amp: bool
    batch_size: int
    stop: bool
    batch_offset: int
    batch_from_iteration: int
    cut_at_once: bool
    def __init__(self, amp: _Optional[bool] = ..., batch_size: _Optional[int] = ..., stop: _Optional[bool] = ..., batch_offset: _Optional[int] = ..., batch_from_iteration: _Optional[int] = ..., cut_at_once: _Optional[bool] = ...) -> None: ...

class JoinReply(_message.Message):
    __slots__ = ("ps_addresses", "directives")
    PS_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    DIRECTIVES_FIELD_NUMBER: _ClassVar[int]
    ps_addresses: _containers.RepeatedScalarFieldContainer[str]
    directives: Directives
    def __init__(self, ps_addresses: _Optional[_Iterable[str]] = ..., directives: _Optional[_Union[Directives, _Mapping]] = ...) -> None: ...

class IterationReport(_message.Message):
    __slots__ = ("worker_id", "iteration", "compute_s", "push_s", "pull_s", "batch_size", "amp", "loss", "slowdown", "cpu_percent", "heartbeat", "paced_s", "fixed_samples")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_S_FIELD_NUMBER: _ClassVar[int]
    PUSH_S_FIELD_NUMBER: _ClassVar[int]
    PULL_S_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    AMP_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    SLOWDOWN_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    PACED_S_FIELD_NUMBER: _ClassVar[int]
    FIXED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    iteration: int
    compute_s: float
    push_s: float
    pull_s: float
    batch_size: int
    amp: bool
    loss: float
    slowdown: float
    cpu_percent: float
    heartbeat: bool
    paced_s: float
    fixed_samples: float
    def __init__(self, worker_id: _Optional[int] = ..., iteration: _Optional[int] = ..., compute_s: _Optional[float] = ..., push_s: _Optional[float] = ..., pull_s: _Optional[float] = ..., batch_size: _Optional[int] = ..., amp: _Optional[bool] = ..., loss: _Optional[float] = ..., slowdown: _Optional[float] = ..., cpu_percent: _Optional[float] = ..., heartbeat: _Optional[bool] = ..., paced_s: _Optional[float] = ..., fixed_samples: _Optional[float] = ...) -> None: ...

class NicRate(_message.Message):
    __slots__ = ("name", "rx_bytes_per_s", "tx_bytes_per_s", "link_bytes_per_s", "busy_share")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    TX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    LINK_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    BUSY_SHARE_FIELD_NUMBER: _ClassVar[int]
    name: str
    rx_bytes_per_s: float
    tx_bytes_per_s: float
    link_bytes_per_s: float
    busy_share: float
    def __init__(self, name: _Optional[str] = ..., rx_bytes_per_s: _Optional[float] = ..., tx_bytes_per_s: _Optional[float] = ..., link_bytes_per_s: _Optional[float] = ..., busy_share: _Optional[float] = ...) -> None: ...

class PsRunning(_message.Message):
    __slots__ = ("ps_index", "address")
    PS_INDEX_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ps_index: int
    address: str
    def __init__(self, ps_index: _Optional[int] = ..., address: _Optional[str] = ...) -> None: ...

class HostResources(_message.Message):
    __slots__ = ("host", "time_s", "interval_s", "cpu_count", "cpu_percent", "job_cpu_percent", "memory_percent", "memory_available_bytes", "nics", "job_nic", "node_rank", "ps")
    HOST_FIELD_NUMBER: _ClassVar[int]
    TIME_S_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    CPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    JOB_CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_AVAILABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    JOB_NIC_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    PS_FIELD_NUMBER: _ClassVar[int]
    host: str
    time_s: float
    interval_s: float
    cpu_count: int
    cpu_percent: float
    job_cpu_percent: float
    memory_percent: float
    memory_available_bytes: int
    nics: _containers.RepeatedCompositeFieldContainer[NicRate]
    job_nic: str
    node_rank: int
    ps: _containers.RepeatedCompositeFieldContainer[PsRunning]
    def __init__(self, host: _Optional[str] = ..., time_s: _Optional[float] = ..., interval_s: _Optional[float] = ..., cpu_count: _Optional[int] = ..., cpu_percent: _Optional[float] = ..., job_cpu_percent: _Optional[float] = ..., memory_percent: _Optional[float] = ..., memory_available_bytes: _Optional[int] = ..., nics: _Optional[_Iterable[_Union[NicRate, _Mapping]]] = ..., job_nic: _Optional[str] = ..., node_rank: _Optional[int] = ..., ps: _Optional[_Iterable[_Union[PsRunning, _Mapping]]] = ...) -> None: ...

class StartPs(_message.Message):
    __slots__ = ("ps_index", "migrate_from")
    PS_INDEX_FIELD_NUMBER: _ClassVar[int]
    MIGRATE_FROM_FIELD_NUMBER: _ClassVar[int]
    ps_index: int
    migrate_from: str
    def __init__(self, ps_index: _Optional[int] = ..., migrate_from: _Optional[str] = ...) -> None: ...

class NodeCommands(_message.Message):
    __slots__ = ("start_ps", "stop_ps")
    START_PS_FIELD_NUMBER: _ClassVar[int]
    STOP_PS_FIELD_NUMBER: _ClassVar[int]
    start_ps: _containers.RepeatedCompositeFieldContainer[StartPs]
    stop_ps: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, start_ps: _Optional[_Iterable[_Union[StartPs, _Mapping]]] = ..., stop_ps: _Optional[_Iterable[str]] = ...) -> None: ...

class MoveShardRequest(_message.Message):
    __slots__ = ("ps_index", "host")
    PS_INDEX_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ps_index: int
    host: str
    def __init__(self, ps_index: _Optional[int] = ..., host: _Optional[str] = ...) -> None: ...

class MoveShardReply(_message.Message):
    __slots__ = ("accepted", "reason")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    reason: str
    def __init__(self, accepted: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class SetDirectivesRequest(_message.Message):
    __slots__ = ("worker_id", "directives")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    DIRECTIVES_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    directives: Directives
    def __init__(self, worker_id: _Optional[int] = ..., directives: _Optional[_Union[Directives, _Mapping]] = ...) -> None: ...

class SetDirectivesReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JobStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JobStatusReply(_message.Message):
    __slots__ = ("state", "elapsed_s", "max_iteration", "iterations_per_s", "metric", "has_metric", "metric_name", "version", "mode", "reached", "tta_s", "workers_reporting", "reason", "transport", "wire")
    STATE_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    MAX_ITERATION_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_PER_S_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    HAS_METRIC_FIELD_NUMBER: _ClassVar[int]
    METRIC_NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    REACHED_FIELD_NUMBER: _ClassVar[int]
    TTA_S_FIELD_NUMBER: _ClassVar[int]
    WORKERS_REPORTING_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    WIRE_FIELD_NUMBER: _ClassVar[int]
    state: str
    elapsed_s: float
    max_iteration: int
    iterations_per_s: float
    metric: float
    has_metric: bool
    metric_name: str
    version: int
    mode: str
    reached: bool
    tta_s: float
    workers_reporting: int
    reason: str
    transport: str
    wire: str
    def __init__(self, state: _Optional[str] = ..., elapsed_s: _Optional[float] = ..., max_iteration: _Optional[int] = ..., iterations_per_s: _Optional[float] = ..., metric: _Optional[float] = ..., has_metric: _Optional[bool] = ..., metric_name: _Optional[str] = ..., version: _Optional[int] = ..., mode: _Optional[str] = ..., reached: _Optional[bool] = ..., tta_s: _Optional[float] = ..., workers_reporting: _Optional[int] = ..., reason: _Optional[str] = ..., transport: _Optional[str] = ..., wire: _Optional[str] = ...) -> None: ...

class ContributeHeader(_message.Message):
    __slots__ = ("worker_id", "plan_epoch", "shard_versions", "numel", "batch_size")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SHARD_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NUMEL_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    plan_epoch: int
    shard_versions: _containers.RepeatedScalarFieldContainer[int]
    numel: int
    batch_size: int
    def __init__(self, worker_id: _Optional[int] = ..., plan_epoch: _Optional[int] = ..., shard_versions: _Optional[_Iterable[int]] = ..., numel: _Optional[int] = ..., batch_size: _Optional[int] = ...) -> None: ...

class ContributeRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: ContributeHeader
    chunk: TensorChunk
    def __init__(self, header: _Optional[_Union[ContributeHeader, _Mapping]] = ..., chunk: _Optional[_Union[TensorChunk, _Mapping]] = ...) -> None: ...

class ContributeReply(_message.Message):
    __slots__ = ("taken", "reason")
    TAKEN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    taken: bool
    reason: str
    def __init__(self, taken: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class DoorbellRequest(_message.Message):
    __slots__ = ("hello", "push", "pull", "timeout_s")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    PULL_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    hello: DoorbellHello
    push: PushHeader
    pull: PullRequest
    timeout_s: float
    def __init__(self, hello: _Optional[_Union[DoorbellHello, _Mapping]] = ..., push: _Optional[_Union[PushHeader, _Mapping]] = ..., pull: _Optional[_Union[PullRequest, _Mapping]] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class DoorbellHello(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class DoorbellReply(_message.Message):
    __slots__ = ("hello_ok", "push", "pull", "error")
    HELLO_OK_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    PULL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    hello_ok: bool
    push: PushReply
    pull: PullHeader
    error: DoorbellError
    def __init__(self, hello_ok: _Optional[bool] = ..., push: _Optional[_Union[PushReply, _Mapping]] = ..., pull: _Optional[_Union[PullHeader, _Mapping]] = ..., error: _Optional[_Union[DoorbellError, _Mapping]] = ...) -> None: ...

class DoorbellError(_message.Message):
    __slots__ = ("code", "details", "moved_to")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    MOVED_TO_FIELD_NUMBER: _ClassVar[int]
    code: int
    details: str
    moved_to: str
    def __init__(self, code: _Optional[int] = ..., details: _Optional[str] = ..., moved_to: _Optional[str] = ...) -> None: ...
