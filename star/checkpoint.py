"""PS shard checkpoints: atomic files, a job manifest, and finding the last complete set.

Layout of a checkpoint directory (no shared filesystem is assumed between jobs, only
that every PS of one host can write its own subdirectory):

    manifest.json          the job: job_id, num_ps, total_numel, task (written at launch)
    ps<i>/v<version>.pt    one shard's state: parameters, optimizer state, aggregator state
    ps<i>/latest.json      which file is ps<i>'s newest complete checkpoint, with its sha256

Every file is written to a temporary name, fsync'd, renamed over the old name and the
directory fsync'd, so a crash leaves either the old or the new file, never a torn one.
Shards load with `torch.load(weights_only=True)`: a checkpoint file cannot run code.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

FORMAT = 1
KEEP_PER_SHARD = 2  # older shard files are deleted once a newer one is complete


class CheckpointError(ValueError):
    pass


@dataclass(frozen=True)
class JobManifest:
    """Ties the shards of one job together."""

    job_id: str
    num_ps: int
    task: str = ""
    total_numel: int = 0  # 0 = not known when the manifest was written


@dataclass(frozen=True)
class ShardCheckpoint:
    """Everything one PS needs to continue exactly where it was."""

    job_id: str
    ps_index: int
    num_ps: int
    total_numel: int
    range_start: int
    range_end: int
    param: torch.Tensor  # the shard's parameters (float32)
    optimizer: dict[str, Any]  # torch.optim state_dict
    aggregator: dict[str, Any]  # star.aggregate.Aggregator.export_state()

    @property
    def version(self) -> int:
        return int(self.aggregator["version"])


def write_atomic(path: Path, data: bytes) -> None:
    """Write, fsync, rename over `path`, fsync the directory."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def write_manifest(directory: str | Path, manifest: JobManifest) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "manifest.json"
    write_atomic(path, json.dumps({"format": FORMAT, **manifest.__dict__}, indent=1).encode())
    return path


def read_manifest(directory: str | Path) -> JobManifest:
    path = Path(directory) / "manifest.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no manifest (not a checkpoint directory?)") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not valid JSON: {exc}") from None
    if data.get("format") != FORMAT:
        raise CheckpointError(f"{path}: format={data.get('format')!r}, expected {FORMAT}")
    try:
        return JobManifest(job_id=str(data["job_id"]), num_ps=int(data["num_ps"]), task=str(data.get("task", "")),
                           total_numel=int(data.get("total_numel", 0)))
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: bad manifest field: {exc}") from None


def shard_dir(directory: str | Path, ps_index: int) -> Path:
    return Path(directory) / f"ps{ps_index}"


def shard_to_bytes(shard: ShardCheckpoint) -> bytes:
    """The serialised shard: what a checkpoint file holds and what a moving shard sends its successor."""
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **{k: getattr(shard, k) for k in ShardCheckpoint.__dataclass_fields__}}, buffer)
    return buffer.getvalue()


def shard_from_bytes(data: bytes, where: str) -> ShardCheckpoint:
    """Inverse of shard_to_bytes, without executing code (weights_only); `where` names the source in errors."""
    try:
        raw = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means an unusable file
        raise CheckpointError(f"{where}: cannot be loaded safely: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise CheckpointError(f"{where}: not a format-{FORMAT} shard checkpoint")
    try:
        shard = ShardCheckpoint(**{k: raw[k] for k in ShardCheckpoint.__dataclass_fields__})
    except KeyError as exc:
        raise CheckpointError(f"{where}: missing field {exc.args[0]!r}") from None
    if not isinstance(shard.param, torch.Tensor) or shard.param.numel() != shard.range_end - shard.range_start:
        raise CheckpointError(f"{where}: param has {getattr(shard.param, 'numel', lambda: '?')()} elements, "
                              f"range is [{shard.range_start},{shard.range_end})")
    return shard


def save_shard(directory: str | Path, shard: ShardCheckpoint) -> Path:
    """Write one shard checkpoint atomically, point latest.json at it, delete the oldest."""
    folder = shard_dir(directory, shard.ps_index)
    folder.mkdir(parents=True, exist_ok=True)
    data = shard_to_bytes(shard)
    path = folder / f"v{shard.version:012d}.pt"
    write_atomic(path, data)
    latest = {"version": shard.version, "file": path.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
              "job_id": shard.job_id}
    write_atomic(folder / "latest.json", json.dumps(latest).encode())
    for old in sorted(folder.glob("v*.pt"))[:-KEEP_PER_SHARD]:
        if old != path:  # a stray file of a higher version (another job's) never pushes out the one just written
            old.unlink(missing_ok=True)
    return path


def clear_checkpoints(directory: str | Path, shards: Sequence[int] | None = None) -> int:
    """Remove an earlier job's checkpoint set from `directory`: its manifest, and each ps<i>/ folder's shard files,
    pointer and version record, so that a new job's checkpoints never mix with it (other files are left alone).
    `shards`: only these PS folders and no manifest (a node of a multi-host job, whose directory others may share).
    Returns how many files went."""
    directory = Path(directory)
    doomed = [directory / "manifest.json"] if shards is None else []
    folders = directory.glob("ps*") if shards is None else (shard_dir(directory, i) for i in shards)
    for folder in folders:
        if folder.is_dir():
            doomed += [*folder.glob("v*.pt"), folder / "latest.json", folder / "version"]
    removed = 0
    for path in doomed:
        if path.is_file():
            path.unlink()
            removed += 1
    return removed


def load_shard(path: str | Path, expected_sha256: str | None = None) -> ShardCheckpoint:
    """Load one shard (no code execution: weights_only), checking its digest and fields."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        raise CheckpointError(f"{path}: sha256 does not match latest.json (corrupt or partly written)")
    return shard_from_bytes(data, str(path))


def latest_shard(directory: str | Path, ps_index: int) -> ShardCheckpoint | None:
    """ps<i>'s newest complete checkpoint, or None when it never wrote one."""
    pointer = shard_dir(directory, ps_index) / "latest.json"
    if not pointer.exists():
        return None
    try:
        latest = json.loads(pointer.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{pointer}: not valid JSON: {exc}") from None
    return load_shard(pointer.parent / latest["file"], latest.get("sha256"))


def resolve_checkpoint_dir(path: str | Path) -> Path:
    """`--resume` takes a job's OUT directory or its checkpoint directory."""
    path = Path(path)
    return path / "checkpoints" if (path / "checkpoints" / "manifest.json").exists() else path


def latest_complete(directory: str | Path) -> tuple[JobManifest, list[ShardCheckpoint]]:
    """The manifest and one checkpoint per PS of the job; CheckpointError names what is missing."""
    manifest = read_manifest(directory)
    shards = []
    for index in range(manifest.num_ps):
        shard = latest_shard(directory, index)
        if shard is None:
            raise CheckpointError(f"{directory}: ps{index} has no checkpoint, so the set is incomplete")
        if shard.job_id != manifest.job_id or shard.num_ps != manifest.num_ps or shard.ps_index != index:
            raise CheckpointError(
                f"{directory}: ps{index}'s checkpoint belongs to job {shard.job_id!r} "
                f"(ps {shard.ps_index} of {shard.num_ps}), the manifest to {manifest.job_id!r} ({manifest.num_ps} PSs)")
        shards.append(shard)
    return manifest, shards
