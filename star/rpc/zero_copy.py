"""The PS client's side of zero-copy pushes: the worker's gradient segment (star/shm.py GradSegment),
offered at Register, and stamped per shard when a push leaves the gradient there for a PS that mapped it.
Kept apart from star/rpc/ps_client.py so that the client's call logic stays readable."""

from __future__ import annotations

import torch

from star.rpc import star_pb2 as pb
from star.shm import GradSegment


class ZeroCopyPushes:
    """`mapped[i]`: PS i mapped the segment, so a push of the segment itself to it moves no bytes."""

    def __init__(self, segment: GradSegment | None, shards: int):
        self.segment = segment
        self.mapped = [False] * shards
        self._stamped: list[tuple[tuple, int] | None] = [None] * shards  # (push key, stamp) of each shard's last push

    def requests(self, request: pb.RegisterRequest, total_numel: int) -> list[pb.RegisterRequest]:
        """The Register message for each PS: with the segment offered (and that PS's stamp word) when there is
        one that fits, else `request` itself."""
        segment, shards = self.segment, len(self.mapped)
        if segment is None or not request.want_shm or segment.numel != total_numel or segment.shards < shards:
            return [request] * shards
        messages = []
        for i in range(shards):
            message = pb.RegisterRequest()
            message.CopyFrom(request)
            message.shm_grad_name, message.shm_grad_nonce = segment.path.name, segment.nonce
            message.shm_grad_shards, message.shm_grad_shard = segment.shards, i
            messages.append(message)
        return messages

    def forget(self, i: int) -> None:
        """Shard i's mailbox is gone (moved, restarted PS): pushes to it copy again until the next Register."""
        self.mapped[i] = False
        self._stamped[i] = None

    def new_round(self) -> None:
        """After a pull every shard answered: no PS holds the last gradient, so the worker may write the
        segment again; clearing the stamps now makes any later write visible as one."""
        self._stamped = [None] * len(self._stamped)
        if self.segment is not None:
            self.segment.begin_write()

    def applies(self, i: int, grads: torch.Tensor) -> bool:
        """Whether `grads` is the segment itself and PS i mapped it."""
        segment = self.segment
        return (self.mapped[i] and segment is not None and grads.numel() == segment.numel
                and grads.data_ptr() == segment.area.data_ptr())

    def stamp(self, i: int, key: tuple) -> int:
        """Stamp shard i's range as pushed; the same push sent again (a retry after a lost reply) reuses its
        stamp, since the PS may hold the first in place (as a mailbox push's retry does)."""
        assert self.segment is not None
        last = self._stamped[i]
        if last is not None and last[0] == key and self.segment.intact(i, last[1]):
            return last[1]
        seq = self.segment.stamp(i)
        self._stamped[i] = (key, seq)
        return seq
