"""Same-host shared memory: Push and Pull payloads at memory speed, gRPC carrying the header.

One mailbox per (PS, worker): a file under /dev/shm that the PS creates when a worker registers
asking for one (RegisterRequest.want_shm) and that the worker only attaches to. Layout: a
4 KiB header page, then the push area and the pull area (the PS's shard length in float32 each).
One pull board per PS: a few areas of the shard's length, each holding one parameter version that
the PS writes once and every same-host worker reads (star/ps_server/board.py decides which slot may
be written); a worker's own pull area is the fallback when every slot is still being read.

Ownership rule (nothing is read half-written): the push area belongs to the worker until it sends
Push, then to the PS until that gradient is applied or dropped. Pushing again needs a Pull in between,
and the PS answers a worker's Pull only once its previous gradient left the open round, so the worker
never writes a gradient the PS still holds; the PS therefore sums it straight out of the mailbox, no
copy. The pull area belongs to the PS only while it serves that worker's Pull; the worker checks the
stamp and copies the parameters out before its next call. Should the rule ever be broken, a reader
still never takes a mix of two versions: a writer clears the stamp before it writes and stamps after
(stamps only grow), and a reader checks the stamp before and after using the data (a seqlock); a
stamp that does not match is refused (`bad_shm_seq` at the PS, or the gradient left out of its sum),
never used. (Store order is x86's TSO.)

Zero copy on the push (`GradSegment`): a same-host CPU worker computes its whole flat gradient
straight into a segment it owns, and each PS that could map it sums its range from there, so the
push moves no bytes at all. The same ownership rule holds, with the worker's stamps one per shard:
the worker clears them all before it writes a gradient (`begin_write`, after the pull that ended
the previous round) and stamps shard i when it pushes to PS i; the PS checks the stamp before and
after using the range, like a mailbox's.

No leaks: names carry the job and the owning process's pid (`star-<job>-<pid>-ps<i>-w<worker>`,
`...-ps<i>-board`, the doorbell socket `...-ps<i>-bell`, and a worker's `star-<job>-<pid>-w<worker>-grad`);
a PS unlinks its mailboxes when it exits, a worker its gradient segment, and `sweep()` (run when a PS or a launcher starts and when a
launcher ends) unlinks every mailbox whose owner is gone, which is what a kill -9 leaves behind.
The files are created 0600, so only the job's user can map them; callers still pass the job token.
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
from pathlib import Path
from typing import Callable

import numpy as np
import psutil
import torch

SHM_DIR = Path("/dev/shm")
PREFIX = "star-"
HEADER_BYTES = 4096
MAGIC = 0x53544152_53484D31  # "STARSHM1"
_NONCE_BYTES = 16
# Header words (uint64) after the magic and the 16-byte nonce.
_NUMEL, _PUSH_SEQ, _PULL_SEQ, _PULL_VERSION = 3, 4, 5, 6
_BOARD_WORDS = 8  # a pull board's first slot word; each slot has two (stamp, version)
MAX_BOARD_SLOTS = (HEADER_BYTES // 8 - _BOARD_WORDS) // 2
_NAME = re.compile(r"^star-(?P<job>[A-Za-z0-9_]{1,32})-(?P<pid>\d+)-(ps\d+-(w\d+|board|bell)|w\d+-grad)$")
MAX_GRAD_SHARDS = HEADER_BYTES // 8 - _BOARD_WORDS  # a gradient segment's stamp words, one per PS shard


class ShmError(RuntimeError):
    """A mailbox cannot be made, attached or read; the message says which and why."""


def job_tag(job_id: str) -> str:
    """The job part of a mailbox name: the job id's letters, digits and `_` (at most 32), or `job`."""
    tag = re.sub(r"[^A-Za-z0-9_]", "_", job_id)[:32]
    return tag or "job"


def mailbox_name(job_id: str, ps_index: int, worker: int, pid: int | None = None) -> str:
    return f"{PREFIX}{job_tag(job_id)}-{os.getpid() if pid is None else pid}-ps{ps_index}-w{worker}"


