"""The unseen sweep's "static spread 0.8 s5" trace: four workers at fixed factors 1.64, 1.65, 1.41, 1.23 (star.sim.generators.static, seed 5)."""
from pathlib import Path

from star.sim import generators
from star.traces import write_simple_csv

write_simple_csv(generators.static(4, 100, 5, spread=0.8), Path(__file__).with_name("static_s5.csv"))
