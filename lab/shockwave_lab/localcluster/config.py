"""Directory layout, port choice and config files of a local (single-machine) Slurm cluster.

Every file lives under the cluster's ``root``; nothing is written to ``/etc``. Facts relied on
(Slurm 22.05.8 on Debian 12, see ``shared/notes/slurm-on-one-machine.md``):

* Several nodes on one machine: one ``slurmd -N nodeX`` per node, each node line with
  ``NodeHostname=localhost NodeAddr=127.0.0.1 Port=<own port>``; ``%n`` in ``SlurmdSpoolDir``,
  ``SlurmdPidFile`` and ``SlurmdLogFile`` gives each slurmd its own files. The spool dir of each
  node must exist before slurmd starts (else ``Domain socket directory ... No such file``).
* Fake GPUs: ``gres.conf`` ``Name=gpu File=<root>/dev/nvidia[0-N]`` where the files are symlinks
  to ``/dev/null``. Without ``File=`` 22.05 drops the GPUs and drains the node; regular files
  make slurmd log errors.
* slurmd always loads a cgroup plugin; where ``/sys/fs/cgroup`` is empty or odd (containers)
  it dies. ``cgroup.conf`` with ``CgroupPlugin=cgroup/v1`` and ``CgroupMountpoint=<empty dir>``
  fixes that, with ``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none``.
* ``SlurmdParameters=config_overrides`` lets a node claim more CPUs/memory than the machine
  has (``FastSchedule`` was removed: ``FastSchedule=2`` is fatal).
* ``PreemptParameters=`` is NOT a 22.05 key (parse error that stops every command); the 22.05
  spelling of ``send_user_signal`` is ``SlurmctldParameters=preempt_send_user_signal``.
* Requeue delay: a requeued job gets ``BeginTime`` = completion + ``cred_expire`` + 1 s
  (default ``cred_expire=120``, i.e. 121 s), then waits for the next scheduler pass.
  We set ``AuthInfo=...,cred_expire=<cred_expire>`` (default 5) and
  ``SchedulerParameters=sched_interval=2,bf_interval=2``: a requeued job then restarts by itself
  about 7 s after the requeue (measured 7.0 s). ``scontrol update JobId=X StartTime=now``
  makes it start within ~1 s.
* ``MailProg=/bin/true`` avoids ``error: Configured MailProg is invalid``.
* ``CommunicationParameters=NoInAddrAny`` binds each slurmd to its ``NodeAddr`` (127.0.0.1)
  instead of 0.0.0.0; slurmctld always listens on ``0.0.0.0:<SlurmctldPort>`` regardless.
"""
from __future__ import annotations

import os
import random
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"
#: ports are picked here: below Linux's ephemeral range (32768-60999), so that client
#: connections of other programs do not take a port between our choice and the daemon's bind
PORT_RANGE = (20000, 32000)


@dataclass(frozen=True)
class Paths:
    """Where a cluster rooted at ``root`` keeps its files (all under root)."""

    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.etc / "gres.conf"

    @property
    def cgroup_conf(self) -> Path:
        return self.etc / "cgroup.conf"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def munge(self) -> Path:
        return self.root / "munge"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def fakecg(self) -> Path:
        return self.root / "fakecg"

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def lock_file(self) -> Path:
        return self.root / ".cluster.lock"

    @property
    def munge_socket(self) -> Path:
        return self.munge / "munge.sock"

    @property
    def munge_key(self) -> Path:
        return self.munge / "munge.key"

    def pid_file(self, daemon: str) -> Path:
        """``munged``, ``slurmctld`` or ``slurmd.<node>`` -> its pid file."""
        if daemon == "munged":
            return self.munge / "munged.pid"
        return self.run / f"{daemon}.pid"

    def log_file(self, daemon: str) -> Path:
        if daemon == "munged":
            return self.munge / "munged.log"
        return self.log / f"{daemon}.log"

    @property
    def db(self) -> Path:
        """MariaDB's data directory (accounting only)."""
        return self.root / "db"

    @property
    def db_socket(self) -> Path:
        return self.run / "mariadbd.sock"

    @property
    def slurmdbd_conf(self) -> Path:
        return self.etc / "slurmdbd.conf"

    @property
    def bin(self) -> Path:
        """Wrappers that run a chroot's Slurm commands (only for a cluster in a chroot)."""
        return self.root / "bin"

    def all_dirs(self) -> list[Path]:
        return [self.root, self.etc, self.state, self.spool, self.log, self.run,
                self.munge, self.dev, self.fakecg]


def node_names(nodes: int) -> list[str]:
    """The names of a local cluster's nodes: node1, node2, ..."""
    return [f"node{i}" for i in range(1, nodes + 1)]


