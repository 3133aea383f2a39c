"""Discrete-event simulator of STAR jobs, driven by the real coordinator policies.

`simulate(SimConfig)` replays a slowdown trace for 10-10,000 workers with a cost model
(`cost`), a convergence model (`convergence`) and the real `Controller`; `generators`
makes synthetic traces; `calibrate` fits the models to short real runs.
"""

from star.sim.config import ConvergenceConfig, CostConfig, SimConfig, sim_config
from star.sim.engine import SimResult, Simulation, simulate

__all__ = ["ConvergenceConfig", "CostConfig", "SimConfig", "SimResult", "Simulation", "sim_config", "simulate"]
