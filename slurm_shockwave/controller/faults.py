"""Faults of the controller's own machine at start, told in one line each: cause, and what to do.

A read-only or missing state directory, the metrics port in use: `StartupError`, printed as one line by
the CLI, exit 1 (systemd restarts; a bad config is exit 2).  The state database's own faults (corrupt,
disk full) are the journal's (`slurm_shockwave.journal.faults`).
"""

from __future__ import annotations

import errno
import os

from slurm_shockwave.errors import StartupError

__all__ = ["StartupError", "metrics_error", "state_dir_error"]


def state_dir_error(path: str | os.PathLike[str], exc: OSError) -> StartupError:
    why = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "free space on its filesystem (the controller starts once it can write its journal)"
    elif exc.errno == errno.EROFS:
        what = "remount its filesystem read-write or set controller.state_dir to a writable directory"
    else:
        what = "make it writable by the controller's user (or set controller.state_dir to a writable directory)"
    return StartupError(f"state directory {path} is not usable ({why}): {what}")


def metrics_error(address: str, port: int, exc: OSError) -> StartupError:
    why = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        what = "stop the other process listening there or change controller.metrics_port"
    elif exc.errno == errno.EADDRNOTAVAIL:
        what = "set controller.metrics_address to an address of this machine"
    else:
        what = "change controller.metrics_port / metrics_address (0 turns metrics off)"
    return StartupError(f"metrics endpoint {address}:{port} cannot listen ({why}): {what}")
