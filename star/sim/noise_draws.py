"""The PS's gradient-noise-scale estimate in simulation: drawn norms through the PS's own estimator.

Why: the controller judges batch sizes and sync modes by B_noise, and a real PS only has
a noisy, lagging estimate of it (`star.policy.noise`). Feeding the simulated controller
the true value would let it act on knowledge no real run has.

The convergence model's B_noise fixes |G|² = 1 and S = b_noise, so a gradient of batch
b has E|g_b|² = 1 + S/b. For every round that sums k >= 2 gradients of batches b_i
(synchronous rounds, k-of-N quorums, rounds flushed by a plan switch: what a PS
observes) this draws
  small = (1 + S·mean_i(1/b_i)) · X_kν / kν      (the mean of k gradients' squared norms)
  big   = (1 + S·Σ_i(1/b_i)/k²) · X_ν / ν          (the squared norm of their mean)
with X_m a chi-square of m degrees of freedom (ν = convergence.noise_norm_dof, drawn
independently: the sum of k independent X_ν with equal means is one X_kν, exact when
the batches are equal), and passes them with mean(b_i) and Σb_i to
`NoiseAccumulator.observe_norms`, the PS's EMA. ν stands for the whole gradient's
effective number of independent noise directions: sharding splits the coordinates,
not the noise, and squared norms add over shards while the EMA is linear, so one
accumulator stands for the coordinator's sum over P shard accumulators. At ν = 20 the
fed value of a 4-8-worker job spans about ±40% (10th-90th percentile) and of a
16-worker one about ±20%, comparable with the swings between the few estimates real
4-worker runs logged (benchmarks/results/*/events.jsonl). Draws come from their own
seeded stream, so the compute-noise draws (and results with b_noise = 0) are as without them.
"""

from __future__ import annotations

import numpy as np

from star.policy.noise import NoiseAccumulator, noise_scale


class NoiseDraws:
    """Rounds seen since the last estimate (batch statistics only: draws are made in bulk).
    With b_noise = 0 it sees nothing and estimates 0, as the coordinator feeds while it cannot estimate."""

    def __init__(self, b_noise: float, dof: float, seed: int):
        self.noise = float(b_noise)  # S, with |G|² = 1
        self.on = self.noise > 0
        self.dof = float(dof)
        self.rng = np.random.default_rng([seed, 16])
        self.accumulator = NoiseAccumulator()
        self.value = 0.0  # the latest estimate
        self._k: list[int] = []
        self._batch_sum: list[float] = []
        self._inverse_sum: list[float] = []

    def round(self, batches: np.ndarray, workers: np.ndarray) -> None:
        """A round applied the gradients of these workers, of batches[workers] (one gradient: not seen)."""
        if not self.on or len(workers) < 2:
            return
        batch = batches[workers]
        self._k.append(len(batch))
        self._batch_sum.append(float(batch.sum()))
        self._inverse_sum.append(float((1.0 / batch).sum()))

    def estimate(self) -> float:
        """The PS's B_noise after the rounds seen so far (0 while it cannot be estimated, as the coordinator feeds)."""
        if self._k:
            k = np.asarray(self._k, dtype=float)
            inverse = np.asarray(self._inverse_sum)
            batch_sum = np.asarray(self._batch_sum)
            small = (1.0 + self.noise * inverse / k) * self.rng.chisquare(k * self.dof) / (k * self.dof)
            big = (1.0 + self.noise * inverse / k**2) * self.rng.chisquare(self.dof, len(k)) / self.dof
            observe = self.accumulator.observe_norms
            for s, b, per_gradient, total in zip(small.tolist(), big.tolist(), (batch_sum / k).tolist(), batch_sum.tolist()):
                observe(s, b, per_gradient, total)
            self._k, self._batch_sum, self._inverse_sum = [], [], []
        a = self.accumulator
        self.value = noise_scale(a.small_sq, a.big_sq, a.small_batch, a.big_batch) or 0.0
        return self.value
