#!/usr/bin/python3 -I
"""Shockwave Slurm hook: Prolog, Epilog, PrologSlurmctld and EpilogSlurmctld in one script.

Appends schema-v1 events (docs/event-schema.md) for Shockwave-managed jobs to
``<store>/_system/<jobid>.jsonl`` with one O_APPEND write per line, and (prologs, as root) creates the
job user's directory ``<store>/users/<uid>/`` owned by that user:

* prolog_slurmd / prolog_slurmctld  -> ``prolog_start``
* epilog_slurmd / epilog_slurmctld  -> ``epilog_end`` (exit code, signal) and, when the
  restart count grew since the last recorded prolog (Slurm increments
  SLURM_JOB_RESTART_COUNT before the epilog of a requeued/preempted run), ``requeue``.

Standard library only, so it runs with the system python3 as root or SlurmUser.  Run it
through ``shockwave-hook.sh`` (hard timeout, exit status always 0: a failing prolog
drains the node).  It never follows symlinks and refuses a ``_system`` directory that is
writable by others.  Settings: environment, else the first KEY=VALUE config file found
(see README.md).  The store's layout, modes and line format are the package's own
(slurm_shockwave/events/layout.py) and the marker rule too (slurm_shockwave/slurm/hints.py):
both are loaded by path, from copies next to this file or from the source checkout.
"""

import contextlib
import json
import os
import re
import signal
import socket
import stat
import sys
import time
import types

TAIL_BYTES = 64 * 1024
KIND_BY_CONTEXT = {
    "prolog_slurmd": "prolog_start",
    "prolog_slurmctld": "prolog_start",
    "epilog_slurmd": "epilog_end",
    "epilog_slurmctld": "epilog_end",
}
CONF_KEYS = ("SHOCKWAVE_STORE", "SHOCKWAVE_MARKER", "SHOCKWAVE_HOOK_ALL_JOBS", "SHOCKWAVE_HOOK_LOG")


def conf_candidates(env):
    here = os.path.dirname(os.path.abspath(__file__))
    return [
        p
        for p in (
            env.get("SHOCKWAVE_HOOK_CONF"),
            os.path.join(here, "shockwave-hook.conf"),
            "/etc/slurm/shockwave-hook.conf",
            "/etc/shockwave/hook.conf",
        )
        if p
    ]


def load_conf(env):
    """Settings from the environment, completed by the first trusted config file."""
    conf = {k: env[k] for k in CONF_KEYS if env.get(k)}
    for path in conf_candidates(env):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as fh:
            if not trusted(os.fstat(fh.fileno()), (0, os.geteuid()), stat.S_ISREG):
                continue  # untrusted config: ignore
            for line in fh.read(65536).splitlines():
                key, sep, val = line.strip().partition("=")
                if sep and key in CONF_KEYS and key not in conf:
                    conf[key] = val.strip().strip('"').strip("'")
        break
    return conf


def log(conf, msg):
    path = conf.get("SHOCKWAVE_HOOK_LOG")
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o640)
        try:
            os.write(fd, f"{time.strftime('%F %T')} shockwave-hook: {msg}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def to_int(val, default=None):
    try:
        return int(str(val).strip())
    except (TypeError, ValueError):
        return default


def trusted(st, owners, is_kind):
    """A file or directory (its stat) of the expected kind, owned by one of ``owners`` and writable by
    nobody else.  Stated here, not taken from layout.py: it decides whether layout.py itself is trusted."""
    return is_kind(st.st_mode) and st.st_uid in owners and not st.st_mode & 0o022


def unsafe(d, st):
    return f"unsafe {d} (owner {st.st_uid:d}, mode {stat.S_IMODE(st.st_mode):o})"


def own_dir(d, layout):
    """Create ``d`` if missing; None if it is a real directory owned by root/us and writable by nobody
    else, else why it is unsafe (one line)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(d, layout.DIR_MODE)
    st = os.lstat(d)
    return None if trusted(st, (0, os.geteuid()), stat.S_ISDIR) else unsafe(d, st)


def system_dir(store, layout):
    """``<store>/_system``, created if missing; None if it is unsafe to write there."""
    st_root = os.stat(store)  # the store root itself must exist (admin creates it)
    if not stat.S_ISDIR(st_root.st_mode):
        return None
    d = os.path.join(store, layout.SYSTEM_DIR)
    return None if own_dir(d, layout) else d


def read_tail(path):
    """Accepted-looking records in the last TAIL_BYTES of ``path`` (best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES))
    finally:
        os.close(fd)
    out = []
    for line in data.split(b"\n"):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def append(path, rec, layout):
    """One validated-size line, one write(2), O_APPEND, never through a symlink."""
    data = layout.encode_line(rec)
    fd = os.open(
        path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, layout.FILE_MODE
    )
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise ValueError(f"refusing to append to {path} (not our regular file)")
        n = os.write(fd, data)
        if n != len(data):
            os.write(fd, b"\n")
            raise OSError("short write")
    finally:
        os.close(fd)


