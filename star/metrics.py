"""Prometheus `/metrics` for the coordinator and every PS, through prometheus_client.

Each daemon hands a snapshot function to a collector; the collector turns the snapshot
into metric families at scrape time, so nothing on the training path touches Prometheus.
Names carry the `star_` prefix and base units (`_seconds`, `_bytes`, `_total`); per-worker
series have the label `worker`, per-PS series the label `ps`.
"""

from __future__ import annotations

import errno
import json
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from star.errors import ConfigError

METRICS_FILE = "metrics.json"  # in OUT: {"coordinator": URL, "ps": [URL, ...]}


@dataclass(frozen=True)
class WorkerMetrics:
    """One worker as the coordinator sees it (its latest report and the decisions in force for it)."""

    iterations: int
    compute_s: float
    push_s: float
    pull_wait_s: float
    batch_size: int
    amp: bool
    straggler: bool
    flagged_slow_s: float


@dataclass(frozen=True)
class JobMetrics:
    """The coordinator's view of the job at one scrape."""

    workers: dict[int, WorkerMetrics]
    mode: str
    plan_epoch: int
    metric_name: str
    metric: float | None
    version: int
    seconds_since_update: float | None  # None until the first update was seen
    elapsed_s: float
    finished: bool


@dataclass(frozen=True)
class PsMetrics:
    """One PS at one scrape."""

    ps: int
    version: int
    plan_epoch: int
    accepted: int
    applied: int
    dropped: dict[str, int]  # reason -> gradients
    rejected: dict[str, int]  # reason -> calls refused
    received_bytes: int
    sent_bytes: int
    pushes: int
    waiting_pulls: int
    wait_caused_s: dict[int, float] = field(default_factory=dict)  # worker -> seconds others waited on it here


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def job_families(job: JobMetrics) -> list[Metric]:
    """Metric families of the coordinator's view (pure: unit-tested without a server)."""
    per_worker = {
        "compute": _gauge("star_worker_compute_seconds", "Forward+backward seconds of the worker's latest iteration", ("worker",)),
        "push": _gauge("star_worker_push_seconds", "Push seconds of the worker's latest iteration", ("worker",)),
        "pull": _gauge("star_worker_pull_wait_seconds", "Pull seconds (incl. blocking on others) of the latest iteration", ("worker",)),
        "straggler": _gauge("star_worker_straggler", "1 while the detector flags the worker slow", ("worker",)),
        "amp": _gauge("star_worker_amp", "1 while the worker runs with autocast (AMP)", ("worker",)),
        "batch": _gauge("star_worker_batch_size", "Samples per iteration of the worker's latest report", ("worker",)),
    }
    iterations = CounterMetricFamily("star_worker_iterations", "Iterations the worker reported", labels=["worker"])
    flagged = CounterMetricFamily("star_worker_flagged_slow_seconds", "Seconds the worker was flagged slow", labels=["worker"])
    for worker, w in sorted(job.workers.items()):
        label = [str(worker)]
        for key, value in (("compute", w.compute_s), ("push", w.push_s), ("pull", w.pull_wait_s),
                           ("straggler", float(w.straggler)), ("amp", float(w.amp)), ("batch", float(w.batch_size))):
            per_worker[key].add_metric(label, value)
        iterations.add_metric(label, float(w.iterations))
        flagged.add_metric(label, w.flagged_slow_s)
    mode = _gauge("star_job_mode", "1 for the synchronisation mode in force", ("mode",))
    if job.mode:
        mode.add_metric([job.mode], 1.0)
    metric = _gauge("star_job_metric", "Latest held-out evaluation of the job's metric", ("metric",))
    if job.metric is not None:
        metric.add_metric([job.metric_name], job.metric)
    since = _gauge("star_job_seconds_since_last_update", "Seconds since the parameter version last advanced")
    if job.seconds_since_update is not None:
        since.add_metric([], job.seconds_since_update)
    return [*per_worker.values(), iterations, flagged, mode, metric, since,
            GaugeMetricFamily("star_job_plan_epoch", "Epoch of the plan in force", value=job.plan_epoch),
            GaugeMetricFamily("star_job_version", "Parameter version at the latest evaluation", value=job.version),
            GaugeMetricFamily("star_job_elapsed_seconds", "Seconds since the coordinator started", value=job.elapsed_s),
            GaugeMetricFamily("star_job_finished", "1 once the job has ended", value=float(job.finished))]


