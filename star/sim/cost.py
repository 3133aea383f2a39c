"""Cost model: how long one worker iteration takes, vectorised over workers.

iteration = pull + compute + push + overhead, with
compute = cpu x trace factor (x warmup_factor on a worker's first iteration; + resize_s on the first
iteration at a new batch size),
cpu = base_compute_s x (amp_time_factor if AMP is on) x (share + (1 - share) x batch/base_batch) x noise x stretch,
share being the step's fixed part (`fixed_compute_share`, 0 on CPUs; workers report it as samples' worth,
star.worker.step_cost, unless `report_step_cost` is off).
The trace factor multiplies the compute the worker really does (as the real worker's
replay sleeps (factor - 1) x its measured compute), so AMP or a smaller batch also
shortens a slowed step.

Host contention (host_cores > 0): the workers of one host share its cores. A worker
starting an iteration alone shares them with k workers computing at that moment, so its cpu
time is stretched by max(1, k / host_cores), k counting, for every other worker of the
host, the fraction of its time it spent computing over its latest iteration (its duty:
cpu seconds / seconds between its last two starts, waits and replay sleeps included).
Workers a synchronous round releases together share the cores as each finishes
(processor sharing, `shared_stretch`), the others' duty as extra load. So a straggler
that sleeps, or workers that wait for a round, leave cores to the others — which a real
run on a shared host shows, and which makes asynchronous modes relatively faster there.
base_compute_s is then the cpu seconds of a worker computing alone.
"""

from __future__ import annotations

import math

import numpy as np

from star.sim.config import CostConfig
from star.sim.replay import FactorTable