def exit_status(env):
    """(exit_code, signal) of the job from SLURM_JOB_EXIT_CODE2 ("code:sig") or the raw
    wait status SLURM_JOB_EXIT_CODE."""
    two = env.get("SLURM_JOB_EXIT_CODE2", "")
    m = re.match(r"(\d+):(\d+)\Z", two.strip())
    if m:
        return min(int(m.group(1)), 255), int(m.group(2)) & 0x7F
    raw = to_int(env.get("SLURM_JOB_EXIT_CODE"))
    if raw is None or raw < 0:
        return None, None
    return (raw >> 8) & 0xFF, raw & 0x7F


def count_gpus(env):
    val = env.get("SLURM_JOB_GPUS", "").strip()
    return len([x for x in val.split(",") if x.strip()]) if val else None


def load_shared(copy_name, *source):
    """A module of the package the hook shares (standard library only, no import of the package), as a
    namespace: ``copy_name`` next to this file (install copies it there), else ``slurm_shockwave/<source>``
    of the source checkout; trusted like the config file (a regular file owned by root/us, not writable by
    group/others).  None when neither is there and trusted."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, copy_name), os.path.join(here, "..", "slurm_shockwave", *source)):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as fh:
            if not trusted(os.fstat(fh.fileno()), (0, os.geteuid()), stat.S_ISREG):
                continue
            ns = {"__name__": copy_name[: -len(".py")]}
            exec(compile(fh.read(), path, "exec"), ns)
            return types.SimpleNamespace(**ns)
    return None


def load_layout():
    """The event store's layout and line format: slurm_shockwave/events/layout.py."""
    return load_shared("shockwave_layout.py", "events", "layout.py")


def load_is_marked():
    """THE marker rule, `is_marked` of slurm_shockwave/slurm/hints.py."""
    hints = load_shared("shockwave_hints.py", "slurm", "hints.py")
    return hints.is_marked if hints is not None else None


def is_managed(env, conf, store, job_id, sys_file, layout=None):
    if conf.get("SHOCKWAVE_HOOK_ALL_JOBS", "0").strip().lower() in ("1", "yes", "true"):
        return True
    marker = conf.get("SHOCKWAVE_MARKER", "shockwave")
    is_marked = load_is_marked()
    if is_marked is not None and is_marked(env.get("SLURM_JOB_COMMENT", ""), marker):
        return True
    # slurmctld-side hooks get no comment: the job is known if it already has files
    uid = to_int(env.get("SLURM_JOB_UID"))
    layout = layout or load_layout()
    return os.path.lexists(sys_file) or (
        layout is not None
        and uid is not None
        and uid >= 0
        and os.path.isdir(os.path.join(store, layout.USERS_DIR, str(uid), job_id))
    )


