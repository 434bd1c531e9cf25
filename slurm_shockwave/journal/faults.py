"""Faults of the controller's state database, told in one line each: cause, and what to do.

* at start, a corrupt or unwritable state database: `state_db_error` / `check_state_db` (a `StartupError`,
  exit 1: systemd restarts);
* at run time, state writes failing (disk full, quota, read-only remount, I/O error): `storage_problem()`
  recognises them; the daemon keeps running, enacts nothing, and retries until writes succeed again.
"""

from __future__ import annotations

import errno
import sqlite3

from slurm_shockwave.errors import StartupError

#: errno values meaning "the state cannot be written right now"
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO}
#: sqlite3 messages of the same conditions (SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY, SQLITE_CANTOPEN)
_STORAGE_MESSAGES = ("database or disk is full", "disk i/o error", "readonly database", "unable to open database")


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


def state_db_error(path, exc: sqlite3.Error) -> StartupError:
    why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if storage_problem(exc):
        return StartupError(
            f"state database {path} cannot be written ({why}): free space on its filesystem or "
            f"make it writable, then start again"
        )
    return StartupError(
        f"state database {path} is unreadable or corrupt ({why}): move it aside "
        f"(mv {path} {path}.bad; the controller then starts with a fresh state and re-adopts "
        f"its jobs from Slurm) or restore it from a backup"
    )


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
