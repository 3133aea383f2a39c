"""The coordinator daemon: one per job. Owns the plan, hears every worker, runs the evaluator.

It sends the initial plan to every PS, answers each worker's per-iteration report with
directives, evaluates the PSs' parameters on a fixed period, decides when the job is
done (target reached or time up), and writes curve.csv, events.jsonl and result.json.
Decision logic stays in pure functions (`star.evaluator.time_to_target`,
`ClusterView`), so this module is wiring.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import statistics
import threading
import time
from collections import deque
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from star.config import PlanConfig, SecurityConfig
from star.hosts import HostBook, MoveState, ShardMove
from star.placement import PlacementConfig, ReplacementPolicy
from star.policy.traffic import PsLayout
from star.policy.controller import ControlConfig, Controller, WorkerSummary, for_strategy
from star.policy.noise import noise_scale
from star.evaluator import CurveWriter, EvalPoint, Evaluator, time_to_target
from star.events import EventLog
from star.logs import log
from star.plan import SyncPlan
from star.rpc import star_pb2 as pb
from star.rpc import star_pb2_grpc as pb_grpc
from star.rpc.common import (
    CONTROL_CHANNEL_OPTIONS,
    MAX_BATCH_SIZE,
    MAX_LABEL_CHARS,
    address,
    host_of,
    sample_from_proto,
    write_ready_file,
)
from star.ps_watch import PsWatch
from star.rpc.ps_client import RETRYABLE, PSClient, stats_at
from star.rpc.security import Credentials
from star.tasks import get_task

logger = logging.getLogger("coordinator")

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


@dataclass(frozen=True)
class CoordinatorConfig:
    """One coordinator process."""

    ps_addresses: tuple[str, ...] = ()  # every PS, in ps_index order
    num_workers: int = 1  # workers expected to join
    task: str = "digits"
    seed: int = 0
    target: float | None = None  # default the task's
    plan: PlanConfig = field(default_factory=PlanConfig)
    max_time_s: float = 120.0  # training seconds (from the first update) before the job stops
    startup_timeout_s: float = 180.0  # the first update must happen within this
    eval_period_s: float = 0.5
    stop_at_target: bool = True
    out: str = "runs/latest"
    host: str = "127.0.0.1"
    port: int = 0
    report_window: int = 20  # per-worker reports kept for statistics
    batch_size: int | None = None  # the workers' even per-worker batch; default the task's
    control: ControlConfig = field(default_factory=ControlConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)  # job token file and TLS (server and PS channels)
    placement: PlacementConfig = field(default_factory=PlacementConfig)  # PS re-placement when a PS host stays saturated
    placement_file: str | None = None  # JSON of the start-up placement decision (star node writes it): logged as an event


class ClusterView:
    """What the coordinator knows about the workers: the latest reports, per worker."""

    def __init__(self, num_workers: int, window: int):
        self.num_workers = num_workers
        self.reports: dict[int, deque[pb.IterationReport]] = {}
        self.window = window
        self.joined: set[int] = set()
        self.ignored: dict[str, int] = {}
        self.last_seen_s: dict[int, float] = {}
        self._first_report_s: float | None = None

    def accept(self, report: pb.IterationReport, now_s: float) -> bool:
        """Record a report; reports from unknown workers, or going backwards, are counted and ignored.
        A heartbeat only proves the worker alive (it is blocked, e.g. in an SSGD pull)."""
        if report.worker_id >= self.num_workers:
            return self._ignore("unknown_worker")
        if report.heartbeat:
            if report.worker_id in self.reports:
                self.last_seen_s[report.worker_id] = now_s
            return False
        history = self.reports.setdefault(report.worker_id, deque(maxlen=self.window))
        if history and report.iteration <= history[-1].iteration:
            return self._ignore("out_of_order")
        times = (report.compute_s, report.push_s, report.pull_s)
        if min(times) < 0:
            return self._ignore("negative_time")
        if max(times) > ABSURD_S or any(t != t for t in times):
            return self._ignore("absurd_time")
        history.append(report)
        self.last_seen_s[report.worker_id] = now_s
        if self._first_report_s is None:
            self._first_report_s = now_s
        return True

    def forget(self, worker: int) -> None:
        """Drop a worker's history (it restarted); it is judged again once it has reported anew."""
        self.reports.pop(worker, None)

    def _ignore(self, reason: str) -> bool:
        self.ignored[reason] = self.ignored.get(reason, 0) + 1
        return False

    def summaries(self, now_s: float, amp_state: dict[int, bool], window: int = 4) -> dict[int, WorkerSummary]:
        """Per worker: medians over its latest reports made under its current AMP setting."""
        out = {}
        for worker, history in self.reports.items():
            recent = [r for r in history if r.amp == amp_state.get(worker, False) and r.batch_size > 0][-window:]
            silent = now_s - self.last_seen_s.get(worker, now_s)
            if not recent:
                out[worker] = WorkerSummary(1.0, 0.0, 1, 0, 0, silent)
                continue
            out[worker] = WorkerSummary(
                per_sample_s=statistics.median(r.compute_s / r.batch_size for r in recent),
                comm_s=2 * statistics.median(r.push_s for r in recent),
                batch_size=recent[-1].batch_size,
                amp_reports=sum(1 for r in recent if r.amp),
                reports=len(recent),
                silent_s=silent,
            )
        return out

    def compute_vs_comm(self) -> dict[str, float | None]:
        """Median compute and communication seconds per iteration over the recent reports.

        Communication = push + pull of the same bytes, estimated as 2 x push: a pull's
        time also includes blocking on other workers, which is not communication.
        """
        reports = [r for history in self.reports.values() for r in history]
        if not reports:
            return {"compute_s_median": None, "comm_s_median": None, "compute_to_comm": None}
        compute = statistics.median(r.compute_s for r in reports)
        comm = 2 * statistics.median(r.push_s for r in reports)
        return {
            "compute_s_median": round(compute, 5),
            "comm_s_median": round(comm, 5),
            "compute_to_comm": round(compute / comm, 2) if comm > 0 else None,
        }

    def max_iteration(self) -> int:
        return max((h[-1].iteration for h in self.reports.values() if h), default=0)

    def total_iterations(self) -> int:
        return sum(h[-1].iteration for h in self.reports.values() if h)


