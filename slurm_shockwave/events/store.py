"""Event store layout and the security checks around opening its files.

Layout under the store root (see docs/event-schema.md)::

    <root>/<jobid>/events.jsonl    by the job (wrapper + training API), owned by the job's user
    <root>/_system/<jobid>.jsonl   by the Slurm prolog/epilog hooks, owned by root / SlurmUser

The root is meant to be a shared directory with mode 1777 (sticky, like /tmp) so that
each user can create their own job directories but cannot remove anyone else's.
``_system`` is created by the admin (mode 0755, owner root or SlurmUser).
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .schema import check_job_id, is_valid_job_id

EVENTS_NAME = "events.jsonl"
SYSTEM_DIR = "_system"
FILE_MODE = 0o644
DIR_MODE = 0o755


class FileRejected(Exception):
    """An event file failed a security check; ``reason`` is a short counter key."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def job_event_path(root: str | os.PathLike, job_id: str) -> Path:
    """Path of the job's own event file (job id validated: no traversal)."""
    return Path(root) / check_job_id(job_id) / EVENTS_NAME


def system_event_path(root: str | os.PathLike, job_id: str) -> Path:
    """Path of the hooks' event file for ``job_id``."""
    return Path(root) / SYSTEM_DIR / f"{check_job_id(job_id)}.jsonl"


def ensure_job_dir(root: str | os.PathLike, job_id: str) -> Path:
    """Create ``<root>/<jobid>/`` (mode 0755) for the current user and return its path.

    Refuses (``FileRejected``) if it exists but is a symlink, not a directory, or is
    owned by somebody else (events written there would be ignored by the reader).
    """
    root = Path(root)
    d = root / check_job_id(job_id)
    root.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(d, DIR_MODE)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if stat.S_ISLNK(st.st_mode):
        raise FileRejected("symlink", str(d))
    if not stat.S_ISDIR(st.st_mode):
        raise FileRejected("not_directory", str(d))
    if st.st_uid != os.geteuid():
        raise FileRejected("wrong_owner", f"{d} is owned by uid {st.st_uid}, not {os.geteuid()}")
    return d


def open_append(path: str | os.PathLike) -> int:
    """Open an event file for appending: O_APPEND|O_CREAT|O_NOFOLLOW, mode 0644.

    Raises ``FileRejected`` if the path is a symlink or not a regular file.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileRejected("symlink", str(path)) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise FileRejected("not_regular_file", str(path))
    return fd


def write_line(fd: int, data: bytes) -> None:
    """Append one encoded line with exactly ONE write(2).

    With O_APPEND each write lands atomically at the end of the file on local
    filesystems, so lines of concurrent writers never interleave.  A short write
    (disk full, quota) is terminated with a newline so that only this one line is
    lost (the reader rejects the fragment) and ``OSError`` is raised.
    """
    n = os.write(fd, data)
    if n != len(data):
        try:
            os.write(fd, b"\n")
        except OSError:
            pass
        raise OSError(errno.EIO, f"short write: {n} of {len(data)} bytes")


def open_for_read(root: str | os.PathLike, job_id: str, *, system: bool = False,
                  allowed_uids: frozenset[int] | None = None) -> tuple[int, os.stat_result]:
    """Open one event file read-only with every check applied.  Returns ``(fd, stat)``.

    * job id validated, the file is reached via directory fds (no path traversal),
      every component opened with O_NOFOLLOW (symlinks rejected);
    * it must be a regular file with a single link;
    * its owner must be in ``allowed_uids`` (``None`` = owner not checked).

    Raises ``FileNotFoundError`` if absent, ``FileRejected`` on a failed check.
    """
    job_id = check_job_id(job_id)
    sub, name = (SYSTEM_DIR, f"{job_id}.jsonl") if system else (job_id, EVENTS_NAME)
    dflags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    root_fd = os.open(root, dflags)
    fd = -1
    try:
        try:
            dir_fd = os.open(sub, dflags | os.O_NOFOLLOW, dir_fd=root_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                is_link = stat.S_ISLNK(os.lstat(sub, dir_fd=root_fd).st_mode)
                raise FileRejected("symlink" if is_link else "not_directory", sub) from None
            raise
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise FileRejected("symlink", f"{sub}/{name}") from None
            raise
        finally:
            os.close(dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRejected("not_regular_file", f"{sub}/{name}")
        if st.st_nlink != 1:
            raise FileRejected("hardlinked", f"{sub}/{name} has {st.st_nlink} links")
        if allowed_uids is not None and st.st_uid not in allowed_uids:
            raise FileRejected("wrong_owner", f"{sub}/{name} owned by uid {st.st_uid}")
        out, fd = fd, -1
        return out, st
    finally:
        if fd >= 0:
            os.close(fd)
        os.close(root_fd)


def list_job_ids(root: str | os.PathLike) -> list[str]:
    """Valid job ids that have a job directory or a system file under ``root``."""
    ids: set[str] = set()
    try:
        with os.scandir(root) as it:
            for e in it:
                if is_valid_job_id(e.name):
                    ids.add(e.name)
    except OSError:
        return []
    try:
        with os.scandir(Path(root) / SYSTEM_DIR) as it:
            for e in it:
                if e.name.endswith(".jsonl") and is_valid_job_id(e.name[:-6]):
                    ids.add(e.name[:-6])
    except OSError:
        pass
    return sorted(ids)
