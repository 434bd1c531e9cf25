"""The paper's baselines and the peers a site would pick instead of Shockwave (Slurm's own models, Pollux):
one `Policy` class per module, registered with the decision core's registry when this package is imported
(`shockwave_lab/__init__.py` does; the product finds them through the ``slurm_shockwave.policies`` entry point)."""
from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__, __name__ + "."):
    importlib.import_module(_module.name)
