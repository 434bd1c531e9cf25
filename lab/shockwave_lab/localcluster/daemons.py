"""Start and stop munged, slurmctld and slurmd, tracked by pid (never by process name).

Facts relied on (Slurm 22.05.8 / munge 0.5.15, Debian 12, no systemd):

* ``munged --key-file --socket --pid-file --log-file --seed-file`` forks into the background,
  runs as root and writes its pid file; the socket directory must be world-executable
  (``Socket is inaccessible: execute permissions for all required``). ``mungekey --create
  --keyfile=...`` makes a key in milliseconds. munged takes about 2 s to exit on SIGTERM.
* ``slurmctld -f <conf>`` and ``slurmd -f <conf> -N <node>`` daemonize; the launcher process
  exits 0 once the daemon is forked and writes its pid file. Config errors make the launcher
  exit non-zero with the reason on stderr (e.g. ``fatal: The FastSchedule option has been
  removed``).
* slurmctld forks ``slurmscriptd``; slurmd forks one ``slurmstepd`` per job step, which
  detaches, blanks its environ and keeps its cwd in the cluster's log dir. After slurmd and
  slurmctld are killed, those stepds (and the job processes under them) can be left behind,
  so :func:`leftover_pids` finds them by their cwd/command line lying under the cluster root.
* PID 1 in this sandbox does not reap orphans at once, so a zombie counts as dead.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from shockwave_lab.localcluster import signals
from shockwave_lab.localcluster.config import Paths
from shockwave_lab.localcluster.install import find_executable

#: process names of Slurm/munge helpers that may outlive their daemon; used only together
#: with a cwd/command-line check against the cluster root (see :func:`leftover_pids`)
_HELPER_NAMES = {"slurmstepd", "slurmscriptd", "slurmctld", "slurmd", "munged", "slurmdbd", "mariadbd"}


class DaemonError(RuntimeError):
    """A daemon failed to start; the message holds the launcher's stderr or the log tail."""


@dataclass(frozen=True)
class ProcId:
    """A pid plus its kernel start time, so a recycled pid is never mistaken for ours."""

    pid: int
    start_time: int

    def alive(self) -> bool:
        return process_start_time(self.pid) == self.start_time

    def to_json(self) -> dict:
        return {"pid": self.pid, "start_time": self.start_time}

    @classmethod
    def from_json(cls, data: dict) -> "ProcId":
        return cls(int(data["pid"]), int(data["start_time"]))


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (field 3 = state first)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    return raw[raw.rfind(")") + 2:].split()


def process_start_time(pid: int) -> int | None:
    """Start time (clock ticks since boot) of a live, non-zombie ``pid``; None if gone."""
    fields = _stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def read_pid_file(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (FileNotFoundError, OSError):
        return None
    return int(text) if text.isdigit() else None


def identify(pid: int | None) -> ProcId | None:
    if pid is None:
        return None
    start = process_start_time(pid)
    return ProcId(pid, start) if start is not None else None


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        content = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in content[-lines:])


