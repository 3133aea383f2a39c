"""Same-host shared-memory mailboxes: Push and Pull payloads at memory speed, gRPC carrying the header.

One mailbox per (PS, worker): a file under /dev/shm that the PS creates when a worker registers
asking for one (RegisterRequest.want_shm) and that the worker only attaches to. Layout: a
4 KiB header page, then the push area and the pull area (the PS's shard length in float32 each).

Ownership rule (nothing is read half-written): the push area belongs to the worker except while
its Push call is in flight, the pull area belongs to the PS only while it serves that worker's
Pull call. The worker writes its gradient, stamps `push_seq`, then sends Push(shm_seq); the PS
checks the stamp and copies the gradient out before it answers. The PS copies the parameters of
the version it serves, stamps `pull_seq`, then answers Pull(shm_seq); the worker checks the stamp
and copies them out before its next call. Each side is blocked on the other's RPC while the other
writes, so a mailbox is never read while being written. Should the rule ever be broken, a reader
still never takes a mix of two versions: a writer clears the stamp before it writes and stamps
after, and a reader checks the stamp before and after its copy (a seqlock); a stamp that does not
match the call is refused (`bad_shm_seq` at the PS), never used. (Store order is x86's TSO.)

No leaks: names carry the job and the owning PS's pid (`star-<job>-<pid>-ps<i>-w<worker>`); a PS
unlinks its mailboxes when it exits, and `sweep()` (run when a PS or a launcher starts and when a
launcher ends) unlinks every mailbox whose owner is gone, which is what a kill -9 leaves behind.
The files are created 0600, so only the job's user can map them; callers still pass the job token.
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
from pathlib import Path

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
_NAME = re.compile(r"^star-(?P<job>[A-Za-z0-9_]{1,32})-(?P<pid>\d+)-ps\d+-w\d+$")


class ShmError(RuntimeError):
    """A mailbox cannot be made, attached or read; the message says which and why."""


def job_tag(job_id: str) -> str:
    """The job part of a mailbox name: the job id's letters, digits and `_` (at most 32), or `job`."""
    tag = re.sub(r"[^A-Za-z0-9_]", "_", job_id)[:32]
    return tag or "job"


def mailbox_name(job_id: str, ps_index: int, worker: int, pid: int | None = None) -> str:
    return f"{PREFIX}{job_tag(job_id)}-{os.getpid() if pid is None else pid}-ps{ps_index}-w{worker}"


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def sweep(directory: Path = SHM_DIR) -> list[str]:
    """Unlink every mailbox whose owning PS process is gone (what a kill -9 leaves); returns their names."""
    removed = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = _NAME.match(path.name)
        if match and not _alive(int(match["pid"])):
            try:
                path.unlink()
                removed.append(path.name)
            except FileNotFoundError:
                pass
    return removed


def mailbox_bytes(numel: int) -> int:
    return HEADER_BYTES + 2 * 4 * numel


