"""The worker daemon: pull -> compute (maybe slowed by a trace) -> push -> report, until told to stop.

The whole training loop is `Worker.run`; everything it calls is small and named.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time

import grpc
import torch

from star.devices import local_device
from star.flat import FlatModel
from star.logs import log
from star.policy.batch_queue import PendingBatch, batch_for_iteration, queue_batch
from star.rpc.ps_client import PSClient
from star.rpc.retries import RETRYABLE, with_retries
from star.rpc.security import Credentials
from star.tasks import get_task
from star.tasks.dataset import batch_stream
from star.traces import WorkerSlowdown, load_worker_slowdown, slowdown_sleep_s
from star.worker.amp import AmpSwitch
from star.worker.config import WorkerConfig
from star.worker.pacing import PushPacer
from star.worker.pulling import pull_under_one_plan
from star.worker.relay import RelayClient, RelayServer, sum_into
from star.worker.reporting import CoordinatorLink, IterationTimes
from star.worker.staging import HostStaging
from star.worker.step_cost import measure_fixed_samples

logger = logging.getLogger("worker")


class WorkerExit(Exception):
    """The worker cannot go on (e.g. its PS stayed unreachable); exits non-zero."""


class WorkerStopped(Exception):
    """Asked to stop (SIGTERM, SIGINT) while a PS call was being retried: the job is ending, so exit cleanly."""


REPLY_WAIT_S = 0.15  # how long a worker waits, before computing, for the reply to its last report


class Worker:
    def __init__(self, config: WorkerConfig):
        self.config = config
        self.stop = threading.Event()
        self.link: CoordinatorLink | None = None  # set in run() when a coordinator is given
        self.device = local_device(config.device, config.worker_id)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.task = get_task(config.task)
        self.model = self.task.build_model(config.seed).to(self.device)
        self.flat = FlatModel(self.model)
        self.batch_size = config.batch_size or self.task.default_batch_size
        self.base_batch = self.batch_size  # the even share; batch directives are relative to it
        self.placed_batch = self.batch_size  # the size of this worker's place in each round: its batch, or during a cut
        # at once the batch the cut replaced (its gradient is weighted as that: _weigh)
        self.batch_offset: int | None = None  # where its batch starts in each round's global batch, once the coordinator
        # sized batches (star.tasks.global_batch); None: the next batch of its own shard
        self.pending_batches: list[PendingBatch] = []  # directed batches not yet in force, by first iteration
        self.amp = AmpSwitch(self.device, enabled=config.amp)
        self.batches = batch_stream(self.task, config.worker_id, config.workers, config.seed, self.batch_size)
        self.slowdown = self._load_slowdown()
        self.iteration = 0
        self.stale_pushes = 0
        self.reply_wait_s = 0.0  # time spent after pulls waiting for report replies (the cost of a 1-iteration batch lead)
        self.pacer = PushPacer()
        self.relay: RelayServer | None = None  # set in run() when relay_host is given
        self.relay_client: RelayClient | None = None
        self.fixed_samples = 0.0  # a step's fixed compute in samples' worth, measured in run() (star.worker.step_cost)
        self.tree_pushes = 0  # pushes that carried children's gradients
        self.relayed = 0  # own gradients a tree parent pushed
        # What the PS client reads and writes: the flat buffers themselves on CPU, the gradient in shared memory
        # unless every payload goes over a network. Made last: a constructor that fails leaves no segment behind.
        self.host = HostStaging(self.flat, shared_grads=config.transport not in ("grpc", "socket"), worker_id=config.worker_id)

    def _load_slowdown(self) -> WorkerSlowdown | None:
        c = self.config
        if not c.trace.path:
            return None
        return load_worker_slowdown(c.trace.path, c.worker_id, c.workers, c.trace.workers, c.trace.stretch)

    def close(self) -> None:
        """Unlink the shared gradient segment (named after this process, so no sweep takes it while the process
        lives). `run()` closes however it ends; whoever builds a worker and does not run it closes it (or uses `with`)."""
        self.host.close()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the loop --------------------------------------------------------------
    def run(self) -> int:
        try:
            return self._run()
        finally:
            self.close()  # however the run ends

    def _run(self) -> int:
        c = self.config
        credentials = Credentials.load(c.security)
        if c.measure_step_cost:  # before joining: the PSs' first round waits for every worker's first push anyway
            self.fixed_samples = self._measure_step_cost()
            log(logger, logging.INFO, "step cost", worker=c.worker_id, batch=self.batch_size, fixed_samples=round(self.fixed_samples, 2))
        link = self.link = CoordinatorLink(c.coordinator, c.worker_id, credentials=credentials) if c.coordinator else None
        try:
            addresses = list(c.ps_addresses) or (link.join(self.batch_size, self.amp.enabled, self.stop) if link else [])
        except grpc.RpcError as exc:
            raise WorkerExit(f"coordinator {c.coordinator} did not take this worker's join: {exc.code()} "
                             f"{exc.details()}") from None
        if not addresses and self.stop.is_set():
            raise WorkerStopped("stopped before joining")
        if not addresses:
            raise WorkerExit("no parameter servers: give ps_addresses or a coordinator")
        if c.relay_host:
            self.relay = RelayServer(c.relay_host, self.flat.numel, credentials, c.max_workers)
        self.relay_client = RelayClient(c.worker_id, credentials)
        try:
            self._train(addresses, credentials, link)
        finally:
            if self.relay is not None:
                self.relay.stop()
            self.relay_client.close()
        if link:
            link.close()
        return 0

    def _train(self, addresses: list[str], credentials: Credentials, link: CoordinatorLink | None) -> None:
        c = self.config
        with PSClient(addresses, c.worker_id, credentials=credentials, transport=c.transport, wire=c.wire,
                      grad_segment=self.host.grad_segment) as ps:
            self._connect(ps)
            log(logger, logging.INFO, "training", worker=c.worker_id, numel=self.flat.numel, batch=self.batch_size,
                data=type(self.batches).__name__)
            while not self.stop.is_set() and (c.max_iterations is None or self.iteration < c.max_iterations):
                t0 = time.monotonic()
                if not self._pull(ps):
                    break
                self.host.params_up()
                if link:  # a batch decision made before our last report applies from this iteration on
                    waited = time.monotonic()
                    link.wait_for_replies(REPLY_WAIT_S)
                    self.reply_wait_s += time.monotonic() - waited
                    self._obey(link)
                    if self.stop.is_set():  # the reply said stop: no iteration after it
                        break
                t1 = time.monotonic()
                loss, raw_compute_s = self._compute()
                factor = self.slowdown.factor_at(self.iteration) if self.slowdown else 1.0
                time.sleep(slowdown_sleep_s(raw_compute_s, factor))
                paced_s = self.pacer.wait_s(time.monotonic(), self.flat.numel * 4, ps.push_pace_bytes_per_s)
                time.sleep(paced_s)
                t2 = time.monotonic()
                waited_s = self._send(ps)
                t3 = time.monotonic()
                self.iteration += 1
                if link:
                    link.report(IterationTimes(self.iteration, t2 - t1 - paced_s, t3 - t2 - waited_s, t1 - t0 + waited_s,
                                               self.batch_size, self.amp.enabled, loss, factor, paced_s, self.fixed_samples))
                    self._obey(link)
            log(logger, logging.INFO, "stopped", worker=c.worker_id, iterations=self.iteration, stale_pushes=self.stale_pushes,
                reply_wait_ms=round(self.reply_wait_s * 1000, 1),
                tree_pushes=self.tree_pushes, relayed=self.relayed)

    def _compute(self) -> tuple[float, float]:
        """One forward/backward into the flat gradient; returns (loss, seconds)."""
        self._take_due_batch()
        start = time.monotonic()
        if self.batch_offset is None:
            inputs, targets = self.batches.next_batch(self.batch_size)
        else:  # round = this worker's iteration: in step with the others under synchronous plans
            inputs, targets = self.batches.round_batch(self.iteration, self.batch_offset, self.batch_size, self.base_batch)
        inputs, targets = inputs.to(self.device), targets.to(self.device)
        for _ in range(8):  # fp16 overflow: retry with the lowered loss scale
            self.flat.zero_grad()
            with self.amp.autocast():
                loss = self.task.loss_fn(self.model(inputs), targets)
            if self.amp.backward(loss, self.flat.grads):
                break
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return float(loss.detach()), time.monotonic() - start

    def _measure_step_cost(self) -> float:
        """A step's fixed compute in samples' worth (star.worker.step_cost), timed on a batch of its own shard
        outside training: the data order, the model's buffers and the random state are left as they were."""
        c = self.config
        inputs, targets = batch_stream(self.task, c.worker_id, c.workers, c.seed, self.batch_size).next_batch(self.batch_size)
        inputs, targets = inputs.to(self.device), targets.to(self.device)
        buffers = [b.detach().clone() for b in self.model.buffers()]

        def step(batch: int) -> None:
            self.flat.zero_grad()
            with self.amp.autocast():
                loss = self.task.loss_fn(self.model(inputs[:batch]), targets[:batch])
            self.amp.backward(loss, self.flat.grads)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)

        # On a CPU the step's own work is its CPU time: what the processes starting beside it take is not.
        clock = time.perf_counter if self.device.type == "cuda" else time.process_time
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            fixed = measure_fixed_samples(step, self.batch_size, clock=clock)
        with torch.no_grad():
            for saved, live in zip(buffers, self.model.buffers()):
                live.copy_(saved)
        self.flat.zero_grad()
        return fixed

    def _obey(self, link: CoordinatorLink) -> None:
        directives = link.directives()
        if directives is None:
            return
        if directives.stop:
            self.stop.set()
        if self.amp.set(directives.amp):
            log(logger, logging.INFO, "amp switched", worker=self.config.worker_id, amp=directives.amp)
        size = directives.batch_size or self.placed_batch
        offset = directives.batch_offset if directives.HasField("batch_offset") else self.batch_offset
        directed = PendingBatch(size, offset, directives.batch_from_iteration, directives.cut_at_once)
        self.pending_batches = queue_batch(self.pending_batches, directed, (self.placed_batch, self.batch_offset))

    def _take_due_batch(self) -> None:
        """The batch this iteration runs with (star.policy.batch_queue.batch_for_iteration), logged when it changes."""
        taken = batch_for_iteration(self.pending_batches, self.iteration, (self.placed_batch, self.batch_offset))
        self.pending_batches, worker = taken.pending, self.config.worker_id
        if taken.placed_size != self.placed_batch:
            log(logger, logging.INFO, "batch size changed", worker=worker, old=self.placed_batch, new=taken.placed_size)
        if taken.offset != self.batch_offset:
            log(logger, logging.INFO, "batch placed in the global batch", worker=worker, offset=taken.offset,
                size=taken.placed_size, iteration=self.iteration)
        if taken.cut and taken.size != self.batch_size:
            log(logger, logging.INFO, "batch size cut before the new batches start", worker=worker,
                old=taken.placed_size, new=taken.size, iteration=self.iteration)
        self.batch_size, self.placed_batch, self.batch_offset = taken.size, taken.placed_size, taken.offset

    # ---- PS I/O ----------------------------------------------------------------
    def _retry(self, what: str, call):
        def on_retry(attempt: int, exc: Exception) -> None:
            log(
                logger,
                logging.WARNING,
                f"{what}: parameter server unreachable, retrying",
                attempt=f"{attempt}/{self.config.ps_retry_attempts}",
                error=getattr(exc, "code", lambda: exc)(),
            )

        try:
            return with_retries(
                call, attempts=self.config.ps_retry_attempts, base_delay_s=self.config.ps_retry_base_s, on_retry=on_retry,
                stop=self.stop,
            )
        except grpc.RpcError as exc:
            if exc.code() not in RETRYABLE:
                raise  # a refusal, not an outage: the caller decides
            if self.stop.is_set():
                raise WorkerStopped(f"{what}: stopped while retrying ({exc.code()})") from None
            raise WorkerExit(f"{what} failed after {self.config.ps_retry_attempts} tries: {exc.code()} {exc.details()}") from None

    def _connect(self, ps: PSClient) -> None:
        relay = self.relay.address if self.relay is not None else ""
        replies = self._retry("register", lambda: ps.register(self.flat.numel, relay_address=relay))
        accepted = self._retry("init", lambda: ps.init_if_needed(self.host.params_down(), replies))
        if accepted:
            log(logger, logging.INFO, "initialised parameter servers", count=accepted)
        log(logger, logging.INFO, "payload transport", transport=ps.transport_used, wire=self.config.wire,
            zero_copy_pushes=f"{sum(ps.grad_mapped)}/{len(ps.grad_mapped)} PS")

    def _rejoin(self, ps: PSClient, exc: grpc.RpcError) -> None:
        log(logger, logging.WARNING, "a parameter server does not know this worker (restarted?): registering again",
            detail=exc.details())
        self._connect(ps)

    def _pull(self, ps: PSClient) -> bool:
        """Blocking pull, re-issued every pull_poll_s so that a stop request is noticed."""
        failures = 0
        while not self.stop.is_set():
            try:
                pulls = pull_under_one_plan(lambda: ps.pull(self.host.params, timeout_s=self.config.pull_poll_s),
                                            lambda: ps.pulled_key[0], self.config.pull_poll_s, self.stop)
                if pulls > 1:
                    log(logger, logging.DEBUG, "pulled again: the shards answered under different plans", pulls=pulls)
                return True
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    if self.link is not None:
                        self.link.heartbeat(self.iteration)
                        directives = self.link.directives()  # a job that ended while this pull waited (its round never closes)
                        if directives is not None and directives.stop:
                            self.stop.set()
                    self._refuse_held_children()
                    continue  # still blocked on the round: normal under SSGD with a straggler
                if exc.code() == grpc.StatusCode.NOT_FOUND or _not_initialised(exc):
                    self._rejoin(ps, exc)  # a PS restarted (from its checkpoint, or empty) and does not know us
                    continue
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                failures += 1
                if failures >= self.config.ps_retry_attempts:
                    raise WorkerExit(f"pull failed after {failures} tries: {exc.code()} {exc.details()}") from None
                log(logger, logging.WARNING, "pull: parameter server unreachable, retrying", attempt=failures)
                self.stop.wait(min(self.config.ps_retry_base_s * 2 ** (failures - 1), 5.0))  # a stop ends the wait
        return False

    def _refuse_held_children(self) -> None:
        """A tree parent blocked in its pull sends back what its children left with it: the
        round it waits on needs those gradients, so they must go to the PSs directly."""
        if self.relay is None:
            return
        refused = self.relay.inbox.refuse_held(self.config.pull_poll_s, "the parent's pull is blocked on a round")
        if refused:
            log(logger, logging.INFO, "tree parent blocked in its pull: children push for themselves", children=refused)

    def _weigh(self) -> None:
        """Scale the gradient (a mean over this iteration's samples) by its place in the round over the even share:
        the PS averages per worker, so the sum stays the global batch's mean. A cut at once computes only the head of
        its place and stands for all of it; weighted by the samples it computed, that round's step was the cut's share
        shorter (in the simulator, cuts cost batch sizing 1.7% of its TTA on average over 104 unseen traces)."""
        if self.placed_batch != self.base_batch:
            self.flat.grads.mul_(self.placed_batch / self.base_batch)

    def _send(self, ps: PSClient) -> float:
        """Deliver this iteration's gradient: to the tree parent, with the tree children's, or alone.
        Returns the seconds spent waiting on other workers (not moving bytes)."""
        self._weigh()
        grads = self.host.grads_down()
        parent, children = ps.tree_role
        if parent:
            key = ps.pulled_key
            result = self.relay_client.contribute(  # type: ignore[union-attr]
                parent, grads, key, self.batch_size, poll_s=self.config.pull_poll_s, timeout_s=300.0,
                on_wait=lambda: self._waiting_on_parent(ps, key[0]))
            if result.taken:
                return result.wait_s
            log(logger, logging.DEBUG, "tree parent did not take the gradient; pushing it myself", reason=result.reason)
            self._push(ps, grads)
            return result.wait_s
        if children and self.relay is not None:
            start = time.monotonic()
            taken = self.relay.inbox.collect(ps.pulled_key, children, self.config.tree_wait_s, self.stop)
            waited_s = time.monotonic() - start
            if taken:
                total = grads.clone()
                batch = self.batch_size + sum_into(total, taken)
                pushed = self._push(ps, total, batch, [c.worker for c in taken])
                self.relay.inbox.settle(taken, pushed)
                if pushed:
                    self.tree_pushes += 1
                    self.relayed += len(taken)
                    return waited_s
            self._push(ps, grads)  # no child came in time, or the tree push was refused: ours alone
            return waited_s
        self._push(ps, grads)
        return 0.0

    def _waiting_on_parent(self, ps: PSClient, epoch: int) -> str | None:
        """While the tree parent holds our gradient: stay alive to the coordinator, and give up on the
        parent once the PSs run a newer plan (a parent that froze is dropped from it; we are not)."""
        if self.link is not None:
            self.link.heartbeat(self.iteration)
        try:
            epochs = {s.plan_epoch for s in ps.stats(timeout_s=self.config.pull_poll_s)}
        except grpc.RpcError:
            return None
        return f"the plan moved on to epoch {max(epochs)}" if max(epochs) > epoch else None

    def _push(self, ps: PSClient, grads: torch.Tensor, batch_size: int | None = None, contributors: list[int] | None = None) -> bool:
        """Push to every PS; False when refused (the caller's gradient did not count)."""
        batch = self.batch_size if batch_size is None else batch_size
        try:
            self._retry("push", lambda: ps.push(grads, self.iteration, timeout_s=30.0, batch_size=batch, contributors=contributors or ()))
            return True
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                self._rejoin(ps, exc)  # this gradient is lost with the PS's state; pull again
                return False
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                # The plan changed (or the round closed) while we computed: pull again.
                self.stale_pushes += 1
                log(logger, logging.DEBUG, "push refused, pulling again", detail=exc.details())
                return False
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT and "NaN" in (exc.details() or ""):
                log(logger, logging.WARNING, "gradient had NaN/Inf; skipped", iteration=self.iteration)
                return False
            if contributors and exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                # A child's gradient did not fit the round (e.g. it pulled a different version): send ours alone.
                log(logger, logging.WARNING, "tree push refused; pushing alone", detail=exc.details())
                return False
            raise


def _not_initialised(exc: grpc.RpcError) -> bool:
    """A PS that restarted with no checkpoint: rejoining initialises it from this worker's latest parameters."""
    return exc.code() == grpc.StatusCode.FAILED_PRECONDITION and "not initialised" in (exc.details() or "")


def run_worker(config: WorkerConfig) -> int:
    torch.set_num_threads(config.threads)
    worker = Worker(config)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: worker.stop.set())
    try:
        return worker.run()
    except WorkerStopped as exc:
        log(logger, logging.INFO, f"stopped: {exc}", worker=config.worker_id)
        return 0
    except WorkerExit as exc:
        log(logger, logging.ERROR, f"exiting: {exc}", worker=config.worker_id, host=socket.gethostname(), pid=os.getpid())
        return 3
    except grpc.RpcError as exc:  # a PS or the coordinator refused this worker for good: one line, not a traceback
        if exc.code() not in REFUSED_FOR_GOOD:
            raise
        log(logger, logging.ERROR, f"exiting: refused: {exc.code().name}: {exc.details()}", worker=config.worker_id,
            hint="a wrong job token, or a --task or model that differs from the job's")
        return 3


# Answers no retry changes (the job token, the model's size): the worker ends, saying why.
REFUSED_FOR_GOOD = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