@dataclass(frozen=True)
class ClusterSettings:
    """Everything slurm.conf is rendered from."""

    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    partition: str
    cluster_name: str
    ctld_port: int
    node_ports: tuple[int, ...]
    memory_mb: int = 16000
    cred_expire: int = 5
    sched_interval: int = 2
    bf_interval: int = 2
    kill_wait: int = 5
    min_job_age: int = 300
    extra_conf: tuple[str, ...] = field(default_factory=tuple)
    #: major.minor of the Slurm that runs the cluster (config keys differ by version)
    slurm_version: str = "22.05"
    #: the Debian root the daemons run in (None: the host's Slurm)
    chroot: str | None = None
    #: real accounting (MariaDB + slurmdbd, see accounting.py) on these ports, with these associations:
    #: (account, RawShares) and (user, account) pairs
    accounting: bool = False
    dbd_port: int = 0
    db_port: int = 0
    accounts: tuple[tuple[str, int], ...] = ()
    users: tuple[tuple[str, str], ...] = ()
    #: the GPU type of each node (gres.conf ``Type=``, ``Gres=gpu:<type>:<n>``, ``Features=<type>``); () untyped
    gpu_types: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "gpu_types", tuple(self.gpu_types))     # a list when read back from cluster.json

    @property
    def node_names(self) -> list[str]:
        return node_names(self.nodes)

    def node_gres(self, i: int) -> tuple[str, str]:
        """(slurm.conf text, gres.conf ``Type=``) of node i (0-based): typed nodes carry their type as a Feature too
        (Slurm 22.05 can only move a pending job to another type through its constraint)."""
        if self.gpus_per_node <= 0:
            return "", ""
        if not self.gpu_types:
            return f" Gres=gpu:{self.gpus_per_node}", ""
        t = self.gpu_types[i]
        return f" Gres=gpu:{t}:{self.gpus_per_node} Features={t}", f" Type={t}"


def _port_free(port: int) -> bool:
    """True if ``port`` can be bound on 127.0.0.1 and on the wildcard address (slurmctld uses 0.0.0.0)."""
    for host in (LOOPBACK, ""):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def pick_free_ports(count: int, rng: random.Random | None = None) -> list[int]:
    """``count`` distinct currently-free TCP ports from :data:`PORT_RANGE`, in random order.

    Random choice (not a fixed base) keeps two clusters started at the same time from picking
    the same ports; a daemon that still fails to bind is reported by ``up()``.
    """
    rng = rng or random.SystemRandom()
    lo, hi = PORT_RANGE
    chosen: list[int] = []
    for _ in range(count * 200):
        port = rng.randrange(lo, hi)
        if port not in chosen and _port_free(port):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise OSError(f"could not find {count} free TCP ports in {lo}-{hi}")


def _at_least(version: str, minimum: tuple[int, int]) -> bool:
    try:
        return tuple(int(x) for x in version.split(".")[:2]) >= minimum
    except ValueError:
        return True


