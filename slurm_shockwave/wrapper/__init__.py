"""Job side of Shockwave: the ``shockwave-run`` wrapper, the training-loop API and helpers.

``from slurm_shockwave.wrapper import api`` gives the module-level API; ``Reporter`` and
``CheckpointManager`` are the class forms.  ``torch_helpers`` imports torch lazily.
"""
from . import api
from .api import Reporter
from .checkpoint import CheckpointManager

__all__ = ["api", "Reporter", "CheckpointManager"]
