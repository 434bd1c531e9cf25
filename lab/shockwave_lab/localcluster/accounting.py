"""Real accounting for a local cluster: MariaDB and slurmdbd in the cluster's directory, associations by sacctmgr.

Started before slurmctld, in this order: mariadbd (its own data directory ``<root>/db``, socket and pid file in
``<root>/run``, TCP on 127.0.0.1 only), slurmdbd (``etc/slurmdbd.conf``), then the cluster's associations in one
``sacctmgr load``; each daemon is recorded by pid + start time in ``cluster.json`` and stopped by pid with the
others. For a Slurm run from a Debian root, slurmdbd and sacctmgr are the root's (the root build installs
slurmdbd) and talk to the host's mariadbd over 127.0.0.1.

Facts relied on (checked on 22.05.8 with MariaDB 10.11, 24.11.5 and 26.05.5; shared/notes/
slurm-accounting-and-gpu-types.md):

* ``mariadb-install-db --no-defaults`` makes a data directory in 1-3.5 s (idle / busy 2 cores), so an empty one is
  made once per MariaDB version (``<cache>/mariadb-<version>``, :data:`CACHE`) and copied (30 MB, 0.1 s);
  ``mariadbd --no-defaults`` stays in the foreground (started here in its own session), answers within 0.3 s
  and ends cleanly on SIGTERM in about 2 s. As root the socket login needs no password (unix_socket).
* slurmdbd has no ``-f`` (22.05): it reads ``slurmdbd.conf`` beside ``$SLURM_CONF``, which must be mode 600 and
  owned by ``SlurmUser``; it daemonizes and writes its ``PidFile``. A database not yet up is retried every 5 s.
* slurmctld's first start needs slurmdbd up (22.05 with ``AccountingStorageEnforce=associations`` and no state
  is fatal; 24.11 hangs retrying), hence slurmdbd and the associations first.
* With ``AccountingStorageEnforce=associations`` a user without an association cannot submit; ``add cluster``
  (here the ``Cluster`` line of the load file) creates account ``root`` with root's association.
* Through a chroot only users that exist in the root can submit: :func:`ensure_users` creates them on the host
  and in the root with the same uid and gid, and :func:`as_user` runs a command as one of them.
"""
from __future__ import annotations

import logging
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Sequence

from shockwave_lab.localcluster import daemons as d
from shockwave_lab.localcluster.config import LOOPBACK, ClusterSettings, Paths
from shockwave_lab.localcluster.install import find_executable

log = logging.getLogger(__name__)

#: where the empty MariaDB data directory is kept (made once per MariaDB version)
CACHE = Path(os.environ.get("SHOCKWAVE_CACHE_DIR", "/var/cache/shockwave"))
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"
#: a throw-away server: small, no fsync per commit or table file (slurmdbd creates ~40 tables on its first start:
#: 4-5 s on 2 busy cores with the defaults), no lock-wait warning from slurmdbd
MARIADB_OPTIONS = ("--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--innodb-lock-wait-timeout=900",
                   "--skip-name-resolve", "--performance-schema=OFF", "--innodb-flush-log-at-trx-commit=0",
                   "--innodb-doublewrite=0", "--innodb-file-per-table=0", "--innodb-flush-method=nosync",
                   "--innodb-fast-shutdown=2")


def _exe(name: str) -> str:
    path = find_executable(name)
    if path is None:
        raise d.DaemonError(f"{name} not found (apt-get install mariadb-server slurmdbd)")
    return path


def _password(paths: Paths) -> str:
    """The database password of slurmdbd (made once per data directory, kept beside it, mode 600)."""
    f = paths.run / "db.password"
    if not f.exists():
        f.write_text(secrets.token_hex(16))
        os.chmod(f, 0o600)
    return f.read_text().strip()


def _sql(paths: Paths, statement: str, timeout: float = 10) -> subprocess.CompletedProcess:
    return subprocess.run([_exe("mariadb"), "--no-defaults", "-S", str(paths.db_socket), "-e", statement],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout, check=False)


def empty_datadir(log_dir: Path, timeout: float = 120) -> Path:
    """The cached empty data directory of this machine's MariaDB (made by mariadb-install-db on first use)."""
    version = subprocess.run([_exe("mariadbd"), "--version"], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL).stdout.split()
    name = "".join(c if c.isalnum() or c in ".-" else "_" for c in (version[2] if len(version) > 2 else "unknown"))
    target = CACHE / f"mariadb-{name}"
    if (target / "mysql").is_dir():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".mariadb-{name}-", dir=CACHE))
    try:                                         # its own process group, killed whole if interrupted
        with open(log_dir / "mariadb-install-db.log", "w") as out:
            rc = d.signals.run_group([_exe("mariadb-install-db"), "--no-defaults", f"--datadir={tmp}/db",
                                      "--user=root", "--auth-root-authentication-method=socket", "--skip-test-db",
                                      "--innodb-log-file-size=16M"], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, timeout=timeout).returncode
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if rc != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise d.DaemonError(f"mariadb-install-db exited rc={rc}: {d.log_tail(log_dir / 'mariadb-install-db.log')}")
    try:
        os.rename(tmp / "db", target)            # atomic: another cluster may have made it meanwhile
    except OSError:
        pass
    shutil.rmtree(tmp, ignore_errors=True)
    return target


