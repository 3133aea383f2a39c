"""What one synchronous round costs a PS after its last push arrives, phase by phase, at a real shard size.

    python -m benchmarks.ps_apply --numel 24.9M --gradients 4 --threads 1

When the last gradient of a round arrives, the PS (on its one event loop, while every worker of the
round waits in its pull) estimates the gradient noise, sums the round's gradients, scales the sum,
steps the optimizer and publishes the new parameters for the pulls. Each gradient's squared norm (the
small-batch half of the noise estimate) is read earlier, at its push, with the finiteness check
(push_check_ms, once per push); until 26 Nov afternoon the closer read them (round_norms_at_close_ms).
This times each phase with the PS's own code (star.ps_server.shard.ShardState, star.policy.noise.NoiseAccumulator) on random
float32 gradients of --numel elements, and, side by side in the same run, the ways they were done
before: the noise estimate by its own copy and sum (NoiseAccumulator.observe) instead of reading the
update's sum, and torch's per-op Adam loop instead of its fused kernel ("before"; the code before 26 Nov
also squared each gradient into a temporary of its own, which cost more still: 316 ms for the noise
estimate alone at 24.9M elements on one thread of the 2-core development machine). Medians over
--repeats after one warm-up. Prints a table and, last, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable

import torch

from star.config import OptimizerConfig
from star.flat import ShardRange
from star.policy.noise import NoiseAccumulator
from star.ps_server.shard import ShardState, squared_norm_if_finite

SUFFIXES = {"k": 1e3, "m": 1e6, "g": 1e9}


def parse_count(text: str) -> int:
    """'24.9M' -> 24900000; a bad count names the flag."""
    raw = text.strip().lower()
    scale = SUFFIXES.get(raw[-1:], 1)
    try:
        value = int(float(raw[:-1] if raw[-1:] in SUFFIXES else raw) * scale)
    except ValueError:
        raise SystemExit(f"ps_apply: --numel {text!r}: not a count (e.g. 24.9M)") from None
    if value < 1:
        raise SystemExit(f"ps_apply: --numel {text!r}: must be >= 1")
    return value


def median_ms(action: Callable[[], None], repeats: int, before: Callable[[], None] = lambda: None) -> float:
    """Median wall time of `action` in ms; `before` runs untimed ahead of each (fresh inputs)."""
    times = []
    for run in range(repeats + 1):
        before()
        start = time.perf_counter()
        action()
        if run:  # the first is a warm-up
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def measure(numel: int, gradients: int, optimizer: str, repeats: int) -> dict[str, float]:
    incoming = [torch.randn(numel) for _ in range(gradients)]
    held = [g.clone() for g in incoming]  # the owned receive buffers apply() sums into in place

    def refill() -> None:
        for buffer, source in zip(held, incoming):
            buffer.copy_(source)

    def shard(fused: bool) -> ShardState:
        state = ShardState(ShardRange(0, 0, numel), torch.zeros(numel), OptimizerConfig(name=optimizer, lr=1e-3))
        if not fused:  # the per-op loop the PS ran before: the same optimizer without fused=True
            state.optimizer = type(state.optimizer)([state.param], lr=1e-3)
        return state

    fused_shard, loop_shard = shard(True), shard(False)
    noise = NoiseAccumulator()
    batch = [8] * gradients
    scale = 1.0 / gradients
    publish_to = torch.empty(numel)
    pushed_norms = [squared_norm_if_finite(g) for g in incoming]  # read by the PS at each push, before the round closes
    figures = {
        "round_now_ms": median_ms(lambda: fused_shard.apply(held, scale, on_sum=noise.begin_round(held, batch, None, pushed_norms)),
                                  repeats, refill),
        "round_norms_at_close_ms": median_ms(lambda: fused_shard.apply(held, scale, on_sum=noise.begin_round(held, batch)),
                                             repeats, refill),
        "push_check_ms": median_ms(lambda: squared_norm_if_finite(incoming[0]), repeats),
        "round_before_ms": median_ms(lambda: (noise.observe(held, batch), loop_shard.apply(held, scale)), repeats, refill),
        "noise_in_update_ms": median_ms(lambda: noise.begin_round(held, batch)(held[0]), repeats, refill),
        "noise_own_sum_ms": median_ms(lambda: noise.observe(held, batch), repeats, refill),
        "sum_scale_step_fused_ms": median_ms(lambda: fused_shard.apply(held, scale), repeats, refill),
        "sum_scale_step_loop_ms": median_ms(lambda: loop_shard.apply(held, scale), repeats, refill),
        "publish_copy_ms": median_ms(lambda: publish_to.copy_(fused_shard.param.data), repeats),
    }
    return {k: round(v, 1) for k, v in figures.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ps_apply", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--numel", default="24.9M", help="shard elements (gpt-50m over 2 PSs: 24.9M; gpt-120m: 60M)")
    p.add_argument("--gradients", type=int, default=4, help="gradients in the round (workers)")
    p.add_argument("--optimizer", choices=("adam", "adamw"), default="adamw")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (a PS runs threads_per_process)")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    if args.gradients < 2 or args.repeats < 1 or args.threads < 1:
        print("ps_apply: --gradients must be >= 2, --repeats and --threads >= 1", file=sys.stderr)
        return 2
    numel = parse_count(args.numel)
    torch.set_num_threads(args.threads)
    figures = measure(numel, args.gradients, args.optimizer, args.repeats)
    print(f"shard {numel:,} float32 elements, {args.gradients} gradients, {args.optimizer}, {args.threads} thread(s); "
          f"median of {args.repeats} after 1 warm-up")
    for name, value in figures.items():
        print(f"  {name:<26} {value:8.1f}")
    ratio = figures["round_before_ms"] / figures["round_now_ms"] if figures["round_now_ms"] else None
    print(f"  round before / now: {ratio:.2f}x" if ratio else "  round before / now: n/a")
    print(json.dumps({"numel": numel, "gradients": args.gradients, "optimizer": args.optimizer, "threads": args.threads,
                      **figures, "round_before_over_now": round(ratio, 2) if ratio else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