class CostModel:
    def __init__(self, config: CostConfig, factors: FactorTable, rng: np.random.Generator, num_workers: int | None = None):
        self.config = config
        self.factors = factors
        self.rng = rng
        cv = config.compute_noise_cv
        self._sigma = math.sqrt(math.log1p(cv * cv)) if cv > 0 else 0.0
        n = factors.num_workers if num_workers is None else num_workers
        self.host = np.arange(n) // config.workers_per_host
        self.hosts = int(self.host[-1]) + 1 if n else 0
        self.duty = np.ones(n)  # share of its time each worker computed over its latest iteration
        self.last_start = np.full(n, np.nan)
        self.last_cpu = np.zeros(n)
        self.last_batch = np.zeros(n, dtype=np.int64)  # 0: no iteration yet
        self.batch_before = np.zeros(n, dtype=np.int64)  # the batch before the latest start's (for a restart)
        self.last_stretch = np.ones(n)  # the contention stretch of each worker's latest start

    @property
    def transfer_s(self) -> float:
        return self.config.transfer_s

    def _cpu_s(self, amp: np.ndarray, batch: np.ndarray) -> np.ndarray:
        c = self.config
        t = c.base_compute_s * (c.fixed_compute_share + (1 - c.fixed_compute_share) * (batch / c.base_batch))
        t = np.where(amp, t * c.amp_time_factor, t)
        if self._sigma > 0:
            # Mean-one lognormal noise: jitter without changing the average step.
            t = t * self.rng.lognormal(-0.5 * self._sigma**2, self._sigma, len(t))
        return t

    def stretch(self, workers: np.ndarray, t0: np.ndarray, cpu: np.ndarray) -> np.ndarray:
        """Contention factor >= 1 of each starting worker's cpu time (1 everywhere without host_cores). Workers
        released together share their host's cores as its scheduler does (processor sharing, `shared_stretch`): one
        that finishes first leaves its core to the rest, so uneven batches cost only their uneven share of the
        host's work, not the largest batch at the stretch of the busiest moment."""
        cores = self.config.host_cores
        if cores <= 0:
            return np.ones(len(workers))
        hosts = self.host[workers]
        duty_sum = np.bincount(self.host, weights=self.duty, minlength=self.hosts)
        if len(workers) > 1 and np.all(t0 == t0[0]):  # released together: each counts fully
            their_duty = np.bincount(hosts, weights=self.duty[workers], minlength=self.hosts)
            others = (duty_sum - their_duty)[hosts]
            return shared_stretch(cpu, hosts, cores, others)
        k = 1.0 + duty_sum[hosts] - self.duty[workers]
        return np.maximum(1.0, k / cores)

    def start(self, workers: np.ndarray, t0: np.ndarray, iterations: np.ndarray, amp: np.ndarray,
              batch: np.ndarray) -> np.ndarray:
        """Compute seconds of the iterations the workers start at times t0 (contention, resizes and slowdown included)."""
        cpu = self._cpu_s(amp, batch)
        if self.config.host_cores > 0:  # bookkeeping only where it is used: 1,000-worker runs stay as fast
            elapsed = t0 - self.last_start[workers]
            seen = elapsed > 0
            self.duty[workers[seen]] = np.minimum(1.0, self.last_cpu[workers[seen]] / elapsed[seen])
            self.last_stretch[workers] = self.stretch(workers, t0, cpu)
            cpu = cpu * self.last_stretch[workers]
            self.last_start[workers] = t0
            self.last_cpu[workers] = cpu
        self.batch_before[workers] = self.last_batch[workers]
        return self._with_slowdown_and_resize(workers, cpu, iterations, batch)

    def restart(self, workers: np.ndarray, iterations: np.ndarray, amp: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Compute seconds of iterations restarted at a cut batch at the moment they started (the engine's cut at
        once): the contention of that start (the same peers were computing then; judged afresh, a worker restarted
        alone read 40% faster per sample than its own start under 2 shared cores, which made a slowed worker look
        half recovered to the policies), and a resize counted against the batch it ran before that start."""
        cpu = self._cpu_s(amp, batch)
        if self.config.host_cores > 0:
            cpu = cpu * self.last_stretch[workers]
            self.last_cpu[workers] = cpu
        return self._with_slowdown_and_resize(workers, cpu, iterations, batch)

    def _with_slowdown_and_resize(self, workers: np.ndarray, cpu: np.ndarray, iterations: np.ndarray,
                                  batch: np.ndarray) -> np.ndarray:
        compute = cpu * self.factors.factors(workers, iterations)
        if self.config.warmup_factor != 1.0:
            compute = compute * np.where(iterations == 0, self.config.warmup_factor, 1.0)
        if self.config.resize_s > 0:
            before = self.batch_before[workers]
            compute = compute + self.config.resize_s * ((before > 0) & (before != batch))
        self.last_batch[workers] = batch
        return compute

    @property
    def reported_fixed_samples(self) -> float:
        """What each worker reports of its step's fixed part, in samples' worth (as star.worker.step_cost measures)."""
        c = self.config
        share = c.fixed_compute_share if c.report_step_cost else 0.0
        return share * c.base_batch / (1 - share)

    def fixed_s(self) -> float:
        """Seconds of an iteration that are not compute: pull + push + overhead."""
        return 2 * self.config.transfer_s + self.config.overhead_s


def shared_stretch(cpu: np.ndarray, hosts: np.ndarray, cores: float, others: np.ndarray) -> np.ndarray:
    """Per worker, (its finishing time) / (its cpu seconds) when the workers of each host start together and share
    its `cores` equally (plus `others`, the host's other workers' load, as busy workers): while m of them compute,
    each runs at min(1, cores / (m + others)). Equal cpu gives max(1, (n + others) / cores), the old uniform stretch."""
    order = np.lexsort((cpu, hosts))
    c, h, load = cpu[order], hosts[order], others[order]
    first = np.r_[True, h[1:] != h[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(c)), 0))
    size = np.bincount(start, minlength=len(c))[start]  # workers of this worker's host in the release
    remaining = size - (np.arange(len(c)) - start)  # computing while this worker's last stretch runs
    step = np.where(first, c, np.diff(c, prepend=0.0))
    elapsed = step / np.minimum(1.0, cores / (remaining + load))
    total = np.cumsum(elapsed)
    finish = total - np.r_[0.0, total][start]  # cumulative within the host
    out = np.empty(len(c))
    out[order] = finish / np.where(c > 0, c, 1.0)
    return np.maximum(1.0, out)
