"""The coordinator's boundary checks: why a Join, report, resource report or directive is refused.

Pure functions of the message; each answer names the offending field and value.
"""

from __future__ import annotations

import math

from star.rpc import star_pb2 as pb
from star.limits import MAX_BATCH_SIZE
from star.rpc.common import MAX_LABEL_CHARS

ABSURD_S = 3600.0  # a per-iteration time above an hour is a bug or a hostile report
MAX_SLOWDOWN = 1e6  # a replayed trace factor beyond this is not a slowdown but a hostile report
MAX_CPU_PERCENT = 1e6  # psutil reports up to 100 x cores


def _worker_problem(worker_id: int, num_workers: int) -> str | None:
    if worker_id >= num_workers:
        return f"worker_id {worker_id} is outside this job's workers 0..{num_workers - 1}"
    return None


def join_problem(request: pb.JoinRequest, num_workers: int) -> str | None:
    """Why a Join is refused (naming the field and value), or None."""
    if problem := _worker_problem(request.worker_id, num_workers):
        return problem
    if len(request.host) > MAX_LABEL_CHARS:
        return f"host of {len(request.host)} characters exceeds {MAX_LABEL_CHARS}"
    if request.batch_size > MAX_BATCH_SIZE:
        return f"batch_size {request.batch_size} exceeds {MAX_BATCH_SIZE}"
    return None


def report_problem(report: pb.IterationReport, num_workers: int) -> str | None:
    """Why an IterationReport is refused, or None. Checked before the report touches the cluster view.

    The loss is not checked: a NaN loss is a true report of a diverged worker.
    """
    if problem := _worker_problem(report.worker_id, num_workers):
        return problem
    for name in ("compute_s", "push_s", "pull_s"):
        value = getattr(report, name)
        if not (math.isfinite(value) and 0 <= value <= ABSURD_S):
            return f"{name}={value!r} must be a finite number of seconds in [0, {ABSURD_S:g}]"
    if not (math.isfinite(report.slowdown) and 0 <= report.slowdown <= MAX_SLOWDOWN):
        return f"slowdown={report.slowdown!r} must be a finite factor in [0, {MAX_SLOWDOWN:g}]"
    if not (math.isfinite(report.cpu_percent) and 0 <= report.cpu_percent <= MAX_CPU_PERCENT):
        return f"cpu_percent={report.cpu_percent!r} must be finite and in [0, {MAX_CPU_PERCENT:g}]"
    if report.batch_size > MAX_BATCH_SIZE:
        return f"batch_size {report.batch_size} exceeds {MAX_BATCH_SIZE}"
    if not (math.isfinite(report.fixed_samples) and 0 <= report.fixed_samples <= MAX_BATCH_SIZE):
        return f"fixed_samples={report.fixed_samples!r} must be a finite number of samples in [0, {MAX_BATCH_SIZE}]"
    return None


MAX_NICS = 256  # interfaces in one host report
MAX_RATE = 1e13  # bytes/s: beyond any NIC


def resources_problem(message: pb.HostResources) -> str | None:
    """Why a host's resource report is refused (naming the field), or None."""
    if not 1 <= len(message.host) <= MAX_LABEL_CHARS:
        return f"host must be 1..{MAX_LABEL_CHARS} characters, got {len(message.host)}"
    bounded = {"time_s": (message.time_s, 0, 1e11), "interval_s": (message.interval_s, 0, ABSURD_S),
               "cpu_percent": (message.cpu_percent, 0, 100.5), "job_cpu_percent": (message.job_cpu_percent, 0, 100.5),
               "memory_percent": (message.memory_percent, 0, 100.5)}
    for name, (value, low, high) in bounded.items():
        if not (math.isfinite(value) and low <= value <= high):
            return f"{name}={value!r} must be a finite number in [{low:g}, {high:g}]"
    if message.cpu_count > 1 << 16:
        return f"cpu_count {message.cpu_count} exceeds {1 << 16}"
    if len(message.nics) > MAX_NICS or len(message.ps) > MAX_NICS:
        return f"{len(message.nics)} nics / {len(message.ps)} ps entries: at most {MAX_NICS} each"
    for i, nic in enumerate(message.nics):
        if len(nic.name) > MAX_LABEL_CHARS:
            return f"nics[{i}].name of {len(nic.name)} characters exceeds {MAX_LABEL_CHARS}"
        for name in ("rx_bytes_per_s", "tx_bytes_per_s", "link_bytes_per_s"):
            value = getattr(nic, name)
            if not (math.isfinite(value) and 0 <= value <= MAX_RATE):
                return f"nics[{i}].{name}={value!r} must be a finite number in [0, {MAX_RATE:g}]"
        if nic.HasField("busy_share") and not (math.isfinite(nic.busy_share) and 0 <= nic.busy_share <= 1):
            return f"nics[{i}].busy_share={nic.busy_share!r} must be a finite number in [0, 1]"
    for i, running in enumerate(message.ps):
        if not 1 <= len(running.address) <= MAX_LABEL_CHARS:
            return f"ps[{i}].address must be 1..{MAX_LABEL_CHARS} characters"
    return None


def directives_problem(request: pb.SetDirectivesRequest, num_workers: int) -> str | None:
    if problem := _worker_problem(request.worker_id, num_workers):
        return problem
    if request.directives.batch_size > MAX_BATCH_SIZE:
        return f"directives.batch_size {request.directives.batch_size} exceeds {MAX_BATCH_SIZE}"
    return None
