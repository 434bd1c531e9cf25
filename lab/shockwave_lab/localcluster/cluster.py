"""``LocalCluster``: a real Slurm cluster on this machine, owned by one directory.

Layout under ``root`` (see :class:`~.config.Paths`): ``etc/`` (slurm.conf, gres.conf,
cgroup.conf), ``state/``, ``spool/<node>/``, ``log/``, ``run/`` (pid files), ``munge/`` (key,
socket, munged pid/log), ``dev/nvidia*`` (fake GPUs), ``fakecg/``, ``db/`` (MariaDB's data, with
accounting) and ``cluster.json``, the
state file (settings, ports, pid + start time of each daemon) that lets ``status()`` and
``down()`` work from a fresh process given the same root.

Timing facts (22.05.8, 2 cores): start to all nodes idle takes 0.2-0.3 s; stop 0.3-2.2 s
(munged needs ~2 s after SIGTERM). A requeued job restarts by itself ~7 s after the requeue
with the defaults here (``cred_expire=5``, ``sched_interval=bf_interval=2``) instead of
121 s + one scheduler pass with Slurm's defaults; ``scontrol update JobId=X StartTime=now``
makes it eligible at once.
"""
from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from slurm_shockwave.slurm import SlurmCLI, SlurmError
from shockwave_lab.localcluster import accounting as acct
from shockwave_lab.localcluster import daemons as d
from shockwave_lab.localcluster import readiness, signals, statefile
from shockwave_lab.localcluster.chroot import DEFAULT_ROOTS_DIR, ChrootRoot, RootError, host_version, major_minor
from shockwave_lab.localcluster.config import ClusterSettings, Paths, pick_free_ports, untraversable_ancestors, write_config
from shockwave_lab.localcluster.install import SlurmUnavailable, ensure_installed, missing_packages

log = logging.getLogger(__name__)


class ClusterStartError(RuntimeError):
    """Slurm is installed but the cluster did not come up; the message has the log tail."""


