"""The security checks around creating and opening the event store's files (the layout: layout.py).

Only root creates entries in ``<root>`` and ``<root>/users``, and only user ``<uid>`` can create entries
in ``users/<uid>/``: no user can claim a path another user's job will need (job ids are predictable).
A private store (the root owned by the user, e.g. the default ``~/.local/state/shockwave/events``) is
set up by the user's own wrapper.  ``<root>/<jobid>/events.jsonl`` (the v0 layout, in a 1777 root) is
still *read* when the new path is absent, never written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from slurm_shockwave.events.layout import (
    DIR_MODE,
    EVENTS_NAME,
    FILE_MODE,
    SYSTEM_DIR,
    SYSTEM_SUFFIX,
    USERS_DIR,
    WRITABLE_BY_OTHERS,
    system_file_name,
)
from slurm_shockwave.events.schema import check_job_id, is_valid_job_id


class FileRejected(Exception):
    """An event file failed a security check; ``reason`` is a short counter key."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def user_dir(root: str | os.PathLike[str], uid: int) -> Path:
    """``<root>/users/<uid>``: the directory only ``uid`` may create job directories in."""
    return Path(root) / USERS_DIR / str(int(uid))


def job_event_path(root: str | os.PathLike[str], job_id: str, uid: int | None = None) -> Path:
    """Path of the job's own event file (job id validated: no traversal); ``uid``: the job's
    user (default: the current effective uid)."""
    uid = os.geteuid() if uid is None else int(uid)
    return user_dir(root, uid) / check_job_id(job_id) / EVENTS_NAME


def legacy_event_path(root: str | os.PathLike[str], job_id: str) -> Path:
    """The v0 path ``<root>/<jobid>/events.jsonl`` (read only, when the new path is absent)."""
    return Path(root) / check_job_id(job_id) / EVENTS_NAME


def system_event_path(root: str | os.PathLike[str], job_id: str) -> Path:
    """Path of the hooks' event file for ``job_id``."""
    return Path(root) / SYSTEM_DIR / system_file_name(check_job_id(job_id))


def _check_dir(d: Path, owners: tuple[int, ...], what: str) -> None:
    st = os.lstat(d)
    if stat.S_ISLNK(st.st_mode):
        raise FileRejected("symlink", str(d))
    if not stat.S_ISDIR(st.st_mode):
        raise FileRejected("not_directory", str(d))
    if st.st_uid not in owners:
        raise FileRejected("wrong_owner", f"{what} {d} is owned by uid {st.st_uid}, not {owners[-1]}")
    if st.st_mode & WRITABLE_BY_OTHERS:
        raise FileRejected("writable_by_others", f"{what} {d} has mode {stat.S_IMODE(st.st_mode):o}")


def provision_user_dir(root: str | os.PathLike[str], uid: int, gid: int | None = None) -> Path:
    """As root (the prolog hook, an admin, the demo): create ``<root>/users/<uid>`` owned by ``uid``.

    Idempotent.  Refuses (``FileRejected``) a ``users`` or user directory that is a symlink, not owned
    by root / that user, or writable by others.
    """
    root, uid = Path(root), int(uid)
    users = root / USERS_DIR
    with contextlib.suppress(FileExistsError):
        os.mkdir(users, DIR_MODE)
    _check_dir(users, (0, os.geteuid()), "users directory")
    d = users / str(uid)
    try:
        os.mkdir(d, DIR_MODE)
        os.chown(d, uid, -1 if gid is None else int(gid))
        os.chmod(d, DIR_MODE)
    except FileExistsError:
        pass
    _check_dir(d, (uid,), "user directory")
    return d


