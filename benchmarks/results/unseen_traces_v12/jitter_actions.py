"""Does auto act on stationary jitter in the simulator? (29 Nov, afternoon; run from the repository root.)

Per compute-noise CV, the seeds of generators.jitter(4 workers, 200 iterations) on which auto takes any action
(detection, resize or AMP switch), in the unit tests' simulator set-up (tests/unit/test_sim.py's config: 0.1 s a
step, no communication cost, no target)."""
import sys

sys.path.insert(0, "tests/unit")
from test_sim import config  # noqa: E402

from star.sim import generators, simulate  # noqa: E402

for noise in (0.0, 0.05, 0.12):
    acted = []
    for seed in range(1, 13):
        result = simulate(config("auto", cost={"compute_noise_cv": noise}), generators.jitter(4, 200, seed=seed))
        if {e["kind"] for e in result.events} - {"early_decision"}:
            acted.append(seed)
    print(f"compute noise CV {noise}: auto acted on seeds {acted} of 1-12")
for seed in (3, 4):
    cfg = config("auto", cost={"compute_noise_cv": 0.12})
    auto, ssgd = simulate(cfg, generators.jitter(4, 200, seed=seed)), simulate(config("ssgd", cost={"compute_noise_cv": 0.12}), generators.jitter(4, 200, seed=seed))
    for e in auto.events:
        if e["kind"] == "batch_sizes":
            print(f"  seed {seed} t={e['t']} {e['sizes']}: {e['reason'][:160]}")
    print(f"  seed {seed}: auto {auto.result['sim_s']:.1f} s, SSGD {ssgd.result['sim_s']:.1f} s (200 iterations)")