class _Rate:
    """Iterations per second between two calls."""

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None
        self.value = 0.0

    def update(self, now_s: float, total: int) -> float:
        if self._last is not None and now_s > self._last[0]:
            self.value = max(0.0, (total - self._last[1]) / (now_s - self._last[0]))
        self._last = (now_s, total)
        return self.value


class CoordinatorService(pb_grpc.CoordinatorServicer):
    def __init__(self, config: CoordinatorConfig, events: EventLog):
        self.config = config
        self.events = events
        self.cluster = ClusterView(config.num_workers, config.report_window)
        self.hosts = HostBook()
        self.ps_addresses = list(config.ps_addresses)  # where each shard is served now (shards can move)
        self.directives: dict[int, pb.Directives] = {}
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.state = "starting"
        self.reason = ""
        self.plan: SyncPlan | None = None
        self.latest: EvalPoint | None = None
        self.tta_s: float | None = None
        self.metric_name = ""
        self._rate = (time.monotonic(), 0)
        self._rate_value = 0.0

    def _directives_for(self, worker: int) -> pb.Directives:
        directives = pb.Directives()
        directives.CopyFrom(self.directives.setdefault(worker, pb.Directives()))
        directives.stop = self.state in ("done", "finished")
        return directives

    def Join(self, request: pb.JoinRequest, context: grpc.ServicerContext) -> pb.JoinReply:
        if problem := join_problem(request, self.config.num_workers):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        with self.lock:
            if request.worker_id in self.cluster.joined:
                # A restarted worker counts its iterations from 0 again: start its history afresh.
                self.cluster.forget(request.worker_id)
                self.events.emit("worker_restarted", worker=request.worker_id, host=request.host, pid=request.pid)
            self.cluster.joined.add(request.worker_id)
            self.events.emit("worker_joined", worker=request.worker_id, host=request.host, pid=request.pid)
            return pb.JoinReply(ps_addresses=self.ps_addresses, directives=self._directives_for(request.worker_id))

    def Report(self, request: pb.IterationReport, context: grpc.ServicerContext) -> pb.Directives:
        if problem := report_problem(request, self.config.num_workers):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        with self.lock:
            history = self.cluster.reports.get(request.worker_id)
            previous = history[-1].slowdown if history else 1.0
            if self.cluster.accept(request, time.monotonic() - self.started) and abs(request.slowdown - previous) > 0.1 * previous:
                self.events.emit("slowdown_changed", worker=request.worker_id, iteration=request.iteration,
                                 factor=round(request.slowdown, 4), reason="replayed trace")
            return self._directives_for(request.worker_id)

    def SetDirectives(self, request: pb.SetDirectivesRequest, context: grpc.ServicerContext) -> pb.SetDirectivesReply:
        if problem := directives_problem(request, self.config.num_workers):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        with self.lock:
            self.directives[request.worker_id] = request.directives
            self.events.emit(
                "directives",
                worker=request.worker_id,
                amp=request.directives.amp,
                batch_size=request.directives.batch_size,
                reason="set by an operator",
            )
        return pb.SetDirectivesReply()

    def JobStatus(self, request: pb.JobStatusRequest, context: grpc.ServicerContext) -> pb.JobStatusReply:
        with self.lock:
            now = time.monotonic()
            total = self.cluster.total_iterations()
            then, then_total = self._rate
            if now - then >= 1.0:
                self._rate_value = (total - then_total) / (now - then)
                self._rate = (now, total)
            reply = pb.JobStatusReply(
                state=self.state,
                elapsed_s=now - self.started,
                max_iteration=self.cluster.max_iteration(),
                iterations_per_s=self._rate_value,
                metric_name=self.metric_name,
                mode=self.plan.label if self.plan else "",
                reached=self.tta_s is not None,
                tta_s=-1.0 if self.tta_s is None else self.tta_s,
                workers_reporting=len(self.cluster.reports),
                reason=self.reason,
            )
            if self.latest is not None:
                reply.metric, reply.has_metric, reply.version = self.latest.metric, True, self.latest.version
            return reply

    def Health(self, request: pb.HealthRequest, context: grpc.ServicerContext) -> pb.HealthReply:
        return pb.HealthReply(status="serving", role="coordinator", uptime_s=time.monotonic() - self.started, pid=os.getpid())

    def ReportResources(self, request: pb.HostResources, context: grpc.ServicerContext) -> pb.NodeCommands:
        if problem := resources_problem(request):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        with self.lock:
            orders = self.hosts.report(sample_from_proto(request), request.node_rank,
                                       {p.ps_index: p.address for p in request.ps}, time.monotonic() - self.started)
        return pb.NodeCommands(start_ps=[pb.StartPs(ps_index=i, migrate_from=a) for i, a in orders.start_ps],
                               stop_ps=orders.stop_ps)

    def MoveShard(self, request: pb.MoveShardRequest, context: grpc.ServicerContext) -> pb.MoveShardReply:
        if request.ps_index >= len(self.ps_addresses):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"ps_index {request.ps_index} is outside 0..{len(self.ps_addresses) - 1}")
        if not 1 <= len(request.host) <= MAX_LABEL_CHARS:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"host must be 1..{MAX_LABEL_CHARS} characters")
        with self.lock:
            problem = self.start_move(request.ps_index, request.host, "asked by an operator")
        return pb.MoveShardReply(accepted=problem is None, reason=problem or "")

    def start_move(self, shard: int, target_host: str, reason: str) -> str | None:
        """Queue a move of `shard` to `target_host` (call with the lock held); returns why not, or None."""
        if self.state in ("done", "finished"):
            return "the job is over"
        source = self.ps_addresses[shard]
        problem = self.hosts.start_move(shard, source, host_of(source), target_host, reason, time.monotonic() - self.started)
        if problem is None:
            self.events.emit("ps_move_started", shard=shard, source=source, target_host=target_host, reason=reason)
        return problem


