"""Tree aggregation between workers: a parent sums its children's gradients and pushes once.

Why: when a PS host's NIC is the bottleneck, every worker pushing its own gradient
sends N gradients into that NIC per round; with trees of fanout f only about N/f
arrive there, the rest travel between worker hosts (STAR's traffic relief).

Protocol, per round, under a plan whose `tree_fanout` is set (roles come with each pull):
- A child sends its gradient to its parent's relay (`Contribute`) and blocks until
  the parent has pushed the sum (answer: taken) or will not take it (answer: not
  taken; the child then pushes to the PS itself). A parent that is gone answers
  nothing, so the child also falls back when the call fails.
- The parent, once its own gradient is ready, collects the gradients of its children
  computed on what it pulled (same plan epoch and shard versions), waiting at most
  `tree_wait_s` for the missing ones, and pushes the sum naming them as contributors.
  The PS counts that push as one gradient from each of them.
- A parent whose own pull stays blocked refuses the gradients held for it: its pull
  waits on a round those gradients belong to (shards that switched plans at different
  moments can leave a parent's push taken by one PS and refused by another), and it
  would not collect them before that round closes.
So a child that is late, restarted or on another plan never stalls a round: it just
pushes for itself. `RelayInbox` is the parent's side of this hand-over (threads and a
condition variable, no gRPC); `RelayServer`/`RelayClient` put it on the wire.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import grpc
import torch

from star.flat import ChunkAssembler, FlatError, tensor_chunks
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.limits import MAX_BATCH_SIZE
from star.rpc.common import CHANNEL_OPTIONS, EXCLUSIVE_PORT, address, max_stream_chunks
from star.rpc.security import Credentials

Key = tuple[int, tuple[int, ...]]  # (plan epoch, per-shard versions) a gradient was computed on


@dataclass
class Contribution:
    """One child's gradient waiting at its parent, and the parent's answer once given."""

    worker: int
    key: Key
    gradient: torch.Tensor
    batch_size: int
    decided: threading.Event = field(default_factory=threading.Event)
    arrived_s: float = field(default_factory=time.monotonic)  # when it reached the parent (monotonic clock)
    taken: bool = False
    reason: str = ""

    def answer(self, taken: bool, reason: str = "") -> None:
        self.taken, self.reason = taken, reason
        self.decided.set()


class RelayInbox:
    """The parent's side: children's gradients wait here until the parent takes or refuses them."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._waiting: dict[int, Contribution] = {}  # child -> its latest gradient not yet answered
        self._closed = False

    def offer(self, contribution: Contribution, timeout_s: float) -> Contribution:
        """Leave a child's gradient for the parent; returns once answered (or refused after timeout_s)."""
        with self._lock:
            if self._closed:
                contribution.answer(False, "parent is stopping")
                return contribution
            older = self._waiting.get(contribution.worker)
            if older is not None:
                older.answer(False, "superseded by a newer gradient from the same worker")
            self._waiting[contribution.worker] = contribution
            self._lock.notify_all()
        if not contribution.decided.wait(timeout_s):
            with self._lock:
                if self._waiting.get(contribution.worker) is contribution:
                    del self._waiting[contribution.worker]
                    contribution.answer(False, f"the parent did not take it within {timeout_s:g} s")
            contribution.decided.wait()
        return contribution

    def withdraw(self, contribution: Contribution) -> None:
        """The sender gave up (its call ended): drop its gradient unless the parent already took it."""
        with self._lock:
            if self._waiting.get(contribution.worker) is contribution:
                del self._waiting[contribution.worker]
                contribution.answer(False, "the sender gave up")

    def collect(self, key: Key, children: Iterable[int], wait_s: float, stop: threading.Event | None = None) -> list[Contribution]:
        """The children's gradients computed on `key`, waiting up to `wait_s` for missing ones.

        Those returned are held (their senders still wait) until `settle`; gradients of the
        same children computed on an older key are refused now (their round has passed).
        """
        expected = set(children)
        deadline = time.monotonic() + wait_s
        with self._lock:
            while True:
                ready = {w for w in expected if w in self._waiting and self._waiting[w].key == key}
                remaining = deadline - time.monotonic()
                if ready == expected or remaining <= 0 or (stop is not None and stop.is_set()):
                    break
                self._lock.wait(min(remaining, 0.1))
            taken = [self._waiting.pop(w) for w in sorted(ready)]
            for worker, stale in list(self._waiting.items()):
                if worker in expected and stale.key < key:
                    del self._waiting[worker]
                    stale.answer(False, "computed on parameters older than the parent's")
        return taken

    def refuse_held(self, older_than_s: float, reason: str) -> int:
        """Refuse the gradients that have waited here longer than `older_than_s`; returns how many.

        For a parent whose own pull is blocked: a child's gradient cannot be for a round
        before the one the parent waits on, so that round needs it, and the parent will
        not collect it before the round closes. Held, it would stall the round.
        """
        cutoff = time.monotonic() - older_than_s
        with self._lock:
            held = [c for c in self._waiting.values() if c.arrived_s <= cutoff]
            for contribution in held:
                del self._waiting[contribution.worker]
                contribution.answer(False, reason)
        return len(held)

    def settle(self, taken: Sequence[Contribution], pushed: bool, reason: str = "") -> None:
        """Tell the senders of `taken` whether the parent's push carried their gradients."""
        for contribution in taken:
            contribution.answer(pushed, "" if pushed else reason or "the parent's push was refused")

    def close(self) -> None:
        """Refuse everything waiting and everything offered from now on."""
        with self._lock:
            self._closed = True
            for contribution in self._waiting.values():
                contribution.answer(False, "parent is stopping")
            self._waiting.clear()
            self._lock.notify_all()