def _owner_alive(pid: int, path: Path) -> bool:
    """Whether the process that made segment `path` still runs: process `pid` exists, is no zombie (dead but not yet
    reaped), and started before the segment was last written. Pids wrap (32,768 on many machines): in a 20-minute
    test run a killed worker's pid came back as another process's, and the dead worker's segment outlived the run."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return process.create_time() <= path.stat().st_mtime + _CLOCK_SLACK_S
    except (psutil.NoSuchProcess, FileNotFoundError):
        return False
    except psutil.AccessDenied:
        return True


_CLOCK_SLACK_S = 1.0  # process start times are rounded to the kernel's clock ticks; a segment is made after its owner starts


def sweep(directory: Path = SHM_DIR) -> list[str]:
    """Unlink every mailbox whose owning PS process is gone (what a kill -9 leaves); returns their names."""
    removed = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = _NAME.match(path.name)
        if match and not _owner_alive(int(match["pid"]), path):
            try:
                path.unlink()
                removed.append(path.name)
            except FileNotFoundError:
                pass
    return removed


def mailbox_bytes(numel: int) -> int:
    return HEADER_BYTES + 2 * 4 * numel


def grad_segment_name(job_id: str, worker: int, pid: int | None = None) -> str:
    return f"{PREFIX}{job_tag(job_id)}-{os.getpid() if pid is None else pid}-w{worker}-grad"


def board_name(job_id: str, ps_index: int, pid: int | None = None) -> str:
    return f"{PREFIX}{job_tag(job_id)}-{os.getpid() if pid is None else pid}-ps{ps_index}-board"


def doorbell_path(job_id: str, ps_index: int, pid: int | None = None, directory: Path = SHM_DIR) -> Path:
    """The PS's doorbell socket (star/ps_server/doorbell.py), named like its mailboxes so sweep() finds it."""
    return directory / f"{PREFIX}{job_tag(job_id)}-{os.getpid() if pid is None else pid}-ps{ps_index}-bell"