class Coordinator:
    """Wires the service to the PSs, the evaluator and the clock."""

    def __init__(self, config: CoordinatorConfig):
        self.config = config
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.events = EventLog(self.out / "events.jsonl")
        self.service = CoordinatorService(config, self.events)
        self.task = get_task(config.task)
        self.target = config.target if config.target is not None else self.task.default_target
        self.service.metric_name = self.task.metric_name
        self.stop = threading.Event()
        self.credentials = Credentials.load(config.security)
        self.ps = PSClient(config.ps_addresses, credentials=self.credentials)
        self.ps_watch = PsWatch()

    def configure_initial_plan(self) -> None:
        """Send the configured plan, with an epoch newer than any a (resumed) PS already holds."""
        self.ps.wait_ready(timeout_s=30.0)
        stats = self.ps.stats()
        if any(s.version > 0 for s in stats):
            versions = [s.version for s in stats]
            self.events.emit("resumed", versions=versions, epochs=[s.plan_epoch for s in stats],
                             updates_lost=[s.counters.get("updates_lost_in_restart", 0) for s in stats],
                             version_skew=max(versions) - min(versions),
                             reason="parameter servers restored from checkpoints"
                             + (" (shards at different versions: they were checkpointed apart)" if len(set(versions)) > 1 else ""))
        self.ps_watch.observe(stats, 0)
        plan = self.config.plan.build(self.config.num_workers, epoch=max(s.plan_epoch for s in stats) + 1)
        self.ps.configure(plan)
        self.service.plan = plan
        if self.config.placement_file:
            placement = json.loads(Path(self.config.placement_file).read_text())
            self.events.emit("placement", **placement, addresses=list(self.config.ps_addresses))
        self.events.emit("plan", epoch=plan.epoch, mode=plan.label, plan=plan.describe(), reason="initial plan from config")

    def run_control(self) -> None:
        """Every decision period: summarise reports, run the policies, carry out their decisions."""
        control = for_strategy(self.config.control, self.config.plan.mode)
        base_batch = self.config.batch_size or self.task.default_batch_size
        controller = Controller(control, self.config.num_workers, base_batch)
        self.events.emit("control", strategy=self.config.plan.mode, amp=control.amp, selector=control.selector,
                         batch=control.batch, exclude=control.exclude, detector=control.detector.rule,
                         decision_period_s=control.decision_period_s)
        service, period = self.service, 0
        replacement = ReplacementPolicy(self.config.placement)
        rate = _Rate()
        while not self.stop.wait(control.decision_period_s):
            if service.state in ("done", "finished"):
                return
            stats = self._watch_ps()
            now = time.monotonic() - service.started
            with service.lock:
                amp_state = {w: d.amp for w, d in service.directives.items()}
                summaries = service.cluster.summaries(now, amp_state)
                plan = service.plan
                hosts = service.hosts.states(now, self.config.placement)
                finished = service.hosts.finished(now)
                iterations_per_s = rate.update(now, service.cluster.total_iterations())
            for move in finished:
                self._finish_move(move)
            layout = self._layout(stats, hosts)
            if layout is not None and len(hosts) > 1 and service.hosts.in_flight() is None:
                traffic = [size * iterations_per_s for size in layout.shard_bytes]
                move = replacement.decide(now, layout.shard_hosts, hosts, traffic, controller.traffic.pressured)
                if move is not None:
                    with service.lock:
                        service.start_move(move.shard, move.target, move.reason)
            if not summaries or plan is None:
                continue
            try:
                decision = controller.decide(period, plan, summaries, self._noise_scale(stats), layout)
            except Exception as exc:  # noqa: BLE001 - a policy bug must not silently end all control
                logger.exception("control decision failed")
                self.events.emit("control_error", error=repr(exc), reason="decision skipped; control goes on")
                continue
            period += 1
            for event in decision.events:
                event = dict(event)
                self.events.emit(event.pop("kind"), **event)
            with service.lock:
                for worker, amp in decision.amp.items():
                    service.directives.setdefault(worker, pb.Directives()).amp = amp
                for worker, size in decision.batch_sizes.items():
                    service.directives.setdefault(worker, pb.Directives()).batch_size = size
            if decision.plan is not None:
                self._switch_plan(decision.plan)

    def _layout(self, stats: list, hosts: dict) -> PsLayout | None:
        """Where the shards are and how their hosts look; None while a PS is down or nothing was sampled."""
        if not hosts or len(stats) < len(self.ps.addresses):
            return None
        ranges = {s.ps_index: 4.0 * (s.range_end - s.range_start) for s in stats}
        if len(ranges) < len(self.ps.addresses):
            return None
        return PsLayout(tuple(host_of(a) for a in self.ps.addresses), tuple(ranges[i] for i in range(len(self.ps.addresses))), hosts)

    def _finish_move(self, move: ShardMove) -> None:
        """A move ended: use the shard's new address (or log why it stays)."""
        if move.state is not MoveState.DONE or move.new_address is None:
            self.events.emit("ps_move_failed", **move.describe())
            return
        self.ps.retarget(move.shard, move.new_address)
        with self.service.lock:
            self.service.ps_addresses[move.shard] = move.new_address
        try:  # the old PS still answers Stats (it redirects everything else): compare what it had with what arrived
            old = stats_at(move.source, self.credentials)
            received = self.ps.stats()[move.shard].counters.get("moved_in_at_version")
            lost = None if received is None else old.version - received
        except grpc.RpcError:
            old, received, lost = None, None, None
        self.events.emit("ps_moved", **move.describe(), version_handed_over=None if old is None else old.version,
                         version_received=received, updates_lost=lost)

    def _switch_plan(self, plan: SyncPlan) -> None:
        """Send a plan to every PS. A PS that is down gets it when it is back (see _watch_ps);
        a PS that refuses it makes the switch fail, and the plan in force stays."""
        answers = self.ps.configure_each(plan)
        refused = {i: a for i, a in answers.items() if isinstance(a, grpc.RpcError) and a.code() not in RETRYABLE}
        if refused or all(isinstance(a, grpc.RpcError) for a in answers.values()):
            error = next(iter(refused.values()), None) or next(iter(answers.values()))
            self.events.emit("plan_failed", epoch=plan.epoch, error=str(error.code()), detail=error.details())
            return
        replies = [a for a in answers.values() if not isinstance(a, grpc.RpcError)]
        with self.service.lock:
            self.service.plan = plan
        self.events.emit("plan", epoch=plan.epoch, mode=plan.label, plan=plan.describe(),
                         flushed=sum(r.flushed for r in replies), released=sum(r.released for r in replies),
                         **({"pending_ps": sorted(set(answers) - {i for i, a in answers.items() if a in replies})}
                            if len(replies) < len(answers) else {}))

    def _watch_ps(self) -> list:
        """Stats of every PS; events for a PS that went down or came back from a checkpoint,
        and the plan in force re-sent to any PS that does not hold it."""
        stats = self.ps.stats_each()
        plan = self.service.plan
        events, resend = self.ps_watch.observe(stats, plan.epoch if plan else 0)
        for event in events:
            event = dict(event)
            self.events.emit(event.pop("kind"), **event)
        if resend and plan is not None:
            for index, answer in self.ps.configure_each(plan, only=resend).items():
                if isinstance(answer, grpc.RpcError):
                    log(logger, logging.WARNING, "could not re-send the plan", ps=index, error=answer.code())
                else:
                    self.events.emit("plan_resent", ps=index, epoch=plan.epoch, reason="the PS did not hold the plan in force")
        return [s for s in stats if not isinstance(s, grpc.RpcError)]

    def _noise_scale(self, stats: list) -> float:
        """B_noise summed over shards; 0 while it cannot be estimated (or a PS is down)."""
        if len(stats) < len(self.config.ps_addresses):
            return 0.0
        small_batch = max((s.noise_small_batch for s in stats), default=0.0)
        big_batch = max((s.noise_big_batch for s in stats), default=0.0)
        value = noise_scale(sum(s.noise_small_sq for s in stats), sum(s.noise_big_sq for s in stats), small_batch, big_batch)
        return value or 0.0

    def run_evaluations(self) -> None:
        """Evaluate on a fixed period until done; then write the results."""
        curve = CurveWriter(self.out / "curve.csv")
        evaluator: Evaluator | None = None
        deadline_first_update = time.monotonic() + self.config.startup_timeout_s
        try:
            while not self.stop.is_set():
                tick = time.monotonic()
                if evaluator is None:
                    evaluator = self._try_evaluator()
                point = self._evaluate(evaluator) if evaluator else None
                if point is not None:
                    self._record(point, curve)
                elif time.monotonic() > deadline_first_update:
                    self._finish("no_update_before_startup_timeout")
                if self.service.state in ("done", "finished"):
                    break
                self.stop.wait(max(0.0, self.config.eval_period_s - (time.monotonic() - tick)))
            if self.service.state == "running" or self.service.state == "starting":
                self._finish("stopped")
            self._write_result(curve.points)
        finally:
            curve.close()
            if evaluator:
                evaluator.close()

    def _try_evaluator(self) -> Evaluator | None:
        try:
            return Evaluator(self.task, self.config.ps_addresses, self.config.seed, credentials=self.credentials)
        except grpc.RpcError as exc:
            log(logger, logging.DEBUG, "evaluator not ready", error=exc.code())
            return None

    def _evaluate(self, evaluator: Evaluator) -> EvalPoint | None:
        try:
            return evaluator.evaluate()
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return None
            raise

    def _record(self, point: EvalPoint, curve: CurveWriter) -> None:
        curve.add(point)
        service = self.service
        with service.lock:
            if service.state == "starting":
                service.state = "running"
                self.events.emit("training_started", reason="first update applied")
            service.latest = point
            if service.tta_s is None and time_to_target([point], self.target, self.task.higher_is_better) is not None:
                service.tta_s = point.time_s
                self.events.emit("target_reached", tta_s=point.time_s, metric=point.metric, version=point.version, target=self.target)
        if service.tta_s is not None and self.config.stop_at_target:
            self._finish("target_reached")
        elif point.time_s >= self.config.max_time_s:
            self._finish("max_time")

    def _finish(self, reason: str) -> None:
        with self.service.lock:
            if self.service.state in ("done", "finished"):
                return
            self.service.state = "done"
            self.service.reason = reason
        self.events.emit("job_done", reason=reason)
        log(logger, logging.INFO, "job done", reason=reason)

    def _write_result(self, points: list[EvalPoint]) -> None:
        service = self.service
        try:
            stats = self.ps.stats()
        except grpc.RpcError as exc:
            log(logger, logging.WARNING, "could not read PS stats for the result", error=exc.code())
            stats = []
        result = {
            "task": self.config.task,
            "mode": self.config.plan.mode,
            "workers": self.config.num_workers,
            "ps": len(self.config.ps_addresses),
            "metric": self.task.metric_name,
            "target": self.target,
            "reached": service.tta_s is not None,
            "tta_s": service.tta_s,
            "final_metric": points[-1].metric if points else None,
            "best_metric": (max if self.task.higher_is_better else min)(p.metric for p in points) if points else None,
            "iterations": service.cluster.max_iteration(),
            "updates": max((s.version for s in stats), default=0),
            "train_s": points[-1].time_s if points else 0.0,
            "reason": service.reason,
            "evaluations": len(points),
            "ps_stats": [
                {
                    "ps_index": s.ps_index,
                    "version": s.version,
                    "accepted": s.accepted,
                    "applied": s.applied,
                    "dropped": s.dropped,
                    "pending": s.pending,
                    "counters": dict(s.counters),
                    "staleness": {str(k): v for k, v in sorted(s.staleness.items())},
                    "pushes_received": s.pushes_received,
                    "push_bytes_received": s.push_bytes_received,
                }
                for s in stats
            ],
            "reports_ignored": dict(service.cluster.ignored),
            **service.cluster.compute_vs_comm(),
            "straggler_detections": self.events.counts.get("straggler_detected", 0),
            "plan_switches": self.events.counts.get("plan", 0) - 1,
            "amp_toggles": self.events.counts.get("amp", 0),
            "final_plan": service.plan.describe() if service.plan else "",
            "faults": {
                "workers_lost": self.events.counts.get("worker_lost", 0),
                "workers_restarted": self.events.counts.get("worker_restarted", 0),
                "workers_rejoined": self.events.counts.get("worker_rejoined", 0),
                "ps_restored": self.events.counts.get("ps_restored", 0),
                "updates_lost": self.ps_watch.updates_lost,
            },
        }
        tmp = self.out / "result.json.tmp"
        tmp.write_text(json.dumps(result, indent=2))
        os.replace(tmp, self.out / "result.json")
        with service.lock:
            service.state = "finished"
        self.events.emit("result_written", reached=result["reached"], tta_s=result["tta_s"], updates=result["updates"])

    def close(self) -> None:
        self.ps.close()
        self.events.close()


def run_coordinator(config: CoordinatorConfig, ready_file: str | None = None) -> int:
    coordinator = Coordinator(config)
    credentials = coordinator.credentials
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=16),
        options=CONTROL_CHANNEL_OPTIONS,
        interceptors=credentials.server_interceptors(aio=False),
    )
    pb_grpc.add_CoordinatorServicer_to_server(coordinator.service, server)
    port = credentials.add_port(server, address(config.host, config.port))
    if port == 0:
        raise SystemExit(f"coordinator: could not bind {config.host}:{config.port}")
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: coordinator.stop.set())
    server.start()
    try:
        coordinator.configure_initial_plan()
        write_ready_file(ready_file, port=port, role="coordinator")
        log(logger, logging.INFO, "serving", port=port, workers=config.num_workers, mode=config.plan.mode)
        control = threading.Thread(target=coordinator.run_control, name="control", daemon=True)
        control.start()
        coordinator.run_evaluations()
        coordinator.stop.wait()  # keep answering JobStatus/Report (stop directives) until told to exit
    finally:
        server.stop(grace=1.0)
        coordinator.close()
    return 0