class LocalCluster:
    """A local Slurm cluster: munged + slurmctld + one slurmd per node, all on 127.0.0.1.

    ``nodes`` nodes named ``node1..nodeN`` with ``gpus_per_node`` fake GPUs and
    ``cpus_per_node`` CPUs each, in one default partition ``partition``. ``cred_expire``,
    ``sched_interval``, ``bf_interval`` and ``kill_wait`` (seconds) are set short so that tests
    are fast; ``extra_conf`` lines are appended at the end of slurm.conf (after the node and
    partition lines, so they may add partitions over ``node_names``; a repeated key such as
    ``SlurmctldParameters`` replaces ours).

    ``slurm`` (``"22.05"``, ``"24.11"``, ``"26.05"``; default: the host's) picks the Slurm
    version: one the host does not have runs from a Debian root under ``roots_dir`` (built by
    :meth:`ensure_installed`, see :mod:`.chroot`); :attr:`env` then puts the wrappers in
    :attr:`bin_dir` first on ``PATH`` and :attr:`cli` runs them. For such a cluster, ``binds`` /
    ``rw_binds`` are host paths mounted read-only / read-write at the same path in the root (job
    scripts, outputs), and ``host_python`` (a venv's python) becomes ``bin_dir/host-python``,
    runnable by jobs inside the root (its interpreter, stdlib and venv are bound read-only).

    ``accounting=True`` (implied by ``accounts`` or ``users``) adds real accounting (:mod:`.accounting`): MariaDB
    and slurmdbd in this directory, started first and stopped by pid with the rest, usage billed in GPUs;
    ``accounts`` ({account: RawShares}) under root and ``users`` ({user: account}) are created with sacctmgr, the
    users as Linux users too (in the Debian root as well): run their commands with :meth:`as_user`.
    ``gpu_types`` (e.g. ``["v100", "k80"]``): one GPU type per node (then ``nodes = len(gpu_types)``), each node's
    ``gpus_per_node`` GPUs of that type (gres.conf ``Type=``) and the type as the node's Feature.
    """

    def __init__(self, root: str | os.PathLike, nodes: int = 2, gpus_per_node: int = 4,
                 cpus_per_node: int = 4, partition: str = "gpu", *, cluster_name: str = "shockwave",
                 memory_mb: int = 16000, cred_expire: int = 5, sched_interval: int = 2,
                 bf_interval: int = 2, kill_wait: int = 5, extra_conf: Sequence[str] = (),
                 keep_state: bool = False, slurm: str | None = None,
                 roots_dir: str | os.PathLike = DEFAULT_ROOTS_DIR, binds: Sequence[str | os.PathLike] = (),
                 rw_binds: Sequence[str | os.PathLike] = (), host_python: str | None = None,
                 accounting: bool = False, accounts: Mapping[str, int] | None = None,
                 users: Mapping[str, str] | None = None, gpu_types: Sequence[str] = ()):
        nodes = len(gpu_types) or nodes
        if nodes < 1 or gpus_per_node < 0 or cpus_per_node < 1:
            raise ValueError("need nodes >= 1, gpus_per_node >= 0, cpus_per_node >= 1")
        self.root = Path(root).absolute()
        if self.root == Path("/"):
            raise ValueError("root must not be /")
        self.paths = Paths(self.root)
        self._params = dict(nodes=nodes, gpus_per_node=gpus_per_node, cpus_per_node=cpus_per_node,
                            partition=partition, cluster_name=cluster_name, memory_mb=memory_mb,
                            cred_expire=cred_expire, sched_interval=sched_interval,
                            bf_interval=bf_interval, kill_wait=kill_wait,
                            extra_conf=tuple(extra_conf), accounting=bool(accounting or accounts or users),
                            accounts=tuple((a, int(n)) for a, n in (accounts or {}).items()),
                            users=tuple((u, a) for u, a in (users or {}).items()), gpu_types=list(gpu_types))
        if any(not t or not t.replace("_", "").replace("-", "").isalnum() or not t.isascii() for t in gpu_types):
            raise ValueError(f"GPU types must be letters, digits, '_' or '-': {list(gpu_types)}")
        unknown = {a for _u, a in self._params["users"]} - {a for a, _n in self._params["accounts"]}
        if unknown:
            raise ValueError(f"users in accounts that are not created: {sorted(unknown)}")
        self.keep_state = keep_state
        self._requested = major_minor(slurm) if slurm else None
        self.host_python = host_python
        self._binds = tuple((str(Path(b).absolute()), False) for b in rw_binds)
        self._binds += tuple((str(Path(b).absolute()), True) for b in binds)
        if host_python:
            from shockwave_lab.localcluster.chroot import host_python_binds
            self._binds += tuple((b, True) for b in host_python_binds(host_python))
        self.roots_dir = Path(roots_dir)
        self._host = host_version() if self._requested else None   # only asked when it matters
        if self._requested and self._requested != self._host:
            self._chroot: ChrootRoot | None = ChrootRoot(self._requested, roots_dir)
        else:
            self._chroot = None

    # ------------------------------------------------------------------ public API
    @property
    def chroot(self) -> ChrootRoot | None:
        """The Debian root the daemons run in (from this instance, else the running cluster's)."""
        if self._chroot is None and self._requested is None:
            state = statefile.read(self.paths) or {}
            settings = state.get("settings", {})
            if settings.get("chroot"):
                root = Path(settings["chroot"])
                self._chroot = ChrootRoot(settings.get("slurm_version", "24.11"), root.parent)
        return self._chroot

    @property
    def slurm_version(self) -> str:
        """Major.minor of the Slurm this cluster runs (``22.05``, ``24.11``, ``26.05``)."""
        if self.chroot is not None:
            return self.chroot.version
        if self._requested is None and self._host is None:
            self._host = host_version()
        return self._requested or self._host or "22.05"

    @property
    def bin_dir(self) -> Path | None:
        """Directory of wrappers running the chroot's Slurm commands; None for the host's Slurm."""
        return self.paths.bin if self.chroot is not None else None

    @property
    def env(self) -> dict[str, str]:
        """Variables that point Slurm's commands at this cluster (lay them over os.environ).
        For a chroot's Slurm, ``PATH`` starts with :attr:`bin_dir`."""
        env = {"SLURM_CONF": str(self.paths.slurm_conf)}
        if self.bin_dir is not None:
            env["PATH"] = f"{self.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return env

    def full_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    @property
    def cli(self) -> SlurmCLI:
        return SlurmCLI(env=self.env, bin_dir=str(self.bin_dir) if self.bin_dir else None)

    @property
    def node_names(self) -> list[str]:
        """Node names of the running cluster (from cluster.json), else of this instance."""
        return [f"node{i}" for i in range(1, int(self._current("nodes")) + 1)]

    @property
    def partition(self) -> str:
        return str(self._current("partition"))

    def _current(self, key: str):
        state = statefile.read(self.paths)
        return (state or {}).get("settings", {}).get(key, self._params[key])

    def ensure_installed(self) -> list[str]:
        """apt-get install the missing Slurm/munge packages, or build the chroot's root (once,
        cached); raises SlurmUnavailable."""
        if self.chroot is not None:
            if os.geteuid() != 0:
                raise SlurmUnavailable("a chroot Slurm cluster needs root")
            if self._params["accounting"]:
                ensure_installed(accounting=True)          # MariaDB runs on the host for every version
            try:
                spent = self.chroot.ensure_built()
            except (RootError, OSError, subprocess.SubprocessError) as exc:
                raise SlurmUnavailable(f"cannot build the Slurm {self.chroot.version} root: {exc}") from exc
            if spent:
                log.info("built %s in %.0f s", self.chroot.path, spent)
            return []
        return ensure_installed(accounting=self._params["accounting"])

    def as_user(self, user: str, argv: Sequence[str], cwd: str | None = None) -> list[str]:
        """``argv`` (a Slurm command such as ``sbatch``) run as ``user`` on this cluster (host or Debian root)."""
        return acct.as_user(argv, user, self.chroot.path if self.chroot is not None else None, cwd)

    def run(self, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        """``subprocess.run(argv)`` with this cluster's env; text output captured, no check."""
        if isinstance(argv, (str, bytes)):
            raise TypeError("argv must be a list of arguments, not a string")
        opts = dict(env=self.full_env(), capture_output=True, text=True,
                    stdin=subprocess.DEVNULL, check=False, timeout=60)
        opts.update(kwargs)
        return subprocess.run(list(argv), **opts)

    def up(self, timeout: float = 60) -> bool:
        """Write the config and start munged, slurmctld and the slurmds; wait until all idle.

        Returns True if it started the daemons, False if they were already running (per the
        state file and pid checks; logged). Raises SlurmUnavailable if Slurm is missing or we
        are not root, ClusterStartError if the daemons fail (whatever started is stopped).
        """
        self._check_can_run()
        with self._locked():
            state = statefile.read(self.paths)
            if state and statefile.all_alive(state):
                log.info("local Slurm cluster at %s is already running (pids %s)", self.root,
                         {k: v["pid"] for k, v in state["daemons"].items()})
                differ = {k for k, v in self._params.items()
                          if k not in ("extra_conf", "accounts", "users") and state["settings"].get(k) != v}
                if differ:
                    log.warning("running cluster has other settings (%s); down() first to apply",
                                ", ".join(sorted(differ)))
                return False
            self._stop_known(state)
            settings = self._new_settings()
            self._prepare(settings)  # may raise ClusterStartError before anything starts
            try:
                self._start_all(settings, timeout)
            except BaseException as exc:     # a signal too (signals.py): stop what started, whole, then re-raise
                with signals.shielded():
                    self._stop_known(statefile.read(self.paths))
                    if self.chroot is not None:
                        self.chroot.unmount(self.root)
                    statefile.write(self.paths, self.root, settings, {}, "failed")
                if not isinstance(exc, Exception):
                    raise
                raise ClusterStartError(f"local Slurm cluster at {self.root} failed to start: {exc}") from exc
        return True

    def down(self, timeout: float = 30) -> list[int]:
        """Cancel jobs, stop the daemons this cluster started (pid + start time checked), and
        end their leftover slurmstepd/job processes. Idempotent. Returns pids still alive
        (normally empty)."""
        if not self.root.is_dir():
            return []
        with signals.shielded(), self._locked():       # a signal meanwhile waits until every daemon is stopped
            state = statefile.read(self.paths)
            known = statefile.known_procs(self.paths, self.root, state)
            if self._ctld_alive(state):
                readiness.cancel_all_jobs(self._cli(10), min(timeout, 5))
            remaining = d.sweep(self.root, known, self._alt_roots(), grace=min(timeout, 5))
            if self.chroot is not None and not remaining:
                busy = self.chroot.unmount(self.root)
                if busy:
                    log.warning("mounts still busy after down(): %s", busy)
            if state:
                statefile.write(self.paths, self.root, statefile.settings_from(state), {}, "down")
        if remaining:
            log.warning("processes still alive after down(): %s", [p.pid for p in remaining])
        return [p.pid for p in remaining]

    def status(self) -> dict:
        """{"root", "running", "conf", "ports", "daemons": {name: {"pid", "alive"}},
        "nodes": {name: {"state", "flags", "gpus", "gpus_used"}}, "error"}. Works from any
        process given the same root (reads cluster.json)."""
        state = statefile.read(self.paths)
        daemons = {}
        for name, ident in (state or {}).get("daemons", {}).items():
            proc = d.ProcId.from_json(ident)
            daemons[name] = {"pid": proc.pid, "alive": proc.alive()}
        result = {
            "root": str(self.root), "conf": str(self.paths.slurm_conf),
            "state": (state or {}).get("status", "absent"),
            "running": bool(daemons) and all(v["alive"] for v in daemons.values()),
            "ports": (state or {}).get("ports", {}), "daemons": daemons, "nodes": {}, "error": None,
            "slurm_version": (state or {}).get("settings", {}).get("slurm_version"),
            "bin_dir": str(self.bin_dir) if self.bin_dir else None,
        }
        if daemons.get("slurmctld", {}).get("alive"):
            try:
                for n in self._cli(10).sinfo_nodes():
                    result["nodes"][n.name] = {"state": n.state, "flags": list(n.state_flags),
                                               "gpus": n.gpus, "gpus_used": n.gpus_used}
            except SlurmError as exc:
                result["error"] = str(exc)
        return result

    def __enter__(self) -> "LocalCluster":
        self.up()
        return self

    def __exit__(self, *exc_info) -> None:
        self.down()

    # ------------------------------------------------------------------ helpers
    def _cli(self, timeout: float) -> SlurmCLI:
        return SlurmCLI(env=self.env, timeout=timeout,
                        bin_dir=str(self.bin_dir) if self.bin_dir else None)

    def _alt_roots(self) -> tuple[str, ...]:
        """The cluster dir as a chrooted process's cwd shows it from the host."""
        if self.chroot is None:
            return ()
        return (str(self.chroot.path / str(self.root).lstrip("/")),)

    def _check_can_run(self) -> None:
        if os.geteuid() != 0:
            raise SlurmUnavailable("LocalCluster must run as root (slurmd runs jobs as other users)")
        if self.chroot is not None:
            if not self.chroot.built() or (self._params["accounting"] and not self.chroot.has_slurmdbd()):
                raise SlurmUnavailable(f"no Slurm {self.chroot.version} root (with slurmdbd) at {self.chroot.path}; "
                                       "call ensure_installed() first")
            if self._params["accounting"] and missing_packages(accounting=True):
                raise SlurmUnavailable("MariaDB is not installed; call ensure_installed() first")
            return
        missing = missing_packages(accounting=self._params["accounting"])
        if missing:
            raise SlurmUnavailable(f"Slurm not installed (missing {', '.join(missing)}); "
                                   "call ensure_installed() first")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialize up()/down() on the same root across processes (flock on .cluster.lock)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.paths.lock_file, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _new_settings(self) -> ClusterSettings:
        nodes, extra = self._params["nodes"], (2 if self._params["accounting"] else 0)
        ports = pick_free_ports(1 + nodes + extra)
        chroot = self.chroot
        dbd = dict(dbd_port=ports[-2], db_port=ports[-1]) if extra else {}
        return ClusterSettings(ctld_port=ports[0], node_ports=tuple(ports[1:1 + nodes]), **dbd, **self._params,
                               slurm_version=self.slurm_version,
                               chroot=str(chroot.path) if chroot else None)

    def _prepare(self, settings: ClusterSettings) -> None:
        bad = untraversable_ancestors(self.root.parent)
        if bad:
            raise ClusterStartError(
                f"{self.root} is not world-traversable (no o+x on {', '.join(map(str, bad))}): munged "
                "refuses such a socket path and jobs of non-root users could not start; "
                "use e.g. tempfile.mkdtemp() + chmod 0755, not pytest's tmp_path")
        if not self.keep_state:
            for sub in (self.paths.state, self.paths.spool, self.paths.db):
                shutil.rmtree(sub, ignore_errors=True)
        for stale in [self.paths.munge_socket, *self.paths.run.glob("*.pid")]:
            try:
                stale.unlink()
            except (FileNotFoundError, IsADirectoryError):
                pass
        write_config(self.paths, settings)
        if self.chroot is not None:
            try:
                self.chroot.write_wrappers(self.paths.bin)
                if self.host_python:
                    self.chroot.write_host_python(self.paths.bin, self.host_python)
                self.chroot.mount(self.root, self._binds)
            except (RootError, OSError, subprocess.SubprocessError) as exc:
                raise ClusterStartError(f"cannot prepare the Slurm {self.chroot.version} root: {exc}") from exc
        statefile.write(self.paths, self.root, settings, {}, "starting")

    def _start_all(self, settings: ClusterSettings, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        env = self.full_env()
        started: dict[str, d.ProcId] = {}

        def record(name: str, proc: d.ProcId) -> None:
            started[name] = proc
            statefile.write(self.paths, self.root, settings, started, "starting")

        bin_dir = self.bin_dir
        if settings.accounting:       # the database and slurmdbd before slurmctld (its first start needs them)
            acct.ensure_users([u for u, _a in settings.users], self.chroot.path if self.chroot is not None else None)
            record("mariadbd", acct.start_mariadb(self.paths, settings.db_port,
                                                  max(deadline - time.monotonic(), 1)))
        record("munged", d.start_munged(self.paths, bin_dir=bin_dir))
        if settings.accounting:
            record("slurmdbd", acct.start_slurmdbd(self.paths, settings, env, bin_dir,
                                                   max(deadline - time.monotonic(), 1)))
        record("slurmctld", d.start_slurmctld(self.paths, env, bin_dir=bin_dir))
        d.wait_ctld_ready(env, max(deadline - time.monotonic(), 1), bin_dir=bin_dir)
        for node in settings.node_names:
            record(f"slurmd.{node}", d.start_slurmd(self.paths, node, env, bin_dir=bin_dir))
        readiness.wait_nodes_idle(self._cli(10), self.paths, settings, deadline)
        statefile.write(self.paths, self.root, settings, started, "up")

    def _stop_known(self, state: dict | None) -> None:
        known = [p for p in statefile.known_procs(self.paths, self.root, state) if p.alive()]
        if known:
            log.info("stopping leftover daemons of %s: %s", self.root, [p.pid for p in known])
        d.sweep(self.root, known, self._alt_roots())   # also what a start cut short forked before its pid file

    def _ctld_alive(self, state: dict | None) -> bool:
        """Only then can clients answer (with slurmctld dead they retry for ~10 s)."""
        ctld = (state or {}).get("daemons", {}).get("slurmctld")
        if ctld:
            return d.ProcId.from_json(ctld).alive()
        ident = d.identify(d.read_pid_file(self.paths.pid_file("slurmctld")))
        return bool(ident and statefile.runs_with_root(ident.pid, self.root))
