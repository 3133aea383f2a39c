"""The coordinator daemon: one per job. Owns the plan, hears every worker, runs the evaluator.

It sends the initial plan to every PS, answers each worker's per-iteration report with directives, evaluates
the PSs' parameters on a fixed period, decides when the job is done (target reached or time up), and writes
curve.csv, events.jsonl and result.json. Decision logic stays in pure code (`star.control_loop.ControlLoop`,
`star.tta.reached`, `ClusterView`, `star.training_clock`), so this module is wiring.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

from star.hosts import HostBook, MoveState, ShardMove
from star.policy.batch import directed_from_iteration
from star.policy.controller import for_strategy, with_task_staleness
from star.task_calibration import staleness_penalty as task_staleness_penalty
from star.devices import local_device
from star.evaluator import CurveWriter, Evaluator
from star.training_clock import TrainingClock
from star.tta import EvalPoint, next_version, reached
from star.cluster import ClusterView, ps_input
from star.control_loop import Actions, ControlLoop, HostsInput, Reports
from star.coordinator_config import CoordinatorConfig
from star.coordinator_checks import directives_problem, join_problem, report_problem, resources_problem
from star.coordinator_restore import restore_control, restore_coordinator, save_state
from star.coordinator_result import result_dict
from star.decision_clock import EARLY_REPLY_WAIT_S, DecisionClock
from star.report_book import STEP_COST_REASON
from star.events import EventLog
from star.observe import JobObserver
from star.logs import log
from star.plan import SyncPlan
from star.rpc import star_pb2 as pb, star_pb2_grpc as pb_grpc
from star.rpc.common import CONTROL_CHANNEL_OPTIONS, EXCLUSIVE_PORT, MAX_LABEL_CHARS, address, host_of, sample_from_proto, write_ready_file
from star.ps_watch import PsWatch
from star.rpc.ps_client import PSClient, stats_at
from star.rpc.retries import RETRYABLE
from star.rpc.security import Credentials
from star.shm import transport_in_use
from star.tasks import get_task

logger = logging.getLogger("coordinator")


class CoordinatorService(pb_grpc.CoordinatorServicer):
    def __init__(self, config: CoordinatorConfig, events: EventLog):
        self.config, self.events = config, events
        self.worker_limit = max(config.workers, config.max_workers)  # worker ids 0..worker_limit-1 may join
        self.cluster = ClusterView(self.worker_limit, config.report_window)
        self.pending_admissions: set[int] = set()  # joined mid-run, admitted into the plan at the next decision period
        self.hosts = HostBook()
        self.ps_addresses = list(config.ps_addresses)  # where each shard is served now (shards can move)
        self.directives: dict[int, pb.Directives] = {}
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.state, self.reason = "starting", ""
        self.transport = ("", "")  # (transport, wire) the pushes took, from the PS stats (star.shm.transport_in_use)
        self.plan: SyncPlan | None = None
        self.latest: EvalPoint | None = None
        self.tta_s: float | None = None
        self.updates_to_target: int | None = None  # parameter version (max over PSs) of the evaluation that reached it
        self.metric_name = ""
        self._rate, self._rate_value = (time.monotonic(), 0), 0.0
        self.observer: JobObserver | None = None  # metrics, TensorBoard, straggler summary (set by Coordinator)
        self.clock = DecisionClock(config.control.decision_period_s)  # a report over the slowdown watch wakes the loop

    def amp_state(self) -> dict[int, bool]:
        """Per worker, whether AMP is on (the directives sent); call under the lock."""
        return {w: d.amp for w, d in self.directives.items()}

    def _directives_for(self, worker: int, joining: bool = False) -> pb.Directives:
        """A (re)joining worker counts its iterations afresh: its batch applies at once, as its place, not as a cut."""
        directives = pb.Directives()
        directives.CopyFrom(self.directives.setdefault(worker, pb.Directives()))
        directives.stop = self.state in ("done", "finished")
        if joining:  # (a cut at once weighs as the place it replaces, which this worker never had: Worker._weigh)
            directives.batch_from_iteration, directives.cut_at_once = 0, False
        return directives

    def Join(self, request: pb.JoinRequest, context: grpc.ServicerContext) -> pb.JoinReply:
        if problem := join_problem(request, self.worker_limit):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        with self.lock:
            if request.worker_id in self.cluster.joined:
                # A restarted worker counts its iterations from 0 again: start its history afresh.
                self.cluster.forget(request.worker_id)
                self.events.emit("worker_restarted", worker=request.worker_id, host=request.host, pid=request.pid)
            self.cluster.joined.add(request.worker_id)
            if request.worker_id >= self.config.workers and self.plan and request.worker_id not in self.plan.workers:
                self.pending_admissions.add(request.worker_id)
            self.events.emit("worker_joined", worker=request.worker_id, host=request.host, pid=request.pid)
            return pb.JoinReply(ps_addresses=self.ps_addresses, directives=self._directives_for(request.worker_id, joining=True))

    def Report(self, request: pb.IterationReport, context: grpc.ServicerContext) -> pb.Directives:
        if problem := report_problem(request, self.worker_limit):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        with self.lock:
            history = self.cluster.reports.get(request.worker_id)
            previous = history[-1].slowdown if history else 1.0
            accepted = self.cluster.accept(request, time.monotonic() - self.started)
            if accepted:
                self.cluster.joined.add(request.worker_id)  # after a coordinator restart, reports are how workers are known
            ticket = None
            workers = self.plan.workers if self.plan else ()
            if accepted and self.clock.crossed(request.worker_id, self.cluster, self.amp_state(), workers):
                ticket = self.clock.wake(request.worker_id)
            if accepted and abs(request.slowdown - previous) > 0.1 * previous:
                self.events.emit("slowdown_changed", worker=request.worker_id, iteration=request.iteration,
                                 factor=round(request.slowdown, 4), reason="replayed trace")
            if accepted and not history and request.fixed_samples > 0:  # star.worker.step_cost, star.report_book
                self.events.emit("step_cost", worker=request.worker_id, fixed_samples=round(request.fixed_samples, 2),
                                 pooled=round(self.cluster.book.pooled_fixed_samples(), 2), reason=STEP_COST_REASON)
            directives = self._directives_for(request.worker_id)
        if ticket is not None:  # answered with the decision this report woke: the slowed worker needs it first
            self.clock.wait_decided(ticket, EARLY_REPLY_WAIT_S)
            with self.lock:
                directives = self._directives_for(request.worker_id)
        if accepted and self.observer is not None:  # outside the lock: files and TensorBoard never hold up JobStatus
            self.observer.on_report(request)
        return directives

    def SetDirectives(self, request: pb.SetDirectivesRequest, context: grpc.ServicerContext) -> pb.SetDirectivesReply:
        if problem := directives_problem(request, self.worker_limit):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        with self.lock:
            if self.directives.get(request.worker_id, pb.Directives()).amp != request.directives.amp:
                self.cluster.amp_switched(request.worker_id, request.directives.amp)
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
                transport=self.transport[0],
                wire=self.transport[1],
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
        self.observer = self.service.observer = JobObserver(self.out, config.tensorboard)
        self.events.listeners.append(self.observer.on_event)
        self.task = get_task(config.task)
        self.target = config.target if config.target is not None else self.task.default_target
        self.service.metric_name = self.task.metric_name
        self.stop = threading.Event()
        self.credentials = Credentials.load(config.security)
        self.ps = PSClient(config.ps_addresses, credentials=self.credentials)
        self.ps_watch = PsWatch()
        self.restored_control: tuple[int, dict] | None = None  # (decision period, controller state) of a restored coordinator
        self.restored_points: list[EvalPoint] = []  # curve.csv of the coordinator this one replaced

    def start(self) -> None:
        """Take the job over from the PSs (restore) or send the initial plan."""
        if not (self.config.restore and restore_coordinator(self)):
            self.configure_initial_plan()

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
        plan = self.config.plan.build(self.config.workers, epoch=max(s.plan_epoch for s in stats) + 1)
        self.ps.configure(plan)
        self.service.plan = plan
        if self.config.placement_file:
            placement = json.loads(Path(self.config.placement_file).read_text())
            self.events.emit("placement", **placement, addresses=list(self.config.ps_addresses))
        self.events.emit("plan", epoch=plan.epoch, mode=plan.label, plan=plan.describe(), reason="initial plan from config")

    def run_control(self) -> None:
        """Every decision period: gather the inputs, step the pure control loop (star.control_loop), carry out its actions."""
        control = with_task_staleness(for_strategy(self.config.control, self.config.plan.mode),
                                      task_staleness_penalty(self.config.task))
        loop = ControlLoop(control, self.config.workers, self.config.batch_size or self.task.default_batch_size,
                           self.config.placement)
        self.events.emit("control", strategy=self.config.plan.mode, amp=control.amp, selector=control.selector,
                         batch=control.batch, exclude=control.exclude, detector=control.detector.rule,
                         decision_period_s=control.decision_period_s, staleness_penalty=control.selection.penalty,
                         staleness_penalty_from="config" if self.config.control.selection.staleness_penalty is not None
                         else "task calibration" if control.selection.staleness_penalty is not None else "default")
        service = self.service
        loop.period, stats = restore_control(self, loop.controller), None
        while (woken_by := service.clock.wait(self.stop)) is not None:
            if service.state in ("done", "finished"):
                loop.finish()
                return
            with service.lock:
                newcomers, service.pending_admissions = service.pending_admissions, set()
                plan = service.plan
            self._perform(loop.admit(plan, newcomers))
            stats = stats if woken_by and stats is not None else self._watch_ps()  # a woken decision answers a waiting worker
            now = time.monotonic() - service.started
            with service.lock:
                reports = Reports(service.plan, service.cluster.summaries(now, service.amp_state()), service.cluster.total_iterations())
                hosts = service.hosts.states(now, self.config.placement)
                finished = service.hosts.finished(now)
            for move in finished:
                self._finish_move(move)
            in_flight = service.hosts.in_flight() is not None
            self._perform(loop.step(now, reports, ps_input(self.ps.addresses, stats), HostsInput(hosts, in_flight), woken_by=woken_by),
                          woken_by if control.batching.cut_at_once else ())
            with service.lock:
                min_reports, workers = loop.sizing_watch(), service.plan.workers if service.plan else ()
                unsized = service.cluster.unsized(workers, service.amp_state(), min_reports) if min_reports else ()
                service.clock.arm(loop.slowdown_watch(), service.cluster.report_counts(), unsized, min_reports or 0,
                                  loop.confirming())
            service.clock.decided()
            save_state(self, loop.period, loop.controller)  # after the answer: a file write never holds up a woken decision

    def _perform(self, actions: Actions, woken_by: tuple[int, ...] = ()) -> None:
        """Carry out the loop's decision: a shard move, events, directives (cuts at once for woken_by), a plan switch."""
        service = self.service
        if actions.move is not None:
            with service.lock:
                service.start_move(actions.move.shard, actions.move.target_host, actions.move.reason)
        if actions.error is not None:
            logger.error("control decision failed", exc_info=actions.error)
        for event in actions.events:
            self.events.emit(event.kind, **event.fields)
        if actions.directives:
            with service.lock:
                for worker, amp in actions.directives.amp.items():
                    directive = service.directives.setdefault(worker, pb.Directives())
                    if directive.amp != amp:
                        service.cluster.amp_switched(worker, amp)
                    directive.amp = amp
                for worker, size in actions.directives.batch_sizes.items():
                    directive = service.directives.setdefault(worker, pb.Directives())
                    directive.cut_at_once = worker in woken_by  # the worker starts it at once only if it is a cut
                    directive.batch_size = size
                furthest = service.cluster.max_iteration()
                for worker, offset in actions.directives.batch_offsets.items():
                    directive = service.directives.setdefault(worker, pb.Directives())
                    directive.batch_offset = offset
                    directive.batch_from_iteration = directed_from_iteration(
                        directive.batch_from_iteration, service.cluster.last_iteration(worker), furthest)
        if actions.switch is not None:
            self._switch_plan(actions.switch.plan)

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
        """Send a plan to every PS. One that is down gets it when back (_watch_ps); a refusal fails the switch."""
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
        """Stats of every PS; events for a PS down or back from a checkpoint; the plan re-sent to one without it."""
        stats = self.ps.stats_each()
        plan = self.service.plan
        events, resend = self.ps_watch.observe(stats, plan.epoch if plan else 0)
        self.service.transport = transport_in_use([s for s in stats if not isinstance(s, grpc.RpcError)])
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

    def run_evaluations(self) -> None:
        """Evaluate on a fixed period until done; then write the results."""
        curve = CurveWriter(self.out / "curve.csv", self.restored_points)
        evaluator: Evaluator | None = None
        grid, wanted = self.config.evaluation.every_updates, 0  # wanted: the next version to evaluate at (0: any, on the period)
        since = -1.0  # seconds since the first update, as the PSs last said (< 0: none yet)
        clock = TrainingClock(self.config.startup_timeout_s, time.monotonic())  # has the job trained (start-up timeout)?
        try:
            while not self.stop.is_set():
                tick = time.monotonic()
                if evaluator is None:
                    evaluator = self._try_evaluator()
                since, point = self._evaluate(evaluator, wanted, since) if evaluator else (-1.0, None)
                clock.read(since)
                if point is not None:
                    wanted = next_version(point.version, grid) if grid else 0
                    self._record(point, curve)
                elif since >= self.config.max_time_s:
                    self._finish("max_time")  # updates stalled below the next version to evaluate
                if clock.stalled_at_start(time.monotonic()):  # also with points: a resumed job's standing clock
                    self._finish("no_update_before_startup_timeout")
                if self.service.state in ("done", "finished"):
                    break
                period = self.config.evaluation.poll_s if grid else self.config.eval_period_s
                self.stop.wait(max(0.0, period - (time.monotonic() - tick)))
            if self.service.state == "running" or self.service.state == "starting":
                self._finish("stopped")
            self._write_result(curve.points)
        finally:
            curve.close()
            if evaluator:
                evaluator.close()

    def _try_evaluator(self) -> Evaluator | None:
        try:
            return Evaluator(self.task, self.config.ps_addresses, self.config.seed, credentials=self.credentials,
                             device=local_device(self.config.device, 0))
        except grpc.RpcError as exc:
            log(logger, logging.DEBUG, "evaluator not ready", error=exc.code())
            return None

    def _evaluate(self, evaluator: Evaluator, min_version: int, since: float) -> tuple[float, EvalPoint | None]:
        rule = self.config.evaluation  # on the grid each PS holds the call for the version (no 50 ms polls), not past max_time_s
        wait_s = min(rule.wait_s, max(0.0, self.config.max_time_s - since)) if rule.every_updates else 0.0
        try:
            return evaluator.evaluate(min_version, wait_s)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return -1.0, None
            raise

    def _record(self, point: EvalPoint, curve: CurveWriter) -> None:
        curve.add(point)
        self.observer.on_eval(self.task.metric_name, point.metric, point.version)
        service = self.service
        with service.lock:
            if service.state == "starting":
                service.state = "running"
                self.events.emit("training_started", reason="first update applied", since_first_update_s=round(point.time_s, 4))
            service.latest = point
            smoothing = self.config.evaluation.smoothing
            if service.tta_s is None and reached(curve.points, self.target, self.task.higher_is_better, smoothing):
                service.tta_s, service.updates_to_target = point.time_s, point.version
                self.events.emit("target_reached", tta_s=point.time_s, metric=point.metric, version=point.version, target=self.target,
                                 smoothed_over=smoothing)
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
        result = result_dict(self, points, stats)
        result["straggler_summary"] = self.observer.straggler_summary([dict(s.counters) for s in stats])
        tmp = self.out / "result.json.tmp"
        tmp.write_text(json.dumps(result, indent=2))
        os.replace(tmp, self.out / "result.json")
        with service.lock:
            service.state = "finished"
        self.events.emit("result_written", reached=result["reached"], tta_s=result["tta_s"], updates=result["updates"])

    def close(self) -> None:
        self.ps.close()
        self.observer.close()
        self.events.close()


def run_coordinator(config: CoordinatorConfig, ready_file: str | None = None) -> int:
    coordinator = Coordinator(config)
    credentials = coordinator.credentials
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=16),
        options=CONTROL_CHANNEL_OPTIONS + EXCLUSIVE_PORT,
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
        coordinator.start()
        metrics_port = (coordinator.observer.serve_metrics(config.host, config.metrics_port, coordinator.task.metric_name)
                        if config.metrics_port is not None else None)
        write_ready_file(ready_file, port=port, role="coordinator", metrics_port=metrics_port)
        log(logger, logging.INFO, "serving", port=port, workers=config.workers, mode=config.plan.mode)
        control = threading.Thread(target=coordinator.run_control, name="control", daemon=True)
        control.start()
        coordinator.run_evaluations()
        coordinator.stop.wait()  # keep answering JobStatus/Report (stop directives) until told to exit
    finally:
        server.stop(grace=1.0)
        coordinator.close()
    return 0
