"""`shockwave controller check`: the config against the world it will run in, one line per problem.

The controller's own part (each problem is one line naming what is wrong and what to do):
* the state directory is (or can be made) writable, and an existing state database opens and passes
  SQLite's quick check;
* the event store exists, is a directory, and has the layout/modes of docs/event-schema.md;
then the backend's part (`ServiceBackend.check`: for Slurm, slurm/preflight.py).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_shockwave.backends.base import backend_class
from slurm_shockwave.events import store
from slurm_shockwave.journal import check_state_db

if TYPE_CHECKING:
    from slurm_shockwave.controller.config import ControllerConfig


def check_world(cfg: ControllerConfig, facts: dict[Any, Any] | None = None) -> list[str]:
    """Every problem found, one line each (empty: ready to run); `facts`: what the backend found worth showing."""
    problems: list[str] = []
    problems += check_state_dir(cfg)
    problems += check_event_store(cfg.event_store)
    problems += backend_class(cfg.backend).check(cfg, facts)
    return problems


def check_state_dir(cfg: ControllerConfig) -> list[str]:
    d = Path(cfg.state_dir)
    if d.exists() and not d.is_dir():
        return [f"controller.state_dir = {str(d)!r}: exists but is not a directory"]
    probe = d
    while not probe.exists():  # the controller creates missing directories: check the first ancestor
        probe = probe.parent
    if not probe.is_dir():
        return [f"controller.state_dir = {str(d)!r}: {probe} is not a directory"]
    try:
        fd, name = tempfile.mkstemp(prefix=".shockwave-check-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        what = "is not writable" if probe == d else f"cannot be created ({probe} is not writable)"
        return [
            f"controller.state_dir = {str(d)!r}: {what} ({e.strerror or e}); make it writable by the controller's user"
        ]
    db = Path(cfg.state_path)
    if db.exists():
        bad = check_state_db(db)
        if bad:
            return [bad]
    return []


def check_event_store(root: str | os.PathLike[str]) -> list[str]:
    p = Path(root)
    if not p.exists():
        return [
            f"controller.event_store = {str(p)!r}: does not exist; create it as docs/event-schema.md "
            f"describes (on a filesystem shared by all nodes)"
        ]
    if p.is_symlink() or not p.is_dir():
        return [f"controller.event_store = {str(p)!r}: is not a directory"]
    try:
        return [f"controller.event_store: {line}" for line in store.check_store(p)]
    except OSError as e:
        return [f"controller.event_store = {str(p)!r}: unreadable ({e.strerror or e})"]


def summary(cfg: ControllerConfig) -> dict[str, Any]:
    return {
        "source": cfg.source,
        "mode": cfg.mode,
        "round_seconds": cfg.round_seconds,
        "policy": cfg.policy.name,
        "partition": cfg.partition,
        "managed_by": cfg.managed_by,
        "state_dir": cfg.state_dir,
        "event_store": cfg.event_store,
    }