class _RelayServicer(pb_grpc.WorkerRelayServicer):
    def __init__(self, inbox: RelayInbox, numel: int, offer_timeout_s: float, max_workers: int):
        self.inbox, self.numel, self.offer_timeout_s, self.max_workers = inbox, numel, offer_timeout_s, max_workers

    def Contribute(self, request_iterator, context: grpc.ServicerContext) -> pb.ContributeReply:
        header, assembler, chunks = None, None, 0
        limit = max_stream_chunks(self.numel)
        try:
            for message in request_iterator:
                if message.HasField("header"):
                    if header is not None:
                        raise ValueError("Contribute stream has two headers")
                    header = message.header
                    _check_header(header, self.numel, self.max_workers)
                    assembler = ChunkAssembler(self.numel)
                elif assembler is None:
                    raise ValueError("Contribute stream must start with a header")
                else:
                    chunks += 1
                    if chunks > limit:
                        raise ValueError(f"Contribute stream has more than {limit} chunks")
                    assembler.add(message.chunk.offset, message.chunk.data)
            if header is None or assembler is None:
                raise ValueError("Contribute stream had no header")
            gradient = assembler.finish()
        except (ValueError, FlatError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        contribution = Contribution(header.worker_id, (header.plan_epoch, tuple(header.shard_versions)), gradient,
                                    header.batch_size)
        context.add_callback(lambda: self.inbox.withdraw(contribution))  # runs when the call ends, however
        answered = self.inbox.offer(contribution, self.offer_timeout_s)
        return pb.ContributeReply(taken=answered.taken, reason=answered.reason)


def _check_header(header: pb.ContributeHeader, numel: int, max_workers: int) -> None:
    if header.numel != numel:
        raise ValueError(f"numel {header.numel} does not match this worker's model ({numel} elements)")
    if header.worker_id >= max_workers:
        raise ValueError(f"worker_id {header.worker_id} is outside 0..{max_workers - 1}")
    if header.batch_size > MAX_BATCH_SIZE:
        raise ValueError(f"batch_size {header.batch_size} exceeds {MAX_BATCH_SIZE}")


class RelayServer:
    """A worker's relay endpoint: children's `Contribute` calls land in `inbox`."""

    def __init__(self, host: str, numel: int, credentials: Credentials, max_workers: int,
                 offer_timeout_s: float = 120.0, threads: int = 16):
        self.inbox = RelayInbox()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="relay"),
                                   options=CHANNEL_OPTIONS + EXCLUSIVE_PORT, interceptors=credentials.server_interceptors(aio=False))
        pb_grpc.add_WorkerRelayServicer_to_server(_RelayServicer(self.inbox, numel, offer_timeout_s, max_workers), self._server)
        port = credentials.add_port(self._server, address(host, 0))
        self.address = address(host, port)
        self._server.start()

    def stop(self) -> None:
        self.inbox.close()
        self._server.stop(grace=1.0)


@dataclass(frozen=True)
class ContributeResult:
    taken: bool
    reason: str
    send_s: float  # until the gradient was handed over (transfer)
    wait_s: float  # after that, waiting for the parent's push (waiting on others)


class RelayClient:
    """A child's side: one channel per parent address, reused while the parent stays the same."""

    def __init__(self, worker_id: int, credentials: Credentials):
        self.worker_id = worker_id
        self._credentials = credentials
        self._channels: dict[str, tuple[grpc.Channel, pb_grpc.WorkerRelayStub]] = {}

    def _stub(self, target: str) -> pb_grpc.WorkerRelayStub:
        if target not in self._channels:
            for channel, _ in self._channels.values():
                channel.close()  # roles change rarely: keep only the current parent's channel
            channel = self._credentials.channel(target, CHANNEL_OPTIONS)
            self._channels = {target: (channel, pb_grpc.WorkerRelayStub(channel))}
        return self._channels[target][1]

    def contribute(self, target: str, gradient: torch.Tensor, key: Key, batch_size: int, *, poll_s: float,
                   timeout_s: float, on_wait: Callable[[], str | None] = lambda: None) -> ContributeResult:
        """Hand `gradient` to the parent at `target`. `on_wait` runs every `poll_s` while it is held there
        and may give up on the parent by returning why (a frozen parent never answers; the plan moves on)."""
        start = time.monotonic()
        sent = [start]
        header = pb.ContributeHeader(worker_id=self.worker_id, plan_epoch=key[0], shard_versions=list(key[1]),
                                     numel=gradient.numel(), batch_size=batch_size)

        def messages():
            yield pb.ContributeRequest(header=header)
            for offset, data in tensor_chunks(gradient):
                yield pb.ContributeRequest(chunk=pb.TensorChunk(offset=offset, data=data))
            sent[0] = time.monotonic()

        call = self._stub(target).Contribute.future(messages(), timeout=timeout_s)
        try:
            while True:
                try:
                    reply = call.result(timeout=poll_s)
                    break
                except grpc.FutureTimeoutError:
                    give_up = on_wait()
                    if give_up is not None and call.cancel():
                        reply = pb.ContributeReply(taken=False, reason=give_up)
                        break
        except grpc.RpcError as exc:
            reply = pb.ContributeReply(taken=False, reason=f"parent {target} unreachable: {exc.code().name}")
        end = time.monotonic()
        return ContributeResult(reply.taken, reply.reason, sent[0] - start, end - sent[0])

    def close(self) -> None:
        for channel, _ in self._channels.values():
            channel.close()
        self._channels = {}


def sum_into(total: torch.Tensor, contributions: Sequence[Contribution]) -> int:
    """Add the children's gradients to `total` (in place); returns their summed batch size."""
    for contribution in contributions:
        total.add_(contribution.gradient)
    return sum(c.batch_size for c in contributions)

