"""One controller per state directory: an flock'ed ``controller.lock`` holding the live controller's pid."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = "controller.lock"


class AlreadyRunning(RuntimeError):
    """Another controller holds the lock of this state directory."""


class ControllerRunning(RuntimeError):
    """A live controller holds the lock: stop it first."""


def acquire(state_dir) -> int:
    """Take the lock (non-blocking) and write our pid into it; the open fd holds it until closed."""
    path = Path(state_dir) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise AlreadyRunning(f"another controller holds {path} (pid {other})") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
    except OSError:
        os.close(fd)
        raise
    return fd


def check_not_running(state_dir) -> None:
    """Raise ControllerRunning when a live controller holds the lock of `state_dir`."""
    path = Path(state_dir) / LOCK_NAME
    if not path.exists():
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "?"
            raise ControllerRunning(
                f"a controller is running (pid {pid}, lock {path}): stop it first "
                "(systemctl stop shockwave-controller), then run uninstall"
            ) from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
