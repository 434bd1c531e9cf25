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
(see README.md).
"""
import json
import os
import re
import signal
import socket
import stat
import sys
import time

SCHEMA_VERSION = 1
MAX_LINE_BYTES = 4096
TAIL_BYTES = 64 * 1024
JOB_ID_RE = re.compile(r"[0-9]{1,15}(?:_[0-9]{1,9})?\Z")
KIND_BY_CONTEXT = {
    "prolog_slurmd": "prolog_start", "prolog_slurmctld": "prolog_start",
    "epilog_slurmd": "epilog_end", "epilog_slurmctld": "epilog_end",
}
CONF_KEYS = ("SHOCKWAVE_STORE", "SHOCKWAVE_MARKER", "SHOCKWAVE_HOOK_ALL_JOBS", "SHOCKWAVE_HOOK_LOG")


def conf_candidates(env):
    here = os.path.dirname(os.path.abspath(__file__))
    return [p for p in (env.get("SHOCKWAVE_HOOK_CONF"), os.path.join(here, "shockwave-hook.conf"),
                        "/etc/slurm/shockwave-hook.conf", "/etc/shockwave/hook.conf") if p]


def load_conf(env):
    """Settings from the environment, completed by the first trusted config file."""
    conf = {k: env[k] for k in CONF_KEYS if env.get(k)}
    for path in conf_candidates(env):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as fh:
            st = os.fstat(fh.fileno())
            if (not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid())
                    or st.st_mode & 0o022):
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
            os.write(fd, ("%s shockwave-hook: %s\n" % (time.strftime("%F %T"), msg)).encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def to_int(val, default=None):
    try:
        return int(str(val).strip())
    except (TypeError, ValueError):
        return default


def own_dir(d):
    """Create ``d`` 0755 if missing; None if it is a real directory owned by root/us and writable by nobody
    else, else why it is unsafe (one line)."""
    try:
        os.mkdir(d, 0o755)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
        return "unsafe %s (owner %d, mode %o)" % (d, st.st_uid, stat.S_IMODE(st.st_mode))
    return None


def system_dir(store):
    """``<store>/_system``, created 0755 if missing; None if it is unsafe to write there."""
    st_root = os.stat(store)  # the store root itself must exist (admin creates it)
    if not stat.S_ISDIR(st_root.st_mode):
        return None
    d = os.path.join(store, "_system")
    return None if own_dir(d) else d


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


def append(path, rec):
    """One validated-size line, one write(2), O_APPEND, never through a symlink."""
    data = (json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n").encode("ascii")
    if len(data) > MAX_LINE_BYTES:
        raise ValueError("event line too long")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                 | os.O_CLOEXEC, 0o644)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise ValueError("refusing to append to %s (not our regular file)" % path)
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


def load_is_marked():
    """THE marker rule, `is_marked` of slurm_shockwave/slurm/hints.py (standard library only), loaded
    from ``shockwave_hints.py`` next to this file (install copies it there) or from the source checkout;
    trusted like the config file (a regular file owned by root/us, not writable by group/others)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "shockwave_hints.py"), os.path.join(here, "..", "slurm_shockwave", "slurm", "hints.py")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
                continue
            ns = {"__name__": "shockwave_hints"}
            exec(compile(fh.read(), path, "exec"), ns)
            return ns["is_marked"]
    return None


def is_managed(env, conf, store, job_id, sys_file):
    if conf.get("SHOCKWAVE_HOOK_ALL_JOBS", "0").strip().lower() in ("1", "yes", "true"):
        return True
    marker = conf.get("SHOCKWAVE_MARKER", "shockwave")
    is_marked = load_is_marked()
    if is_marked is not None and is_marked(env.get("SLURM_JOB_COMMENT", ""), marker):
        return True
    # slurmctld-side hooks get no comment: the job is known if it already has files
    uid = to_int(env.get("SLURM_JOB_UID"))
    return os.path.lexists(sys_file) or (uid is not None and uid >= 0 and os.path.isdir(
        os.path.join(store, "users", str(uid), job_id)))


def provision_user_dir(store, env):
    """``<store>/users/<uid>`` owned by the job's user (mode 0755), created by us (root) before the job
    runs: only root creates entries in ``<store>`` and ``users/``, so no user can pre-create a path
    another user's job needs.  Refuses a ``users`` dir not owned by root/us or writable by others, and
    an existing user dir owned by someone else (logged; the job then runs without events)."""
    uid, gid = to_int(env.get("SLURM_JOB_UID")), to_int(env.get("SLURM_JOB_GID"))
    if uid is None or uid < 0 or os.geteuid() != 0:
        return None
    users = os.path.join(store, "users")
    unsafe = own_dir(users)
    if unsafe:
        return unsafe
    d = os.path.join(users, str(uid))
    try:
        os.mkdir(d, 0o755)
        os.chown(d, uid, gid if gid is not None and gid >= 0 else -1)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
        return "unsafe %s (owner %d, mode %o)" % (d, st.st_uid, stat.S_IMODE(st.st_mode))
    return None


def build_events(env, job_id, context, tail):
    kind = KIND_BY_CONTEXT[context]
    restart = max(0, min(to_int(env.get("SLURM_JOB_RESTART_COUNT"), 0), 100000))
    host = env.get("SLURMD_NODENAME") or socket.gethostname()
    base = {"v": SCHEMA_VERSION, "kind": kind, "job": job_id, "ts": round(time.time(), 6),
            "restart": restart, "source": context, "host": host[:255]}
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
        starts = [r.get("restart") for r in tail if r.get("kind") == "prolog_start"
                  and isinstance(r.get("restart"), int)]
        requeued = [r.get("restart") for r in tail if r.get("kind") == "requeue"]
        if starts and restart > max(starts) and restart not in requeued:
            events.append(dict(base, kind="requeue", reason="restart count %d -> %d"
                               % (max(starts), restart)))
            events[-1].pop("exit_code", None)
            events[-1].pop("signal", None)
    return events


def main(env):
    conf = load_conf(env)
    context = env.get("SLURM_SCRIPT_CONTEXT", "")
    job_id = env.get("SLURM_JOB_ID", "").strip()
    store = conf.get("SHOCKWAVE_STORE")
    if context not in KIND_BY_CONTEXT or not JOB_ID_RE.match(job_id) or not store:
        return
    if not os.path.isdir(store):
        log(conf, "store %s missing; nothing recorded for job %s" % (store, job_id))
        return
    d = system_dir(store)
    if d is None:
        log(conf, "unsafe or missing %s/_system; nothing recorded" % store)
        return
    sys_file = os.path.join(d, job_id + ".jsonl")
    if not is_managed(env, conf, store, job_id, sys_file):
        return
    if context.startswith("prolog"):
        problem = provision_user_dir(store, env)
        if problem:
            log(conf, "job %s: %s; the job's events cannot be written" % (job_id, problem))
    tail = read_tail(sys_file) if context.startswith("epilog") else []
    for rec in build_events(env, job_id, context, tail):
        append(sys_file, rec)


if __name__ == "__main__":
    try:
        signal.signal(signal.SIGALRM, lambda *_: os._exit(0))
        signal.alarm(max(1, to_int(os.environ.get("SHOCKWAVE_HOOK_TIMEOUT"), 3)))
        main(os.environ)
    except BaseException as exc:  # never fail: a failing prolog drains the node
        try:
            log(load_conf(os.environ), "error: %r" % (exc,))
        except BaseException:
            pass
    sys.stdout.flush()
    os._exit(0)