def provision_user_dir(store, env, layout):
    """``<store>/users/<uid>`` owned by the job's user (mode 0755), created by us (root) before the job
    runs: only root creates entries in ``<store>`` and ``users/``, so no user can pre-create a path
    another user's job needs.  Refuses a ``users`` dir not owned by root/us or writable by others, and
    an existing user dir owned by someone else (logged; the job then runs without events)."""
    uid, gid = to_int(env.get("SLURM_JOB_UID")), to_int(env.get("SLURM_JOB_GID"))
    if uid is None or uid < 0 or os.geteuid() != 0:
        return None
    users = os.path.join(store, layout.USERS_DIR)
    problem = own_dir(users, layout)
    if problem:
        return problem
    d = os.path.join(users, str(uid))
    try:
        os.mkdir(d, layout.DIR_MODE)
        os.chown(d, uid, gid if gid is not None and gid >= 0 else -1)
    except FileExistsError:
        pass
    st = os.lstat(d)
    return None if trusted(st, (uid,), stat.S_ISDIR) else unsafe(d, st)


def build_events(env, job_id, context, tail, layout):
    kind = KIND_BY_CONTEXT[context]
    limit = layout.FIELD_SPECS
    restart = max(0, min(to_int(env.get("SLURM_JOB_RESTART_COUNT"), 0), limit["restart"][2]))
    host = env.get("SLURMD_NODENAME") or socket.gethostname()
    base = {
        "v": layout.SCHEMA_VERSION,
        "kind": kind,
        "job": job_id,
        "ts": round(time.time(), 6),
        "restart": restart,
        "source": context,
        "host": host[: limit["host"][2]],
    }
    gpus = count_gpus(env)
    if gpus is not None:
        base["gpus"] = gpus
    events = [base]
    if kind == "epilog_end":
        code, sig = exit_status(env)
        if code is not None:
            base["exit_code"] = code
            if sig:
                base["signal"] = sig
        starts = [
            r.get("restart") for r in tail if r.get("kind") == "prolog_start" and isinstance(r.get("restart"), int)
        ]
        requeued = [r.get("restart") for r in tail if r.get("kind") == "requeue"]
        if starts and restart > max(starts) and restart not in requeued:
            events.append(dict(base, kind="requeue", reason=f"restart count {max(starts):d} -> {restart:d}"))
            events[-1].pop("exit_code", None)
            events[-1].pop("signal", None)
    return events


def main(env):
    conf = load_conf(env)
    context = env.get("SLURM_SCRIPT_CONTEXT", "")
    job_id = env.get("SLURM_JOB_ID", "").strip()
    store = conf.get("SHOCKWAVE_STORE")
    if context not in KIND_BY_CONTEXT or not store:
        return
    layout = load_layout()
    if layout is None:
        log(conf, "shockwave_layout.py is missing or untrusted next to the hook (see its README); nothing recorded")
        return
    if not re.match(layout.SLURM_JOB_ID + r"\Z", job_id):
        return
    if not os.path.isdir(store):
        log(conf, f"store {store} missing; nothing recorded for job {job_id}")
        return
    d = system_dir(store, layout)
    if d is None:
        log(conf, f"unsafe or missing {store}/{layout.SYSTEM_DIR}; nothing recorded")
        return
    sys_file = os.path.join(d, layout.system_file_name(job_id))
    if not is_managed(env, conf, store, job_id, sys_file, layout):
        return
    if context.startswith("prolog"):
        problem = provision_user_dir(store, env, layout)
        if problem:
            log(conf, f"job {job_id}: {problem}; the job's events cannot be written")
    tail = read_tail(sys_file) if context.startswith("epilog") else []
    for rec in build_events(env, job_id, context, tail, layout):
        append(sys_file, rec, layout)


if __name__ == "__main__":
    try:
        signal.signal(signal.SIGALRM, lambda *_: os._exit(0))
        signal.alarm(max(1, to_int(os.environ.get("SHOCKWAVE_HOOK_TIMEOUT"), 3)))
        main(os.environ)
    except BaseException as exc:  # noqa: BLE001 - never fail (a failing prolog drains the node): logged here
        with contextlib.suppress(BaseException):  # the log itself failed: there is nothing left to log to
            log(load_conf(os.environ), f"error: {exc!r}")
    sys.stdout.flush()
    os._exit(0)
