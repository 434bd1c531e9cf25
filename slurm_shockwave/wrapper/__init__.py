"""Job side of Shockwave: the ``shockwave-run`` wrapper, the training-loop API and helpers.

``from slurm_shockwave.wrapper import api`` gives the module-level API; ``Reporter`` and
``CheckpointManager`` are the class forms; ``Training`` owns both (restore, report, save on the signal).  ``torch_helpers`` imports torch lazily.
"""
from . import api
from .api import Reporter
from .checkpoint import CheckpointManager
from .training import Training

__all__ = ["api", "Reporter", "CheckpointManager", "Training"]
