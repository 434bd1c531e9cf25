"""Job side of Shockwave: the ``shockwave-run`` wrapper, the training-loop API and helpers.

``from slurm_shockwave.wrapper import api`` gives the module-level API; ``Reporter`` and
``CheckpointManager`` are the class forms; ``Training`` owns both (restore, report, save on the signal).
``torch_helpers`` imports torch lazily.
"""

from slurm_shockwave.wrapper import api
from slurm_shockwave.wrapper.api import Reporter
from slurm_shockwave.wrapper.checkpoint import CheckpointManager
from slurm_shockwave.wrapper.training import Training

__all__ = ["CheckpointManager", "Reporter", "Training", "api"]
