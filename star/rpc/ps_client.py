"""Client side of the PS protocol: push to and pull from every shard concurrently.

One channel per PS and one thread per PS for the blocking calls, so a round trip to P servers costs about as long
as the slowest of them, not their sum. Payloads go straight between the flat buffer and wire chunks (float32, or
bfloat16 with wire="bfloat16"), or, with a PS on this host, through the shared-memory mailbox it offered (star/shm.py;
the gRPC call then carries only the header, or the PS's doorbell socket does: star/rpc/doorbell.py), or, with a PS
on another host, as raw bytes on the PS's socket channel (star/rpc/socket_channel.py).
transport="auto" takes a mailbox where one is offered and works (the nonce proves the same memory), else
the socket channel where one is offered; "shm" requires a mailbox, "socket" the socket channel, "grpc"
never asks for either. A client given the worker's gradient segment (star/shm.py GradSegment) offers it
at Register; a push of that very buffer to a PS that mapped it copies nothing (the header says shm_grad).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

import grpc
import torch

from star.config import check_transport_fields
from star.flat import WIRE_DTYPE, ShardRange, shard_ranges, tensor_chunks, write_chunk
from star.plan import SyncPlan
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import CHANNEL_OPTIONS, MOVED_TO_KEY, PsUnreachable, plan_to_proto, tune_malloc
from star.rpc.doorbell import Doorbell, DoorbellBroken
from star.rpc.security import Credentials
from star.rpc.socket_channel import SocketChannel
from star.rpc.zero_copy import ZeroCopyPushes
from star.shm import GradSegment, Mailbox, PullBoard, ShmError

T = TypeVar("T")

MAX_REDIRECTS = 4  # a shard that keeps moving faster than a call can follow is an outage


def moved_to(exc: grpc.RpcError) -> str | None:
    """The address a moved PS redirects to (UNAVAILABLE with MOVED_TO_KEY metadata), else None."""
    if exc.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    try:
        metadata = exc.trailing_metadata() or ()
    except AttributeError:
        return None
    return next((value for key, value in metadata if key == MOVED_TO_KEY), None)


@dataclass
class ShardView:
    """What a worker knows about one PS after its last pull."""

    range: ShardRange
    version: int = 0
    epoch: int = 0
    since_first_update_s: float = -1.0
    version_applied_s: float | None = None  # when `version` was applied, on the same clock (None: not known)
    push_pace_bytes_per_s: float = 0.0  # the plan's push budget per worker (0: unpaced)
    tree_parent: str = ""  # tree aggregation: the parent's relay address ("": push to the PS)
    tree_children: tuple[int, ...] = ()  # tree aggregation: whose gradients this worker collects


class PSClient:
    def __init__(self, addresses: Sequence[str], worker_id: int = 0, credentials: Credentials | None = None,
                 transport: str = "auto", wire: str = WIRE_DTYPE, doorbell: bool = True,
                 grad_segment: GradSegment | None = None):
        """`credentials` default to the job token in STAR_JOB_TOKEN (if any), without TLS. `doorbell`: ring a
        same-host PS's doorbell for shared-memory headers when it offers one (False: always the RPCs).
        `grad_segment`: the worker's flat gradient in shared memory (the caller owns and closes it)."""
        if not addresses:
            raise ValueError("ps_addresses must name at least one parameter server")
        check_transport_fields(transport, wire)
        self.transport, self.wire = transport, wire
        self.mailboxes: list[Mailbox | None] = [None] * len(addresses)
        self.boards: list[PullBoard | None] = [None] * len(addresses)  # each PS's pull board (with its mailbox)
        self.doorbells: list[Doorbell | None] = [None] * len(addresses)  # each PS's header socket (with its mailbox)
        self.sockets: list[SocketChannel | None] = [None] * len(addresses)  # each PS's socket channel (no mailbox here)
        self.use_doorbell = doorbell
        self.zero_copy = ZeroCopyPushes(grad_segment, len(addresses))
        self._written: list[tuple[tuple, Mailbox, int] | None] = [None] * len(addresses)  # last push put in each mailbox
        self.addresses = list(addresses)
        self.worker_id = worker_id
        tune_malloc()  # chunk bytes and protobuf copies are allocated and freed on every push/pull
        credentials = credentials if credentials is not None else Credentials.load()
        self._credentials = credentials
        self._channels = [credentials.channel(a, CHANNEL_OPTIONS) for a in self.addresses]
        self._stubs = [pb_grpc.ParameterServerStub(c) for c in self._channels]
        self._pool = ThreadPoolExecutor(max_workers=len(self.addresses), thread_name_prefix="ps-io")
        self.views: list[ShardView] = []
        self.total_numel = 0

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._drop_mailboxes()
        for channel in self._channels:
            channel.close()

    def __enter__(self) -> "PSClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def retarget(self, index: int, address: str) -> None:
        """Talk to shard `index` at a new address from now on (it moved)."""
        old = self._channels[index]
        self._channels[index] = self._credentials.channel(address, CHANNEL_OPTIONS)
        self._stubs[index] = pb_grpc.ParameterServerStub(self._channels[index])
        self.addresses[index] = address
        old.close()
        self._drop_mailboxes(index)  # the mailbox was the old PS's: gRPC until the next Register

    def _drop_mailboxes(self, only: int | None = None) -> None:
        for i, (box, board, bell, channel) in enumerate(zip(self.mailboxes, self.boards, self.doorbells, self.sockets)):
            if only in (None, i):
                for segment in (box, board, bell, channel):
                    if segment is not None:
                        segment.close()
                self.mailboxes[i] = self.boards[i] = self.doorbells[i] = self.sockets[i] = self._written[i] = None
                self.zero_copy.forget(i)

    @property
    def grad_mapped(self) -> list[bool]:
        """Per PS: it mapped this worker's gradient segment (pushes of that buffer copy nothing)."""
        return self.zero_copy.mapped

    @property
    def transport_used(self) -> str:
        """How payloads move now: "shm" (every shard's mailbox), "socket" (every shard's socket channel),
        "grpc" (neither) or "mixed"."""
        used = {"shm" if box is not None else "socket" if channel is not None else "grpc"
                for box, channel in zip(self.mailboxes, self.sockets)}
        return used.pop() if len(used) == 1 else "mixed"

    def _attach(self, index: int, reply: pb.RegisterReply) -> None:
        """Map the mailbox and pull board shard `index` offered (transport auto/shm), or say why there are none
        (both or neither: the PS serves pulls from its board to any worker with a mailbox); without them,
        connect to the PS's socket channel (transport auto/socket)."""
        numel = self.views[index].range.numel
        try:
            if not reply.shm_name or not reply.shm_board_name:
                raise ShmError("it offered no shared-memory mailbox (shm disabled there, or /dev/shm full)")
            if self.transport == "socket":
                raise ShmError("transport=socket maps no shared memory")
            self.mailboxes[index] = Mailbox.attach(reply.shm_name, numel, reply.shm_nonce)
            self.boards[index] = PullBoard.attach(reply.shm_board_name, numel, reply.shm_board_slots, reply.shm_board_nonce)
            self.zero_copy.mapped[index] = reply.shm_grad_mapped and self.zero_copy.segment is not None
        except ShmError as exc:
            self._drop_mailboxes(index)
            if self.transport == "shm":
                raise RuntimeError(f"transport=shm: PS {index} at {self.addresses[index]}: {exc}") from None
            self._connect_socket(index, reply)
            return
        if reply.shm_doorbell and self.use_doorbell:
            try:
                self.doorbells[index] = Doorbell(reply.shm_doorbell, self._credentials.token)
            except (OSError, grpc.RpcError):  # the PS's headers then go by PushShm / PullShm
                self.doorbells[index] = None

    def _connect_socket(self, index: int, reply: pb.RegisterReply) -> None:
        """Open shard `index`'s socket channel (a mailbox at the PS, no shared memory here); without one,
        payloads go by gRPC, unless transport=socket, which requires it."""
        host = self.addresses[index].rpartition(":")[0].strip("[]")
        why = "it offered none (socket channel or shared memory off there)"
        if reply.socket_port and reply.shm_name:
            try:
                self.sockets[index] = SocketChannel(host, reply.socket_port, self._credentials)
                return
            except (OSError, grpc.RpcError) as exc:
                why = f"cannot connect to port {reply.socket_port}: {exc}"
        if self.transport == "socket":
            raise RuntimeError(f"transport=socket: PS {index} at {self.addresses[index]}: {why}")

    def _over_socket(self, index: int, call: Callable[[SocketChannel], T]) -> T | None:
        """`call` on shard `index`'s socket channel; None (the caller goes over gRPC) when there is none, when
        the connection broke (it is dropped) or when the PS lost this worker's mailbox."""
        channel = self.sockets[index]
        if channel is None or channel.closed:
            return None
        try:
            return call(channel)
        except DoorbellBroken:
            self._drop_mailboxes(index)
            return None
        except grpc.RpcError as exc:
            if not _lost_mailbox(exc):
                raise
            self._drop_mailboxes(index)
            return None

    def _following_moves(self, index: int, call: Callable[[int, pb_grpc.ParameterServerStub], T]) -> T:
        """`call` against shard `index`, following it (and re-issuing the call) when it moved."""
        for _ in range(MAX_REDIRECTS):
            try:
                return call(index, self._stubs[index])
            except grpc.RpcError as exc:
                target = moved_to(exc)
                if target is None or target == self.addresses[index]:
                    raise
                self.retarget(index, target)
        return call(index, self._stubs[index])

    def _each(self, call: Callable[[int, pb_grpc.ParameterServerStub], T]) -> list[T]:
        """Run `call` against every PS concurrently; re-raise the first error."""
        futures = [self._pool.submit(self._following_moves, i, call) for i in range(len(self._stubs))]
        return [f.result() for f in futures]

    # ---- setup -----------------------------------------------------------------
    def wait_ready(self, timeout_s: float) -> None:
        """Block until every PS channel connects; PsUnreachable (a grpc.FutureTimeoutError) names the first that did not."""
        for where, channel in zip(self.addresses, self._channels):
            try:
                grpc.channel_ready_future(channel).result(timeout=timeout_s)
            except grpc.FutureTimeoutError:
                raise PsUnreachable(f"parameter server {where} accepted no connection in {timeout_s:g} s: nothing serves "
                                    "there, or the TLS handshake failed (certificate, CA, server name)") from None

    def register(self, total_numel: int, timeout_s: float = 10.0, relay_address: str = "") -> list[pb.RegisterReply]:
        """`relay_address`: where this worker takes tree children's gradients ("": it takes none)."""
        self.total_numel = total_numel
        ranges = shard_ranges(total_numel, len(self._stubs))
        self.views = [ShardView(r) for r in ranges]
        request = pb.RegisterRequest(worker_id=self.worker_id, total_numel=total_numel, relay_address=relay_address,
                                     want_shm=self.transport != "grpc")
        messages = self.zero_copy.requests(request, total_numel) if self.transport != "socket" else [request] * len(self._stubs)
        self._drop_mailboxes()
        replies = self._each(lambda i, s: s.Register(messages[i], timeout=timeout_s))
        for i, reply in enumerate(replies):
            if reply.num_ps != len(self._stubs) or reply.ps_index != i:
                raise RuntimeError(
                    f"PS at {self.addresses[i]} says it is ps_index={reply.ps_index} of num_ps={reply.num_ps}; "
                    f"this client expects ps_index={i} of {len(self._stubs)} (check the order of ps_addresses)"
                )
            if request.want_shm:
                self._attach(i, reply)
        return replies

    def init_if_needed(self, params: torch.Tensor, replies: list[pb.RegisterReply], timeout_s: float = 30.0) -> int:
        """Send initial parameters to every PS that has none; returns how many accepted them."""

        def init(i: int, stub: pb_grpc.ParameterServerStub) -> bool:
            if replies[i].initialized:
                return False
            r = self.views[i].range

            def messages():
                yield pb.InitRequest(header=pb.InitHeader(total_numel=self.total_numel, dtype=WIRE_DTYPE))
                for offset, data in tensor_chunks(params[r.start : r.end]):
                    yield pb.InitRequest(chunk=pb.TensorChunk(offset=offset, data=data))

            return stub.Init(messages(), timeout=timeout_s).applied

        return sum(self._each(init))

    # ---- data path -------------------------------------------------------------
    def pull(self, out: torch.Tensor, timeout_s: float | None = None, observer: bool = False,
             min_version: int = 0, wait_s: float = 0.0) -> list[ShardView]:
        """Fill `out` (the flat parameter buffer) from every PS; may block on sync rounds. An observer
        with `min_version` gets the parameters only of shards at or past it (the others' views say
        how far they are, and their part of `out` is left as it was); with `wait_s`, a shard below it
        holds the call up to that long for the version to come."""
        if not observer:
            self._written = [None] * len(self._written)  # a new round: the next push is a new gradient
        views = self._pull(out, timeout_s, observer, min_version, wait_s)
        if not observer:
            self.zero_copy.new_round()
        return views

    def _pull(self, out: torch.Tensor, timeout_s: float | None, observer: bool, min_version: int,
              wait_s: float = 0.0) -> list[ShardView]:
        def pull_one(i: int, stub: pb_grpc.ParameterServerStub) -> None:
            if not observer:
                view = self.views[i]
                request = pb.PullRequest(worker_id=self.worker_id, shm=True, dtype=self.wire)
                header = self._over_socket(i, lambda channel: channel.pull(request, out[view.range.start : view.range.end],
                                                                          timeout_s))
                if header is not None:
                    self._take_pull_header(i, header, out)
                    return
            if observer and self.boards[i] is not None:
                try:
                    self._stream_pull(i, stub, out, timeout_s, observer, min_version, board=True, wait_s=wait_s)
                    return
                except ShmError:  # the slot was rewritten while copied: this shard's version again, as chunks
                    pass
            self._stream_pull(i, stub, out, timeout_s, observer, min_version, board=False, wait_s=wait_s)

        if observer or not self._all_shm:
            self._each(pull_one)
            return self.views
        request = pb.PullRequest(worker_id=self.worker_id, shm=True, dtype=self.wire)
        ring = pb.DoorbellRequest(pull=request, timeout_s=timeout_s or 0.0)
        headers = self._all_at_once(lambda i, stub: self._unary(i, stub.PullShm, request, ring, timeout_s), pull_one)
        for i, header in enumerate(headers):
            if header is not None:  # None: a shard that moved, pulled through pull_one
                self._take_pull_header(i, header, out)
        return self.views

    def _stream_pull(self, i: int, stub: pb_grpc.ParameterServerStub, out: torch.Tensor, timeout_s: float | None,
                     observer: bool, min_version: int, board: bool, wait_s: float = 0.0) -> None:
        """Shard `i`'s Pull call. A worker with a mailbox, and an observer asking for the `board`, may be
        answered with a header that points into shared memory; anyone else gets the parameters as chunks."""
        shm = board if observer else self.mailboxes[i] is not None
        request = pb.PullRequest(worker_id=self.worker_id, observer=observer, shm=shm, dtype=self.wire,
                                 min_version=min_version if observer else 0, wait_s=wait_s if observer else 0.0)
        dtype = self.wire
        for reply in stub.Pull(request, timeout=timeout_s):
            if reply.HasField("header"):
                dtype = self._take_pull_header(i, reply.header, out)
            else:
                write_chunk(out, self.views[i].range.start + reply.chunk.offset, reply.chunk.data, dtype)

    def _take_pull_header(self, i: int, h: pb.PullHeader, out: torch.Tensor) -> str:
        """Record what shard `i` served and copy its parameters out of shared memory when they are there;
        returns the dtype of the chunks that follow otherwise."""
        view, box = self.views[i], self.mailboxes[i]
        start = view.range.start
        if h.numel != view.range.numel or h.range_start != start:
            raise RuntimeError(f"PS {i} serves [{h.range_start}, +{h.numel}), expected {view.range}")
        view.version, view.epoch, view.since_first_update_s = h.version, h.plan_epoch, h.since_first_update_s
        view.version_applied_s = h.version_applied_s if h.HasField("version_applied_s") else None
        view.push_pace_bytes_per_s = h.push_pace_bytes_per_s
        view.tree_parent, view.tree_children = h.tree_parent, tuple(h.tree_children)
        if h.shm_seq:
            board = self.boards[i]
            if box is None or board is None:
                raise RuntimeError(f"PS {i} answered through a shared-memory mailbox this client does not have")
            if h.shm_slot:
                board.take(h.shm_slot - 1, out[start : view.range.end], h.shm_seq)
            else:
                box.take_pull(out[start : view.range.end], h.shm_seq)
        return h.dtype or WIRE_DTYPE

    @property
    def _all_shm(self) -> bool:
        """Every shard has this worker's mailbox: payloads go through shared memory, calls are unary."""
        return all(box is not None for box in self.mailboxes)

    def _all_at_once(self, start: Callable[[int, pb_grpc.ParameterServerStub], grpc.Future],
                     fallback: Callable[[int, pb_grpc.ParameterServerStub], T]) -> list:
        """Start a unary call on every PS from this thread (no pool: the shared-memory path's calls are
        short) and wait for them all. A shard that moved, or that has no mailbox for this worker any more,
        is called again through `fallback` (the streaming call, which follows moves) over gRPC. Every call
        is waited for before the first error is raised: a doorbell stays busy until its answer is read."""
        futures = [start(i, stub) for i, stub in enumerate(self._stubs)]
        results: list = []
        error: grpc.RpcError | None = None
        for i, future in enumerate(futures):
            try:
                results.append(future.result())
            except grpc.RpcError as exc:
                if moved_to(exc) is None and not _lost_mailbox(exc):
                    error = error or exc
                    results.append(None)
                    continue
                self._drop_mailboxes(i)
                results.append(self._following_moves(i, fallback))
        if error is not None:
            raise error
        return results

    @property
    def push_pace_bytes_per_s(self) -> float | None:
        """The push budget of the plan the last pull ran under (the strictest shard's), None when unpaced."""
        paced = [v.push_pace_bytes_per_s for v in self.views if v.push_pace_bytes_per_s > 0]
        return min(paced) if paced else None

    @property
    def tree_role(self) -> tuple[str, tuple[int, ...]]:
        """(parent relay address, children) under the plan of the last pull. Every shard runs the same
        plan; a role holds only when every shard gave it (shards mid-switch: push to the PS)."""
        roles = {(v.tree_parent, v.tree_children) for v in self.views}
        return roles.pop() if len(roles) == 1 else ("", ())

    @property
    def pulled_key(self) -> tuple[int, tuple[int, ...]]:
        """(epoch, per-shard versions) of the last pull: gradients computed on the same key may be summed."""
        epochs = {v.epoch for v in self.views}
        return (epochs.pop() if len(epochs) == 1 else -1), tuple(v.version for v in self.views)

    def push(self, grads: torch.Tensor, iteration: int, timeout_s: float | None = None, batch_size: int = 0,
             contributors: Sequence[int] = ()) -> list[pb.PushReply]:
        """Send each PS its slice of the flat gradient, tagged with what this worker last pulled.
        `contributors`: the tree children whose gradients `grads` already sums."""

        key = (iteration, grads.data_ptr(), grads._version, batch_size, tuple(contributors))

        def header_for(i: int) -> pb.PushHeader:
            view, box = self.views[i], self.mailboxes[i]
            if box is not None and self.zero_copy.applies(i, grads):
                return pb.PushHeader(worker_id=self.worker_id, plan_epoch=view.epoch, base_version=view.version,
                                     iteration=iteration, dtype=WIRE_DTYPE, numel=view.range.numel, batch_size=batch_size,
                                     contributors=list(contributors), shm_seq=self.zero_copy.stamp(i, key), shm_grad=True)
            return pb.PushHeader(
                worker_id=self.worker_id,
                plan_epoch=view.epoch,
                base_version=view.version,
                iteration=iteration,
                dtype=WIRE_DTYPE if box is not None else self.wire,
                numel=view.range.numel,
                batch_size=batch_size,
                contributors=list(contributors),
                shm_seq=self._put_push(i, box, grads[view.range.start : view.range.end], key) if box is not None else 0,
            )

        def push_one(i: int, stub: pb_grpc.ParameterServerStub) -> pb.PushReply:
            header = header_for(i)
            view = self.views[i]
            reply = self._over_socket(i, lambda channel: channel.push(header, grads[view.range.start : view.range.end],
                                                                      timeout_s))
            if reply is not None:
                return reply

            def messages():
                yield pb.PushRequest(header=header)
                if not header.shm_seq:
                    view = self.views[i]
                    for offset, data in tensor_chunks(grads[view.range.start : view.range.end], dtype=self.wire):
                        yield pb.PushRequest(chunk=pb.TensorChunk(offset=offset, data=data))

            return stub.Push(messages(), timeout=timeout_s)

        if not self._all_shm:
            return self._each(push_one)
        headers = [header_for(i) for i in range(len(self._stubs))]
        return self._all_at_once(lambda i, stub: self._unary(i, stub.PushShm, headers[i],
                                                             pb.DoorbellRequest(push=headers[i], timeout_s=timeout_s or 0.0),
                                                             timeout_s), push_one)

    def _unary(self, i: int, rpc, message, ring: pb.DoorbellRequest, timeout_s: float | None):
        """Start a shared-memory header call on shard `i`: by its doorbell when there is one (falling back to
        the RPC if the socket breaks), else the unary RPC. Either way a future whose result() is the reply."""
        bell = self.doorbells[i]
        if bell is None or bell.closed:
            return rpc.future(message, timeout=timeout_s)
        return bell.ring(ring, lambda: rpc(message, timeout=timeout_s))

    def _put_push(self, i: int, box: Mailbox, gradient: torch.Tensor, key: tuple) -> int:
        """Write the gradient into shard `i`'s mailbox before the call; returns its stamp. The same push sent
        again (a retry after a lost reply: same iteration, same unchanged tensor) reuses the stamp without
        writing: the PS may hold the first copy in place, and a new stamp would make it leave that out."""
        last = self._written[i]
        if last is not None and last[0] == key and last[1] is box and box.push_intact(last[2]):
            return last[2]
        seq = box.put_push(gradient)
        self._written[i] = (key, box, seq)
        return seq

    # ---- control ---------------------------------------------------------------
    def configure(self, plan: SyncPlan, timeout_s: float = 10.0) -> list[pb.ConfigureReply]:
        message = plan_to_proto(plan)
        return self._each(lambda i, s: s.ConfigurePlan(message, timeout=timeout_s))

    def stats(self, timeout_s: float = 5.0) -> list[pb.PsStats]:
        return self._each(lambda i, s: self._stats_following_moves(i, timeout_s))

    def stats_each(self, timeout_s: float = 5.0) -> list[pb.PsStats | grpc.RpcError]:
        """Every PS's stats, or the error it answered with (one PS down does not hide the others)."""
        return self._each(lambda i, s: _or_error(lambda: self._stats_following_moves(i, timeout_s)))

    def _stats_following_moves(self, index: int, timeout_s: float) -> pb.PsStats:
        """A moved PS still answers Stats (saying where its shard went): ask the new home instead."""
        reply = self._stubs[index].Stats(pb.StatsRequest(), timeout=timeout_s)
        for _ in range(MAX_REDIRECTS):
            if not reply.moved_to or reply.moved_to == self.addresses[index]:
                break
            self.retarget(index, reply.moved_to)
            reply = self._stubs[index].Stats(pb.StatsRequest(), timeout=timeout_s)
        return reply

    def configure_each(self, plan: SyncPlan, timeout_s: float = 10.0, only: set[int] | None = None) -> dict[int, pb.ConfigureReply | grpc.RpcError]:
        """Send the plan to every PS (or those in `only`); per PS its reply or its error."""
        message = plan_to_proto(plan)
        targets = [i for i in range(len(self._stubs)) if only is None or i in only]
        futures = {i: self._pool.submit(_or_error, lambda i=i: self._following_moves(
                       i, lambda _, s: s.ConfigurePlan(message, timeout=timeout_s))) for i in targets}
        return {i: f.result() for i, f in futures.items()}


def stats_at(address: str, credentials: Credentials, timeout_s: float = 5.0) -> pb.PsStats:
    """One PS's own stats, without following a move (e.g. the version a moved-away PS handed over)."""
    channel = credentials.channel(address, CHANNEL_OPTIONS)
    try:
        return pb_grpc.ParameterServerStub(channel).Stats(pb.StatsRequest(), timeout=timeout_s)
    finally:
        channel.close()


def _lost_mailbox(exc: grpc.RpcError) -> bool:
    """The PS has no mailbox for this worker (it restarted, or the shard moved in): gRPC until the next Register."""
    return exc.code() == grpc.StatusCode.FAILED_PRECONDITION and "no shared-memory mailbox" in (exc.details() or "")


def _or_error(call: Callable[[], T]) -> T | grpc.RpcError:
    try:
        return call()
    except grpc.RpcError as exc:
        return exc