def ensure_user_dir(root: str | os.PathLike[str], uid: int | None = None) -> Path:
    """``<root>/users/<uid>`` for the current user, checked; created only where that is safe.

    It is created when running as root, or when the store root itself belongs to the current user (a
    private store).  In a shared store it must have been created by root (the prolog hook does it at
    job start): otherwise ``FileRejected("no_user_dir")`` with a one-line explanation.
    """
    root = Path(root)
    me = os.geteuid()
    uid = me if uid is None else int(uid)
    d = user_dir(root, uid)
    if not os.path.lexists(d):
        owns_root = False
        try:
            owns_root = os.lstat(root).st_uid == me
        except FileNotFoundError:
            root.mkdir(parents=True, exist_ok=True)
            owns_root = True
        if me == 0 or (owns_root and uid == me):
            return provision_user_dir(root, uid)
        raise FileRejected(
            "no_user_dir",
            f"{d} does not exist: in a shared store it is created by root "
            "(the Slurm prolog hook of prolog_epilog/ at job start, or the admin)",
        )
    _check_dir(root / USERS_DIR, (0, uid), "users directory")
    _check_dir(d, (uid,), "user directory")
    return d


def ensure_job_dir(root: str | os.PathLike[str], job_id: str) -> Path:
    """Create ``<root>/users/<uid>/<jobid>/`` (mode 0755) for the current user and return its path.

    Refuses (``FileRejected``) if the user directory is missing in a shared store (see
    :func:`ensure_user_dir`), or the job directory exists but is a symlink, not a directory, or is
    owned by somebody else.
    """
    d = ensure_user_dir(root) / check_job_id(job_id)
    with contextlib.suppress(FileExistsError):
        os.mkdir(d, DIR_MODE)
    st = os.lstat(d)
    if stat.S_ISLNK(st.st_mode):
        raise FileRejected("symlink", str(d))
    if not stat.S_ISDIR(st.st_mode):
        raise FileRejected("not_directory", str(d))
    if st.st_uid != os.geteuid():
        raise FileRejected("wrong_owner", f"{d} is owned by uid {st.st_uid}, not {os.geteuid()}")
    return d


def open_append(path: str | os.PathLike[str]) -> int:
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
        with contextlib.suppress(OSError):
            os.write(fd, b"\n")
        raise OSError(errno.EIO, f"short write: {n} of {len(data)} bytes")