class _Segment:
    """A file under /dev/shm: a 4 KiB header page (magic, nonce, numel, then the user's words) and
    float32 data, mapped into this process. The creator (a PS) writes the header; an attacher (a worker)
    checks that it finds the nonce it was told, the proof that both see the same memory."""

    def __init__(self, path: Path, numel: int, data_numel: int, owner: bool, fd: int):
        self.path, self.numel, self.owner = path, numel, owner
        try:
            self._map = mmap.mmap(fd, HEADER_BYTES + 4 * data_numel)
        finally:
            os.close(fd)
        self._header = np.frombuffer(self._map, dtype=np.uint64, count=HEADER_BYTES // 8)
        self.nonce = b""  # the creator's: what attach() must find in the header

    def _area(self, index: int) -> torch.Tensor:
        """The index-th run of `numel` floats after the header."""
        return torch.frombuffer(self._map, dtype=torch.float32, count=self.numel, offset=HEADER_BYTES + 4 * self.numel * index)

    @classmethod
    def _create(cls, name: str, numel: int, data_numel: int, directory: Path, *extra):
        """A new segment (0600) with its memory reserved now (a full /dev/shm fails here, not with SIGBUS later)."""
        path = directory / name
        size = HEADER_BYTES + 4 * data_numel
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise ShmError(f"cannot reserve {size} bytes in {directory}: {exc.strerror}") from None
        segment = cls(path, numel, *extra, owner=True, fd=fd)
        nonce = secrets.token_bytes(_NONCE_BYTES)
        segment._header[0] = MAGIC
        segment._header[1:3] = np.frombuffer(nonce, dtype=np.uint64)
        segment._header[_NUMEL] = numel
        segment.nonce = nonce
        return segment, nonce

    @classmethod
    def _attach(cls, name: str, numel: int, data_numel: int, nonce: bytes, directory: Path, *extra):
        """The segment the PS made; ShmError when it is not there or not the PS's (another host)."""
        if "/" in name or not _NAME.match(name):
            raise ShmError(f"shm_name {name[:80]!r} is not a mailbox name")
        path = directory / name
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise ShmError(f"cannot open {path}: {exc.strerror} (the other process is on another host?)") from None
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        if size != HEADER_BYTES + 4 * data_numel:
            os.close(fd)
            raise ShmError(f"{path} has {size} bytes, expected {HEADER_BYTES + 4 * data_numel} for {data_numel} elements")
        segment = cls(path, numel, *extra, owner=False, fd=fd)
        if int(segment._header[0]) != MAGIC or segment._header[1:3].tobytes() != nonce or int(segment._header[_NUMEL]) != numel:
            segment.close()
            raise ShmError(f"{path} is not the segment announced (nonce differs: another host's /dev/shm?)")
        return segment

    def _check_stamp(self, word: int, seq: int, what: str) -> None:
        stamp = int(self._header[word])
        if seq == 0 or stamp != seq:
            raise ShmError(f"{what} stamp {stamp} in {self.path.name} does not match the call's shm_seq {seq} "
                           f"(written out of turn: the mailbox's ownership rule was broken)")

    def _release_views(self) -> None:
        self._header = None  # type: ignore[assignment]

    def close(self) -> None:
        """Unmap (the owner also unlinks the file)."""
        if self.owner:
            self.path.unlink(missing_ok=True)
        self._release_views()
        try:
            self._map.close()
        except BufferError:  # a caller still holds a view: the mapping goes with it
            pass


class Mailbox(_Segment):
    """One worker's mailbox at one PS, mapped into this process (create: the PS; attach: the worker)."""

    def __init__(self, path: Path, numel: int, owner: bool, fd: int):
        super().__init__(path, numel, 2 * numel, owner, fd)
        self.push_area, self.pull_area = self._area(0), self._area(1)
        self._seq = 0

    @classmethod
    def create(cls, name: str, numel: int, directory: Path = SHM_DIR) -> tuple["Mailbox", bytes]:
        return cls._create(name, numel, 2 * numel, directory)

    @classmethod
    def attach(cls, name: str, numel: int, nonce: bytes, directory: Path = SHM_DIR) -> "Mailbox":
        return cls._attach(name, numel, 2 * numel, nonce, directory)

    # ---- the worker's side -----------------------------------------------------
    def put_push(self, gradient: torch.Tensor) -> int:
        """Write a gradient slice, then stamp it; returns the stamp to send as PushHeader.shm_seq."""
        return self.write_push(lambda area: area.copy_(gradient))

    def write_push(self, fill: Callable[[torch.Tensor], object]) -> int:
        """Clear the push stamp, let `fill` write the push area, stamp it; returns the stamp. The worker
        writes its own gradient so; the PS's socket channel writes a remote worker's bytes so, as they arrive."""
        self._header[_PUSH_SEQ] = 0  # "being written": a reader that started before sees its stamp change
        fill(self.push_area)
        self._seq += 1
        self._header[_PUSH_SEQ] = self._seq
        return self._seq

    def take_pull(self, out: torch.Tensor, seq: int) -> None:
        """Copy the parameters the PS stamped `seq` into `out`."""
        self._check_stamp(_PULL_SEQ, seq, "pull")
        out.copy_(self.pull_area)
        self._check_stamp(_PULL_SEQ, seq, "pull")  # still the same stamp: nobody wrote while we copied

    # ---- the PS's side ---------------------------------------------------------
    def push_view(self, seq: int) -> torch.Tensor:
        """The gradient stamped `seq`, in place (no copy): the PS's until it is applied or dropped.
        Check `push_intact(seq)` after using it (the seqlock's second read)."""
        self._check_stamp(_PUSH_SEQ, seq, "push")
        return self.push_area

    def push_intact(self, seq: int) -> bool:
        """Whether the push area still holds the gradient stamped `seq` (nobody began writing since)."""
        return int(self._header[_PUSH_SEQ]) == seq

    def pull_view(self, seq: int) -> torch.Tensor:
        """The parameters stamped `seq` in the pull area, in place (the socket channel sends them from here);
        check `pull_intact(seq)` after using them."""
        self._check_stamp(_PULL_SEQ, seq, "pull")
        return self.pull_area

    def pull_intact(self, seq: int) -> bool:
        return int(self._header[_PULL_SEQ]) == seq

    def put_pull(self, chunks: list[tuple[int, bytes]], version: int) -> int:
        """Write the parameters (float32 wire chunks of one version), then stamp them; returns the stamp."""
        self._header[_PULL_SEQ] = 0  # "being written" (see put_push)
        area = self.pull_area.numpy()
        for offset, data in chunks:
            piece = np.frombuffer(data, dtype="<f4")
            area[offset : offset + piece.size] = piece
        self._seq += 1
        self._header[_PULL_VERSION] = version
        self._header[_PULL_SEQ] = self._seq
        return self._seq

    def _release_views(self) -> None:
        super()._release_views()
        self.push_area = self.pull_area = None  # type: ignore[assignment]


class PullBoard(_Segment):
    """One PS's parameters for every same-host worker: `slots` areas of the shard's length, each holding
    one version, written once and read by every worker that pulls it (instead of one copy per worker's
    mailbox). Header words per slot: its stamp and its version. Which slot may be written is decided by
    `BoardSlots` (star/ps_server/board.py); readers check the stamp before and after their copy."""

    def __init__(self, path: Path, numel: int, slots: int, owner: bool, fd: int):
        super().__init__(path, numel, slots * numel, owner, fd)
        self.slots = slots
        self._seq = 0

    @classmethod
    def create(cls, name: str, numel: int, slots: int, directory: Path = SHM_DIR) -> tuple["PullBoard", bytes]:
        if not 1 <= slots <= MAX_BOARD_SLOTS:
            raise ShmError(f"slots {slots} is outside 1..{MAX_BOARD_SLOTS}")
        return cls._create(name, numel, slots * numel, directory, slots)

    @classmethod
    def attach(cls, name: str, numel: int, slots: int, nonce: bytes, directory: Path = SHM_DIR) -> "PullBoard":
        if not 1 <= slots <= MAX_BOARD_SLOTS:
            raise ShmError(f"shm_board_slots {slots} is outside 1..{MAX_BOARD_SLOTS}")
        return cls._attach(name, numel, slots * numel, nonce, directory, slots)

    def area(self, slot: int) -> torch.Tensor:
        return self._area(slot)

    def publish(self, slot: int, params: torch.Tensor, version: int) -> int:
        """Write one version's parameters into `slot`, then stamp it; returns the stamp (PS side)."""
        word = _BOARD_WORDS + 2 * slot
        self._header[word] = 0  # "being written"
        self._area(slot).copy_(params)
        self._seq += 1
        self._header[word + 1] = version
        self._header[word] = self._seq
        return self._seq

    def take(self, slot: int, out: torch.Tensor, seq: int) -> None:
        """Copy the parameters stamped `seq` in `slot` into `out` (worker side)."""
        out.copy_(self.slot_view(slot, seq))
        self._check_stamp(_BOARD_WORDS + 2 * slot, seq, "board")

    def slot_view(self, slot: int, seq: int) -> torch.Tensor:
        """The parameters stamped `seq` in `slot`, in place; check `slot_intact` after using them."""
        if not 0 <= slot < self.slots:
            raise ShmError(f"board slot {slot} is outside 0..{self.slots - 1}")
        self._check_stamp(_BOARD_WORDS + 2 * slot, seq, "board")
        return self._area(slot)

    def slot_intact(self, slot: int, seq: int) -> bool:
        return int(self._header[_BOARD_WORDS + 2 * slot]) == seq


class GradSegment(_Segment):
    """A worker's whole flat gradient in shared memory (create: the worker, whose model's `.grad`s are
    views of `area`; attach: every same-host PS, which reads its own range). Header words: one push
    stamp per shard (`shards` of them), written by the worker only."""

    def __init__(self, path: Path, numel: int, shards: int, owner: bool, fd: int):
        super().__init__(path, numel, numel, owner, fd)
        self.shards = shards
        self.area = self._area(0)
        self._seq = 0

    @classmethod
    def create(cls, name: str, numel: int, shards: int, directory: Path = SHM_DIR) -> tuple["GradSegment", bytes]:
        if not 1 <= shards <= MAX_GRAD_SHARDS:
            raise ShmError(f"shards {shards} is outside 1..{MAX_GRAD_SHARDS}")
        return cls._create(name, numel, numel, directory, shards)

    @classmethod
    def attach(cls, name: str, numel: int, shards: int, nonce: bytes, directory: Path = SHM_DIR) -> "GradSegment":
        if not 1 <= shards <= MAX_GRAD_SHARDS:
            raise ShmError(f"shm_grad_shards {shards} is outside 1..{MAX_GRAD_SHARDS}")
        return cls._attach(name, numel, numel, nonce, directory, shards)

    def _word(self, shard: int) -> int:
        if not 0 <= shard < self.shards:
            raise ShmError(f"shard {shard} is outside 0..{self.shards - 1} of {self.path.name}")
        return _BOARD_WORDS + shard

    # ---- the worker's side -----------------------------------------------------
    def begin_write(self) -> None:
        """Clear every shard's stamp: a new gradient is about to be written (a PS still holding the last
        one, against the rule, sees its stamp change and leaves it out)."""
        self._header[_BOARD_WORDS : _BOARD_WORDS + self.shards] = 0

    def stamp(self, shard: int) -> int:
        """Stamp shard `shard`'s range as pushed (it belongs to that PS now); returns the stamp for the header."""
        self._seq += 1
        self._header[self._word(shard)] = self._seq
        return self._seq

    # ---- both sides ------------------------------------------------------------
    def intact(self, shard: int, seq: int) -> bool:
        """Whether shard `shard`'s range still holds the gradient stamped `seq` (nothing written since)."""
        return seq != 0 and int(self._header[self._word(shard)]) == seq

    # ---- the PS's side ---------------------------------------------------------
    def push_view(self, shard: int, seq: int, start: int, end: int) -> torch.Tensor:
        """Elements [start, end) stamped `seq` for shard `shard`, in place (no copy); check `intact` after use."""
        self._check_stamp(self._word(shard), seq, "gradient segment")
        if not 0 <= start <= end <= self.numel:
            raise ShmError(f"range [{start}, {end}) is outside the {self.numel} elements of {self.path.name}")
        return self.area[start:end]

    def _release_views(self) -> None:
        super()._release_views()
        self.area = None  # type: ignore[assignment]


def transport_in_use(stats: list) -> tuple[str, str]:
    """(transport, wire) the pushes took, from every PS's Stats reply (pushes_received and the
    shm_pushes / socket_pushes / bf16_pushes counters): "shm" / "socket" / "grpc" / "mixed" and
    "float32" / "bfloat16" / "mixed" (of the pushes that crossed a wire); ("", "") before any push."""
    pushes = sum(s.pushes_received for s in stats)
    if not pushes:
        return "", ""
    socket = sum(s.counters.get("socket_pushes", 0) for s in stats)
    shm = sum(s.counters.get("shm_pushes", 0) for s in stats) - socket  # socket pushes land in mailboxes too
    bf16 = sum(s.counters.get("bf16_pushes", 0) for s in stats)
    by_kind = {"shm": shm, "socket": socket, "grpc": pushes - shm - socket}
    used = [kind for kind, count in by_kind.items() if count]
    transport = used[0] if len(used) == 1 else "mixed"
    wire = "bfloat16" if bf16 and bf16 == pushes - shm else "float32" if bf16 == 0 else "mixed"
    return transport, wire
