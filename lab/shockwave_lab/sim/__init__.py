"""The simulated cluster backend: the reference simulator's semantics, driven by our round loop."""
from shockwave_lab.sim.cluster import SimulatedCluster

__all__ = ["SimulatedCluster"]
