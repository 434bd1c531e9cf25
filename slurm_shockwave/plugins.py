"""What other packages add (the lab, a site's own): policies and `shockwave` sub-commands, named by entry points.

* ``slurm_shockwave.policies``: modules imported once so that their Policy classes register themselves
  (solver/policies/registry.py).  solver/ reads no package metadata; whatever runs a policy here (the CLI, the
  controller's config) calls `load_policy_plugins()` first.
* ``slurm_shockwave.commands``: click commands that `shockwave` lists beside its own (`command_entry_points`).

A plug-in that cannot be loaded never takes the built-in policies or commands down with it, and is never hidden:
its failure is logged with the entry point's name, and a command says it when it is run.
"""

from __future__ import annotations

import functools
import logging
from importlib.metadata import EntryPoint, entry_points

POLICY_GROUP = "slurm_shockwave.policies"
COMMAND_GROUP = "slurm_shockwave.commands"
log = logging.getLogger(__name__)
_loaded = False


def load_policy_plugins() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in entry_points(group=POLICY_GROUP):
        try:
            ep.load()
        except Exception:  # a broken plug-in must not take the built-in policies down with it (logged, named)
            log.exception("policy plug-in %s (%s) cannot be loaded; skipped", ep.name, ep.value)


@functools.cache
def command_entry_points() -> dict[str, EntryPoint]:
    """The sub-commands other packages add, by name (the first of a name wins); read once per process (`shockwave
    --help` asks for every command)."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=COMMAND_GROUP):
        found.setdefault(ep.name, ep)
    return found