def start_mariadb(paths: Paths, port: int, timeout: float = 60) -> d.ProcId:
    """A private mariadbd on 127.0.0.1:``port`` with the Slurm database and its user; returns its ProcId."""
    if not (paths.db / "mysql").is_dir():
        shutil.rmtree(paths.db, ignore_errors=True)
        (paths.run / "db.password").unlink(missing_ok=True)
        shutil.copytree(empty_datadir(paths.log, timeout), paths.db, symlinks=True)
    paths.db_socket.unlink(missing_ok=True)
    errlog = paths.log_file("mariadbd")
    argv = [_exe("mariadbd"), "--no-defaults", f"--datadir={paths.db}", f"--socket={paths.db_socket}",
            f"--port={port}", f"--bind-address={LOOPBACK}", "--user=root", f"--pid-file={paths.pid_file('mariadbd')}",
            f"--log-error={errlog}", *MARIADB_OPTIONS]
    proc, ready = None, False
    try:
        with d.signals.shielded():        # started and known together, even when a signal comes meanwhile
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True, cwd=str(paths.run))
        deadline = time.monotonic() + timeout
        while _sql(paths, "SELECT 1").returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise d.DaemonError(f"mariadbd did not start: {d.log_tail(errlog)}")
            time.sleep(0.1)
        ready = True
        pw = _password(paths)
        grants = " ".join(f"CREATE USER IF NOT EXISTS '{DB_USER}'@'{host}' IDENTIFIED BY '{pw}'; "
                          f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'{host}';" for host in ("localhost", LOOPBACK))
        done = _sql(paths, f"CREATE DATABASE IF NOT EXISTS {DB_NAME}; {grants}")
        if done.returncode != 0:
            raise d.DaemonError(f"creating the Slurm database failed: {done.stderr.strip()}")
        ident = d.identify(proc.pid)
        if ident is None:
            raise d.DaemonError("mariadbd exited right after starting")
        return ident
    except BaseException:
        if proc is not None:   # SIGTERM, SIGKILL after 5 s (1 s before it answers: it defers SIGTERM till then)
            d.stop_child(proc, grace=5 if ready else 1)
        raise


def render_slurmdbd_conf(paths: Paths, s: ClusterSettings, password: str) -> str:
    return "\n".join([
        "AuthType=auth/munge", f"AuthInfo=socket={paths.munge_socket}", "DbdHost=localhost", f"DbdPort={s.dbd_port}",
        "SlurmUser=root", "DebugLevel=info", f"LogFile={paths.log_file('slurmdbd')}",
        f"PidFile={paths.pid_file('slurmdbd')}", "StorageType=accounting_storage/mysql", f"StorageHost={LOOPBACK}",
        f"StoragePort={s.db_port}", f"StorageUser={DB_USER}", f"StoragePass={password}", f"StorageLoc={DB_NAME}",
    ]) + "\n"


def render_associations(s: ClusterSettings) -> str:
    """A ``sacctmgr load`` file: the cluster, its accounts under root with their RawShares (Fairshare=), each user
    under its account (the first account named for a user is its default)."""
    lines = [f"Cluster - '{s.cluster_name}'", "Parent - 'root'"]
    lines += [f"Account - '{name}':Fairshare={int(shares)}" for name, shares in s.accounts]
    for account, _shares in s.accounts:
        members = [u for u, a in s.users if a == account]
        if members:
            lines.append(f"Parent - '{account}'")
            lines += [f"User - '{u}':Fairshare=1" for u in members]
    return "\n".join(lines) + "\n"


def start_slurmdbd(paths: Paths, s: ClusterSettings, env: dict, bin_dir: Path | None = None,
                   timeout: float = 60) -> d.ProcId:
    """Write slurmdbd.conf (mode 600), start slurmdbd, wait until sacctmgr answers, load the associations."""
    conf = paths.slurmdbd_conf
    conf.write_text(render_slurmdbd_conf(paths, s, _password(paths)))
    os.chmod(conf, 0o600)
    ident = d.launch([d.exe("slurmdbd", bin_dir)], env, paths.log / "slurmdbd.start.log", paths.pid_file("slurmdbd"),
                     paths.log_file("slurmdbd"), timeout)
    with d.owned(ident):                  # stopped if it does not answer, or a signal comes meanwhile
        _load_associations(paths, s, env, bin_dir, ident, timeout)
    return ident


def _load_associations(paths: Paths, s: ClusterSettings, env: dict, bin_dir: Path | None, ident: d.ProcId,
                       timeout: float) -> None:
    sacctmgr = d.exe("sacctmgr", bin_dir)
    deadline = time.monotonic() + timeout
    while True:
        r = subprocess.run([sacctmgr, "-n", "-P", "show", "cluster"], env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=30, check=False)
        if r.returncode == 0:
            break
        if not ident.alive() or time.monotonic() > deadline:
            raise d.DaemonError(f"slurmdbd does not answer: {(r.stderr or r.stdout).strip()[-300:]} | "
                                f"{d.log_tail(paths.log_file('slurmdbd'))}")
        time.sleep(0.1)
    spec = paths.etc / "associations.cfg"
    spec.write_text(render_associations(s))
    r = subprocess.run([sacctmgr, "-i", "load", f"file={spec}"], env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60, check=False, cwd=str(paths.etc))
    if r.returncode != 0:
        raise d.DaemonError(f"sacctmgr load {spec} failed: {(r.stderr or r.stdout).strip()[-300:]}")


def ensure_users(names: Sequence[str], chroot_path: Path | None = None) -> dict[str, pwd.struct_passwd]:
    """Create these Linux users (no home, /bin/sh) unless they exist, and for a Debian root the same users (same
    uid and gid) in it, so that their jobs can be submitted and run there. Needs root."""
    out = {}
    for name in names:
        out[name] = pw = _host_user(name)
        if chroot_path is not None:
            _user_in_root(Path(chroot_path), pw)
    return out


def _added(exists, add, tries: int = 5) -> str:
    """Run ``add`` (a useradd / groupadd) until ``exists()``: another cluster (a test of another worker) may add the
    same at the same time, and the command then fails on the name or on the lock of /etc/passwd; tried again after a
    short wait.  Returns the last error ("" when none)."""
    err = ""
    for attempt in range(tries):
        if exists():
            return ""
        r = add()
        err = r.stderr.strip()
        if r.returncode != 0:
            time.sleep(0.2 * (attempt + 1))
    return err


def _host_user(name: str) -> pwd.struct_passwd:
    """The host's user ``name``, created (no home, /bin/sh) unless it exists."""
    def exists() -> bool:
        try:
            pwd.getpwnam(name)
            return True
        except KeyError:
            return False
    err = _added(exists, lambda: subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], capture_output=True,
                                                text=True, stdin=subprocess.DEVNULL, timeout=30))
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise d.DaemonError(f"useradd {name} failed: {err}") from None