class Mailbox:
    """One worker's mailbox at one PS, mapped into this process (create: the PS; attach: the worker)."""

    def __init__(self, path: Path, numel: int, owner: bool, fd: int):
        self.path, self.numel, self.owner = path, numel, owner
        try:
            self._map = mmap.mmap(fd, mailbox_bytes(numel))
        finally:
            os.close(fd)
        self._header = np.frombuffer(self._map, dtype=np.uint64, count=8)
        self.push_area = torch.frombuffer(self._map, dtype=torch.float32, count=numel, offset=HEADER_BYTES)
        self.pull_area = torch.frombuffer(self._map, dtype=torch.float32, count=numel, offset=HEADER_BYTES + 4 * numel)
        self._seq = 0
        self.nonce = b""  # the creator's: what attach() must find in the header

    @classmethod
    def create(cls, name: str, numel: int, directory: Path = SHM_DIR) -> tuple["Mailbox", bytes]:
        """A new mailbox (0600) with its memory reserved now (a full /dev/shm fails here, not with SIGBUS later)."""
        path = directory / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, mailbox_bytes(numel))
        except OSError as exc:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise ShmError(f"cannot reserve {mailbox_bytes(numel)} bytes in {directory}: {exc.strerror}") from None
        box = cls(path, numel, owner=True, fd=fd)
        nonce = secrets.token_bytes(_NONCE_BYTES)
        box._header[0] = MAGIC
        box._header[1:3] = np.frombuffer(nonce, dtype=np.uint64)
        box._header[_NUMEL] = numel
        box.nonce = nonce
        return box, nonce

    @classmethod
    def attach(cls, name: str, numel: int, nonce: bytes, directory: Path = SHM_DIR) -> "Mailbox":
        """The mailbox the PS made for this worker; ShmError when it is not there or not the PS's (another host)."""
        if "/" in name or not _NAME.match(name):
            raise ShmError(f"shm_name {name[:80]!r} is not a mailbox name")
        path = directory / name
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise ShmError(f"cannot open {path}: {exc.strerror} (the PS is on another host?)") from None
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        if size != mailbox_bytes(numel):
            os.close(fd)
            raise ShmError(f"{path} has {size} bytes, expected {mailbox_bytes(numel)} for {numel} elements")
        box = cls(path, numel, owner=False, fd=fd)
        if int(box._header[0]) != MAGIC or box._header[1:3].tobytes() != nonce or int(box._header[_NUMEL]) != numel:
            box.close()
            raise ShmError(f"{path} is not the mailbox this PS announced (nonce differs: another host's /dev/shm?)")
        return box

    def _check_stamp(self, word: int, seq: int, what: str) -> None:
        stamp = int(self._header[word])
        if seq == 0 or stamp != seq:
            raise ShmError(f"{what} stamp {stamp} in {self.path.name} does not match the call's shm_seq {seq} "
                           f"(written out of turn: the mailbox's ownership rule was broken)")

    # ---- the worker's side -----------------------------------------------------
    def put_push(self, gradient: torch.Tensor) -> int:
        """Write a gradient slice, then stamp it; returns the stamp to send as PushHeader.shm_seq."""
        self._header[_PUSH_SEQ] = 0  # "being written": a reader that started before sees its stamp change
        self.push_area.copy_(gradient)
        self._seq += 1
        self._header[_PUSH_SEQ] = self._seq
        return self._seq

    def take_pull(self, out: torch.Tensor, seq: int) -> None:
        """Copy the parameters the PS stamped `seq` into `out`."""
        self._check_stamp(_PULL_SEQ, seq, "pull")
        out.copy_(self.pull_area)
        self._check_stamp(_PULL_SEQ, seq, "pull")  # still the same stamp: nobody wrote while we copied

    # ---- the PS's side ---------------------------------------------------------
    def take_push(self, seq: int) -> torch.Tensor:
        """A copy of the gradient stamped `seq` (the worker may overwrite the area once Push returns)."""
        self._check_stamp(_PUSH_SEQ, seq, "push")
        gradient = self.push_area.clone()
        self._check_stamp(_PUSH_SEQ, seq, "push")
        return gradient

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

    def close(self) -> None:
        """Unmap (the owner also unlinks the file)."""
        if self.owner:
            self.path.unlink(missing_ok=True)
        self._header = self.push_area = self.pull_area = None  # type: ignore[assignment]
        try:
            self._map.close()
        except BufferError:  # a caller still holds a view: the mapping goes with it
            pass


def transport_in_use(stats: list) -> tuple[str, str]:
    """(transport, wire) the pushes took, from every PS's Stats reply (pushes_received and the
    shm_pushes / bf16_pushes counters): "shm" / "grpc" / "mixed" and "float32" / "bfloat16" / "mixed";
    ("", "") before any push."""
    pushes = sum(s.pushes_received for s in stats)
    if not pushes:
        return "", ""
    shm = sum(s.counters.get("shm_pushes", 0) for s in stats)
    bf16 = sum(s.counters.get("bf16_pushes", 0) for s in stats)
    transport = "shm" if shm == pushes else "grpc" if shm == 0 else "mixed"
    wire = "bfloat16" if bf16 and bf16 == pushes - shm else "float32" if bf16 == 0 else "mixed"
    return transport, wire
