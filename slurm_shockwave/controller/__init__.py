"""The one round loop that drives every backend, and the controller daemon that runs it as a service."""
from .loop import RoundLoop

__all__ = ["RoundLoop"]