def _user_in_root(root: Path, pw: pwd.struct_passwd) -> None:
    """The host's user ``pw`` (same name, uid, gid) in the Debian root, unless there; tolerant of another cluster
    adding it at the same time."""
    def has(kind: str, field: int, value: str) -> bool:
        return any(line.split(":")[field:field + 1] == [value]
                   for line in (root / "etc" / kind).read_text().splitlines())
    def add():
        if not has("group", 2, str(pw.pw_gid)):
            subprocess.run(["chroot", str(root), "groupadd", "-g", str(pw.pw_gid), pw.pw_name], capture_output=True,
                           stdin=subprocess.DEVNULL, timeout=30)
        return subprocess.run(["chroot", str(root), "useradd", "-M", "-u", str(pw.pw_uid), "-g", str(pw.pw_gid),
                               "-s", "/bin/sh", pw.pw_name], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=30)
    err = _added(lambda: has("passwd", 0, pw.pw_name), add)
    if not has("passwd", 0, pw.pw_name):
        raise d.DaemonError(f"cannot add user {pw.pw_name} to {root}: {err}")


def as_user(argv: Sequence[str], user: str, chroot_path: Path | None = None, cwd: str | None = None) -> list[str]:
    """``argv`` (a Slurm command, by name) run as ``user``: ``runuser`` on the host, ``chroot --userspec`` into a
    Debian root (its wrappers' ``chroot`` needs root, so the user switch happens in the same call)."""
    argv = [str(a) for a in argv]
    if chroot_path is None:
        return ["runuser", "-u", user, "--", *argv]
    pw = pwd.getpwnam(user)
    inner = next((f"{p}/{argv[0]}" for p in ("/usr/bin", "/usr/sbin") if (Path(chroot_path) / p.lstrip("/") /
                                                                         argv[0]).exists()), argv[0])
    return ["chroot", f"--userspec={pw.pw_uid}:{pw.pw_gid}", str(chroot_path), "/usr/bin/env", "-C", cwd or "/",
            inner, *argv[1:]]
