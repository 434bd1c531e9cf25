"""Policies of other packages: the modules named by the ``slurm_shockwave.policies`` entry points, imported once
so that their Policy classes register themselves (solver/policies/registry.py).  solver/ reads no package
metadata; whatever runs a policy here (the CLI, `run_simulation`, the controller's config) calls
`load_policy_plugins()` first."""
from __future__ import annotations

import logging
from importlib.metadata import entry_points

ENTRY_POINT_GROUP = "slurm_shockwave.policies"
log = logging.getLogger(__name__)
_loaded = False


def load_policy_plugins() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception:  # noqa: BLE001 - a broken plug-in must not take the built-in policies down with it
            log.exception("policy plug-in %s (%s) cannot be loaded; skipped", ep.name, ep.value)
