"""The one round loop that drives every backend."""
from .loop import RoundLoop, RoundRecord

__all__ = ["RoundLoop", "RoundRecord"]