def _launch(argv: list[str], env: dict, startlog: Path, pid_file: Path, log_file: Path,
            timeout: float) -> ProcId:
    """Run a self-daemonizing launcher (in its own session: a signal to the terminal's process group does not
    reach it), wait for it to exit 0 and for its pid file. If anything (a signal included) interrupts this, the
    launcher's process group is killed and a daemon it already forked is stopped by its pid file."""
    try:
        pid_file.unlink()
    except FileNotFoundError:
        pass
    proc = None
    try:
        with open(startlog, "ab") as out:
            with signals.shielded():
                proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, cwd=str(startlog.parent), start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise DaemonError(f"{argv[0]} launcher did not return within {timeout:.0f}s") from None
        if rc != 0:
            raise DaemonError(f"{Path(argv[0]).name} exited rc={rc}: "
                              f"{log_tail(startlog) or log_tail(log_file)}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ident = identify(read_pid_file(pid_file))
            if ident is not None:
                return ident
            time.sleep(0.02)
        raise DaemonError(f"{Path(argv[0]).name} wrote no live pid to {pid_file}: {log_tail(log_file)}")
    except BaseException:
        with signals.shielded():
            if proc is not None:
                signals.kill_group(proc)
                if proc.returncode == 0 or proc.returncode == -signal.SIGKILL:
                    _stop_from_pid_file(pid_file, Path(argv[0]).name)
        raise


def _stop_from_pid_file(pid_file: Path, name: str, wait: float = 1.0) -> None:
    """A daemon forked by an interrupted launcher: stop it by the pid file it writes (removed before the launch,
    so a pid in it is fresh), checked to run ``name``."""
    deadline = time.monotonic() + wait
    while True:
        ident = identify(read_pid_file(pid_file))
        if ident is not None and _comm(ident.pid).startswith(name[:15]):
            terminate([ident])
            return
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@contextmanager
def owned(ident: ProcId) -> Iterator[ProcId]:
    """While a started daemon is made ready (and not yet recorded by the caller): stop it if the block raises."""
    try:
        yield ident
    except BaseException:
        with signals.shielded():
            terminate([ident])
        raise


def _exe(name: str, bin_dir: Path | None = None) -> str:
    """``bin_dir/name`` if given and present (a chroot's wrappers), else the host's ``name``."""
    if bin_dir is not None and os.access(Path(bin_dir) / name, os.X_OK):
        return str(Path(bin_dir) / name)
    path = find_executable(name)
    if path is None:
        raise DaemonError(f"{name} not found (is Slurm/munge installed?)")
    return path


launch, exe = _launch, _exe      # for the other daemons' modules (accounting.py)


def start_munged(paths: Paths, timeout: float = 10, bin_dir: Path | None = None) -> ProcId:
    """Create the key if needed, start munged on ``<root>/munge/munge.sock``, wait for the socket."""
    if not paths.munge_key.exists():
        subprocess.run([_exe("mungekey", bin_dir), "--create", f"--keyfile={paths.munge_key}"],
                       check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout)
    os.chmod(paths.munge_key, 0o600)
    argv = [
        _exe("munged", bin_dir),
        f"--key-file={paths.munge_key}",
        f"--socket={paths.munge_socket}",
        f"--pid-file={paths.pid_file('munged')}",
        f"--log-file={paths.log_file('munged')}",
        f"--seed-file={paths.munge / 'munged.seed'}",
    ]
    ident = _launch(argv, dict(os.environ), paths.munge / "munged.start.log",
                    paths.pid_file("munged"), paths.log_file("munged"), timeout)
    deadline = time.monotonic() + timeout
    with owned(ident):
        while not paths.munge_socket.exists():
            if time.monotonic() > deadline:
                raise DaemonError(f"munged socket did not appear: {log_tail(paths.log_file('munged'))}")
            time.sleep(0.02)
    return ident


def start_slurmctld(paths: Paths, env: dict, timeout: float = 20, bin_dir: Path | None = None) -> ProcId:
    argv = [_exe("slurmctld", bin_dir), "-f", str(paths.slurm_conf)]
    return _launch(argv, env, paths.log / "slurmctld.start.log", paths.pid_file("slurmctld"),
                   paths.log_file("slurmctld"), timeout)


def start_slurmd(paths: Paths, node: str, env: dict, timeout: float = 20,
                 bin_dir: Path | None = None) -> ProcId:
    argv = [_exe("slurmd", bin_dir), "-f", str(paths.slurm_conf), "-N", node]
    return _launch(argv, env, paths.log / f"slurmd.{node}.start.log",
                   paths.pid_file(f"slurmd.{node}"), paths.log_file(f"slurmd.{node}"), timeout)


def wait_ctld_ready(env: dict, timeout: float, bin_dir: Path | None = None) -> None:
    """Poll ``scontrol ping`` until the controller answers ``UP``."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        proc = subprocess.run([_exe("scontrol", bin_dir), "ping"], env=env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=10, check=False)
        last = (proc.stdout + proc.stderr).strip()
        if proc.returncode == 0 and "UP" in proc.stdout:
            return
        time.sleep(0.1)
    raise DaemonError(f"slurmctld did not answer ping within {timeout:.0f}s: {last}")


def stop_child(proc: "subprocess.Popen", grace: float = 60.0) -> None:
    """Stop a child this process started (its Popen): SIGTERM, SIGKILL after ``grace`` s; reaped either way.
    A signal meanwhile is held back until it is stopped (:func:`.signals.shielded`)."""
    with signals.shielded():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def terminate(procs: list[ProcId], grace: float = 5.0, kill_wait: float = 5.0) -> list[ProcId]:
    """SIGTERM all live ``procs`` at once, SIGKILL what is left after ``grace`` s.

    Only a process whose pid *and* start time match is signalled. Returns the processes
    still alive at the end (normally none).
    """
    live = [p for p in procs if p.alive()]
    for p in live:
        _signal(p, signal.SIGTERM)
    live = _wait_gone(live, grace)
    for p in live:
        _signal(p, signal.SIGKILL)
    return _wait_gone(live, kill_wait)


def _signal(p: ProcId, sig: int) -> None:
    if not p.alive():
        return
    try:
        os.kill(p.pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(procs: list[ProcId], timeout: float) -> list[ProcId]:
    deadline = time.monotonic() + timeout
    live = [p for p in procs if p.alive()]
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        live = [p for p in live if p.alive()]
    return live


def _all_pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _belongs_to_root(pid: int, root: str, also: tuple[str, ...] = ()) -> bool:
    """A Slurm/munge helper whose cwd or command line lies under ``root`` (or whose cwd lies
    under one of ``also``: the cluster dir as seen through a chroot's bind mount)."""
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        if name not in _HELPER_NAMES and not name.startswith("slurmstepd"):
            return False
        cwd = os.readlink(f"/proc/{pid}/cwd")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    if (_under(cwd, root) or any(_under(cwd, a) for a in also)
            or (root.rstrip("/") + "/") in cmdline):
        return True
    try:       # a daemon started with our SLURM_CONF (slurmdbd's command line names no path)
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    prefix = f"SLURM_CONF={root.rstrip('/')}/".encode()
    return any(e.startswith(prefix) for e in env)


def _job_of_cluster(pid: int, conf_entry: bytes) -> bool:
    """A job process of the cluster: its environment (exported by sbatch) holds our SLURM_CONF and a
    SLURM_JOB_ID. Finds job processes orphaned when their slurmstepd was stopped (cwd may be anywhere)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    # SLURM_JOB_ID too: a user's shell that merely exported our SLURM_CONF is not a job
    return conf_entry in env and any(e.startswith(b"SLURM_JOB_ID=") for e in env)


def leftover_pids(root: Path, known: list[ProcId], also: tuple[str, ...] = ()) -> list[ProcId]:
    """Processes left behind by this cluster's daemons: the daemons themselves, helpers
    (slurmstepd, slurmscriptd) whose cwd/command line lies under ``root``, and every
    descendant of those (the job processes). The caller's own process tree is excluded."""
    root_s = str(Path(root).resolve())
    pids = _all_pids()
    parents = {pid: parent_pid(pid) for pid in pids}
    seeds = {p.pid for p in known if p.alive()}
    seeds |= {pid for pid in pids if _belongs_to_root(pid, root_s, also)}
    conf_entry = f"SLURM_CONF={root_s}/etc/slurm.conf".encode()
    seeds |= {pid for pid in pids if pid not in seeds and _job_of_cluster(pid, conf_entry)}
    protected = _own_ancestry()
    found: set[int] = set()
    frontier = seeds - protected
    while frontier:
        found |= frontier
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found - protected
    return [ident for ident in (identify(pid) for pid in sorted(found)) if ident is not None]


def sweep(root: Path, known: list[ProcId], also: tuple[str, ...] = (), grace: float = 5.0) -> list[ProcId]:
    """Stop ``known`` (SIGTERM, SIGKILL after ``grace`` s), then whatever :func:`leftover_pids` finds, looking
    again until a pass finds nothing new (a daemon forked while the last pass ran). Returns the processes still
    alive (normally none)."""
    remaining = terminate(known, grace=grace, kill_wait=5)
    for _ in range(4):
        found = leftover_pids(root, remaining, also)
        if not found:
            break
        remaining = terminate(found, grace=min(grace, 2.0), kill_wait=5)
    return remaining


def _own_ancestry() -> set[int]:
    chain, pid = set(), os.getpid()
    while pid and pid not in chain:
        chain.add(pid)
        pid = parent_pid(pid) or 0
    return chain