def open_for_read(
    root: str | os.PathLike[str],
    job_id: str,
    *,
    system: bool = False,
    allowed_uids: frozenset[int] | None = None,
    uid: int | None = None,
    legacy: bool = False,
) -> tuple[int, os.stat_result]:
    """Open one event file read-only with every check applied.  Returns ``(fd, stat)``.

    * job id validated, the file is reached via directory fds (no path traversal),
      every component opened with O_NOFOLLOW (symlinks rejected);
    * a job file is ``users/<uid>/<jobid>/events.jsonl`` (``uid`` required), whose ``users``
      directory must belong to root or ``uid`` and ``users/<uid>`` to ``uid``, neither writable by
      others; ``legacy=True`` opens the v0 ``<jobid>/events.jsonl`` instead;
    * it must be a regular file with a single link;
    * its owner must be in ``allowed_uids`` (``None`` = owner not checked).

    Raises ``FileNotFoundError`` if absent, ``FileRejected`` on a failed check.
    """
    job_id = check_job_id(job_id)
    comps: list[tuple[str, tuple[int, ...] | None]]
    if system:
        comps, name = [(SYSTEM_DIR, None)], system_file_name(job_id)
    elif legacy or uid is None:
        comps, name = [(job_id, None)], EVENTS_NAME
    else:
        uid = int(uid)
        comps = [(USERS_DIR, (0, uid)), (str(uid), (uid,)), (job_id, None)]
        name = EVENTS_NAME
    dflags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    dir_fd = os.open(root, dflags)
    fd = -1
    shown = ""
    try:
        for comp, owners in comps:
            shown = f"{shown}/{comp}" if shown else comp
            try:
                nxt = os.open(comp, dflags | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    is_link = stat.S_ISLNK(os.lstat(comp, dir_fd=dir_fd).st_mode)
                    raise FileRejected("symlink" if is_link else "not_directory", shown) from None
                raise
            os.close(dir_fd)
            dir_fd = nxt
            if owners is not None:
                st = os.fstat(dir_fd)
                if st.st_uid not in owners:
                    raise FileRejected("wrong_owner", f"{shown} owned by uid {st.st_uid}")
                if st.st_mode & WRITABLE_BY_OTHERS:
                    raise FileRejected("writable_by_others", shown)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise FileRejected("symlink", f"{shown}/{name}") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRejected("not_regular_file", f"{shown}/{name}")
        if st.st_nlink != 1:
            raise FileRejected("hardlinked", f"{shown}/{name} has {st.st_nlink} links")
        if allowed_uids is not None and st.st_uid not in allowed_uids:
            raise FileRejected("wrong_owner", f"{shown}/{name} owned by uid {st.st_uid}")
        out, fd = fd, -1
        return out, st
    finally:
        if fd >= 0:
            os.close(fd)
        os.close(dir_fd)


def job_file_candidates(root: str | os.PathLike[str], job_id: str) -> list[int]:
    """uids ``u`` with a ``users/<u>/<jobid>/`` directory (for readers that do not know the job's user)."""
    job_id = check_job_id(job_id)
    out = []
    try:
        with os.scandir(Path(root) / USERS_DIR) as it:
            for e in it:
                if (
                    e.name.isascii()
                    and e.name.isdigit()
                    and len(e.name) <= 10
                    and os.path.isdir(os.path.join(e.path, job_id))
                ):
                    out.append(int(e.name))
    except OSError:
        pass
    return sorted(out)


def list_job_ids(root: str | os.PathLike[str]) -> list[str]:
    """Valid job ids that have a job directory (either layout) or a system file under ``root``."""
    ids: set[str] = set()
    try:
        with os.scandir(Path(root) / USERS_DIR) as users:
            for u in users:
                if u.name.isdigit() and u.is_dir(follow_symlinks=False):
                    with os.scandir(u.path) as it:
                        ids.update(e.name for e in it if is_valid_job_id(e.name))
    except OSError:
        pass
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
                job = e.name[: -len(SYSTEM_SUFFIX)]
                if e.name == system_file_name(job) and is_valid_job_id(job):
                    ids.add(job)
    except OSError:
        pass
    return sorted(ids)


def check_store(root: str | os.PathLike[str], system_uids: tuple[int, ...] = (0,)) -> list[str]:
    """Problems of a shared store's layout and modes (docs/event-schema.md), one line each; [] if fine."""
    root = Path(root)
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return [f"event store {root} does not exist (create it: install -d -m 0755 {root})"]
    except OSError as exc:
        return [f"event store {root} cannot be read: {exc.strerror}"]
    if not stat.S_ISDIR(st.st_mode):
        return [f"event store {root} is not a directory"]
    problems = []
    if st.st_mode & WRITABLE_BY_OTHERS:
        problems.append(
            f"event store {root} has mode {stat.S_IMODE(st.st_mode):o}: writable by others, so a user "
            "could claim paths another user's job needs; make it 0755 owned by root"
        )
    if st.st_uid not in system_uids:
        problems.append(f"event store {root} is owned by uid {st.st_uid}, not root")
    for name, what in ((SYSTEM_DIR, "hook events"), (USERS_DIR, "per-user directories")):
        d = root / name
        try:
            dst = os.lstat(d)
        except FileNotFoundError:
            if name == SYSTEM_DIR:
                problems.append(f"{d} ({what}) does not exist: install -d -m 0755 {d}")
            continue
        if not stat.S_ISDIR(dst.st_mode):
            problems.append(f"{d} ({what}) is not a directory")
        elif dst.st_uid not in system_uids or dst.st_mode & WRITABLE_BY_OTHERS:
            problems.append(
                f"{d} ({what}) must be 0755 owned by root/SlurmUser (owner {dst.st_uid}, mode "
                f"{stat.S_IMODE(dst.st_mode):o})"
            )
    return problems