def ps_families(ps: PsMetrics) -> list[Metric]:
    """Metric families of one PS (pure)."""
    label = [str(ps.ps)]

    def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=["ps"])
        family.add_metric(label, value)
        return family

    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = _gauge(name, doc, ("ps",))
        family.add_metric(label, value)
        return family

    dropped = CounterMetricFamily("star_ps_gradients_dropped", "Gradients dropped, by reason", labels=["ps", "reason"])
    for reason, count in sorted(ps.dropped.items()):
        dropped.add_metric([*label, reason], float(count))
    rejected = CounterMetricFamily("star_ps_requests_rejected", "Calls refused, by reason", labels=["ps", "reason"])
    for reason, count in sorted(ps.rejected.items()):
        rejected.add_metric([*label, reason], float(count))
    caused = CounterMetricFamily("star_ps_wait_caused_seconds",
                                 "Seconds other workers' gradients waited here for the round this worker's gradient closed",
                                 labels=["ps", "worker"])
    for worker, seconds in sorted(ps.wait_caused_s.items()):
        caused.add_metric([*label, str(worker)], seconds)
    return [
        counter("star_ps_updates", "Optimizer steps applied (the parameter version)", ps.version),
        counter("star_ps_gradients_accepted", "Gradients accepted", ps.accepted),
        counter("star_ps_gradients_applied", "Gradients applied", ps.applied),
        dropped, rejected, caused,
        counter("star_ps_received_bytes", "Gradient payload bytes received", ps.received_bytes),
        counter("star_ps_sent_bytes", "Parameter payload bytes sent to pulls", ps.sent_bytes),
        counter("star_ps_pushes", "Push calls accepted", ps.pushes),
        gauge("star_ps_plan_epoch", "Epoch of the plan this PS holds", ps.plan_epoch),
        gauge("star_ps_waiting_pulls", "Pulls blocked on an open round", ps.waiting_pulls),
    ]


class SnapshotCollector:
    """A prometheus_client collector: `families(snapshot())` at every scrape."""

    def __init__(self, snapshot: Callable[[], object], families: Callable[[object], list[Metric]]):
        self._snapshot = snapshot
        self._families = families

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot()
        if snapshot is not None:
            yield from self._families(snapshot)


def serve_metrics(collector: SnapshotCollector, host: str, port: int, field_name: str = "metrics_port") -> tuple[object, int]:
    """Serve /metrics on host:port (0: a free port); returns (server, port). A port in use is a
    ConfigError naming the field."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(field_name, port, f"cannot serve /metrics on {host}:{port}: {exc.strerror or exc}") from None
    return server, server.server_port


def port_in_use(host: str, port: int) -> bool:
    """Whether host:port cannot be bound now (checked by the launcher before it starts anything)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def check_metrics_ports(host: str, port: int | None, num_ps: int) -> None:
    """`metrics_port` P needs P (coordinator) and P+1..P+num_ps (PSs) free; 0 and None need nothing."""
    if not port:
        return
    for offset in range(num_ps + 1):
        if not 0 < port + offset < 65536:
            raise ConfigError("metrics_port", port, f"port {port + offset} (for {_owner(offset)}) is outside 1..65535")
        if port_in_use(host, port + offset):
            raise ConfigError("metrics_port", port, f"port {port + offset} on {host} (for {_owner(offset)}) is already in use")


def _owner(offset: int) -> str:
    return "the coordinator" if offset == 0 else f"ps{offset - 1}"


def metrics_url(host: str, port: int) -> str:
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/metrics"


def write_metrics_file(out: Path, host: str, coordinator_port: int | None, ps_ports: list[int | None]) -> dict:
    """OUT/metrics.json: where to scrape the job."""
    urls = {"coordinator": metrics_url(host, coordinator_port) if coordinator_port else None,
            "ps": [metrics_url(host, p) if p else None for p in ps_ports]}
    (out / METRICS_FILE).write_text(json.dumps(urls, indent=2))
    return urls


def ready_metrics_port(ready_file: Path) -> int | None:
    """The metrics port a daemon wrote into its ready file (None: it serves none)."""
    try:
        return json.loads(ready_file.read_text()).get("metrics_port")
    except (OSError, ValueError):
        return None