def render_slurm_conf(paths: Paths, s: ClusterSettings) -> str:
    """slurm.conf text; one key per line. See the module docstring for why each line is there.

    Version differences: from 23.02 the user signal on preemption is
    ``PreemptParameters=send_user_signal`` (22.05: ``SlurmctldParameters=preempt_send_user_signal``;
    each spelling is a fatal parse error on the other side) and ``SwitchType`` is left out.
    """
    p = paths
    new = _at_least(s.slurm_version, (23, 2))
    lines = [
        f"ClusterName={s.cluster_name}",
        "SlurmctldHost=localhost",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={s.ctld_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={p.munge_socket},cred_expire={s.cred_expire}",
        "CommunicationParameters=NoInAddrAny",
        f"StateSaveLocation={p.state}",
        f"SlurmdSpoolDir={p.spool}/%n",
        f"SlurmctldPidFile={p.pid_file('slurmctld')}",
        f"SlurmdPidFile={p.run}/slurmd.%n.pid",
        f"SlurmctldLogFile={p.log_file('slurmctld')}",
        f"SlurmdLogFile={p.log}/slurmd.%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "MailProg=/bin/true",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        *(accounting_lines(p, s) if s.accounting else ["AccountingStorageType=accounting_storage/none"]),
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={p.log}/jobcomp.txt",
        "MpiDefault=none",
        *([] if new else ["SwitchType=switch/none"]),
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        f"SchedulerParameters=sched_interval={s.sched_interval},bf_interval={s.bf_interval}",
        "PriorityType=priority/multifactor",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
        "PreemptParameters=send_user_signal" if new else "SlurmctldParameters=preempt_send_user_signal",
        "JobRequeue=1",
        f"KillWait={s.kill_wait}",
        f"MinJobAge={s.min_job_age}",
        "ReturnToService=2",
        "SlurmdTimeout=60",
        "SlurmdParameters=config_overrides",
        "GresTypes=gpu",
    ]
    for i, (name, port) in enumerate(zip(s.node_names, s.node_ports)):
        lines.append(
            f"NodeName={name} NodeHostname=localhost NodeAddr={LOOPBACK} Port={port} "
            f"CPUs={s.cpus_per_node} RealMemory={s.memory_mb}{s.node_gres(i)[0]} State=UNKNOWN"
        )
    lines.append(
        f"PartitionName={s.partition} Nodes={','.join(s.node_names)} Default=YES "
        "PriorityTier=1 GraceTime=0 MaxTime=INFINITE State=UP"
        + (' TRESBillingWeights="GRES/gpu=1.0"' if s.accounting else "")
    )
    lines += list(s.extra_conf)
    return "\n".join(lines) + "\n"


#: minutes between Slurm's recalculations of priorities and fair-share usage with accounting (its shortest)
PRIORITY_CALC_PERIOD_MIN = 1


def accounting_lines(p: Paths, s: ClusterSettings) -> list[str]:
    """slurm.conf with slurmdbd: clients and slurmctld reach slurmdbd through the munge socket named by
    ``AccountingStoragePass`` (``AuthInfo`` is not used for it); ``limits`` makes Slurm add a job's usage when
    it ends (with ``associations`` alone only the PriorityCalcPeriod ticks count running jobs, and short jobs
    never show in ``sshare``); usage is billed in GPUs (the partition's ``TRESBillingWeights``) and
    recomputed every minute (the shortest ``PriorityCalcPeriod``)."""
    return ["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
            f"AccountingStoragePort={s.dbd_port}", f"AccountingStoragePass={p.munge_socket}",
            "AccountingStorageEnforce=associations,limits",
            "AccountingStorageTRES=" + ",".join(["gres/gpu", *(f"gres/gpu:{t}" for t in dict.fromkeys(s.gpu_types))]),
            f"PriorityCalcPeriod={PRIORITY_CALC_PERIOD_MIN}"]


def render_gres_conf(paths: Paths, s: ClusterSettings) -> str:
    if s.gpus_per_node <= 0:
        return ""
    files = f"{paths.dev}/nvidia[0-{s.gpus_per_node - 1}]"      # one set of fake devices serves every node
    return "".join(f"NodeName={n} Name=gpu{s.node_gres(i)[1]} File={files}\n" for i, n in enumerate(s.node_names))


def render_cgroup_conf(paths: Paths, version: str = "22.05") -> str:
    """24.05+: ``CgroupPlugin=disabled`` (no cgroup plugin at all; 26.05 still accepts the v1
    trick but warns it is deprecated). Before: cgroup/v1 pinned at an empty private dir."""
    if _at_least(version, (24, 5)):
        return "CgroupPlugin=disabled\n"
    return f"CgroupPlugin=cgroup/v1\nCgroupMountpoint={paths.fakecg}\n"


def _chmod_755(path: Path) -> None:
    os.chmod(path, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)


def make_dirs(paths: Paths, node_names: list[str]) -> None:
    """Create the directory tree, mode 0755 so slurmstepd can run jobs as non-root users
    and munged accepts the socket directory (it demands o+x on it)."""
    for d in paths.all_dirs():
        d.mkdir(parents=True, exist_ok=True)
        _chmod_755(d)
    for name in node_names:
        node_spool = paths.spool / name
        node_spool.mkdir(exist_ok=True)
        _chmod_755(node_spool)


def make_fake_gpus(paths: Paths, count: int) -> None:
    """``<root>/dev/nvidia0..count-1`` as symlinks to ``/dev/null`` (character device)."""
    for i in range(max(count, 0)):
        link = paths.dev / f"nvidia{i}"
        if link.is_symlink() and os.readlink(link) == "/dev/null":
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to("/dev/null")


def write_config(paths: Paths, s: ClusterSettings) -> None:
    """Write slurm.conf, gres.conf, cgroup.conf and the fake GPU devices under ``paths.root``."""
    make_dirs(paths, s.node_names)
    make_fake_gpus(paths, s.gpus_per_node)
    _write(paths.slurm_conf, render_slurm_conf(paths, s))
    _write(paths.gres_conf, render_gres_conf(paths, s))
    _write(paths.cgroup_conf, render_cgroup_conf(paths, s.slurm_version))


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def untraversable_ancestors(path: Path) -> list[Path]:
    """Ancestors of ``path`` (inclusive) that other users cannot enter (no o+x).

    Jobs of non-root users need every directory above the spool dir to be world-executable;
    e.g. pytest's ``tmp_path`` lives under a 0700 ``/tmp/pytest-of-root``.
    """
    bad = []
    for d in [path, *path.parents]:
        try:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                bad.append(d)
        except FileNotFoundError:
            continue
    return bad
