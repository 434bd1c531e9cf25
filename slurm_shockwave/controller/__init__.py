"""The one round loop that drives every backend, and the controller daemon that runs it as a service."""

from slurm_shockwave.controller.loop import RoundLoop

__all__ = ["RoundLoop"]
