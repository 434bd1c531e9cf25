"""Faults of the controller's own machine, told in one line each: cause, and what to do.

Two kinds:
* at start (read-only or missing state directory, a corrupt state database, the metrics port in use):
  `StartupError`, printed as one line by the CLI, exit 1 (systemd restarts; a bad config is exit 2);
* at run time, state writes failing (disk full, quota, read-only remount, I/O error): `storage_problem()`
  recognises them; the daemon keeps running, enacts nothing, and retries until writes succeed again.
"""
from __future__ import annotations

import errno
import sqlite3

#: errno values meaning "the state cannot be written right now"
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO}
#: sqlite3 messages of the same conditions (SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY, SQLITE_CANTOPEN)
_STORAGE_MESSAGES = ("database or disk is full", "disk i/o error", "readonly database", "unable to open database")


class StartupError(RuntimeError):
    """The controller cannot start; `str()` is one line: the cause and what to do."""


def storage_problem(exc: BaseException) -> str | None:
    """One line describing why the state could not be written, or None if `exc` is something else."""
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).strip().lower()
        if any(m in text for m in _STORAGE_MESSAGES):
            return str(exc).strip().splitlines()[0]
        return None
    if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS:
        return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    return None


def state_dir_error(path, exc: OSError) -> StartupError:
    why = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "free space on its filesystem (the controller starts once it can write its journal)"
    elif exc.errno == errno.EROFS:
        what = "remount its filesystem read-write or set controller.state_dir to a writable directory"
    else:
        what = "make it writable by the controller's user (or set controller.state_dir to a writable directory)"
    return StartupError(f"state directory {path} is not usable ({why}): {what}")


def state_db_error(path, exc: sqlite3.Error) -> StartupError:
    why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if storage_problem(exc):
        return StartupError(f"state database {path} cannot be written ({why}): free space on its filesystem or "
                            f"make it writable, then start again")
    return StartupError(f"state database {path} is unreadable or corrupt ({why}): move it aside "
                        f"(mv {path} {path}.bad; the controller then starts with a fresh state and re-adopts "
                        f"its jobs from Slurm) or restore it from a backup")


def metrics_error(address: str, port: int, exc: OSError) -> StartupError:
    why = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        what = "stop the other process listening there or change controller.metrics_port"
    elif exc.errno == errno.EADDRNOTAVAIL:
        what = "set controller.metrics_address to an address of this machine"
    else:
        what = "change controller.metrics_port / metrics_address (0 turns metrics off)"
    return StartupError(f"metrics endpoint {address}:{port} cannot listen ({why}): {what}")


def check_state_db(path) -> str | None:
    """Open an existing state database read-only and run SQLite's quick check; a problem line or None."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            row = db.execute("PRAGMA quick_check").fetchone()
        finally:
            db.close()
    except sqlite3.Error as e:
        return str(state_db_error(path, e))
    if row is None or row[0] != "ok":
        return str(state_db_error(path, sqlite3.DatabaseError(f"quick_check: {row[0] if row else 'no answer'}")))
    return None
