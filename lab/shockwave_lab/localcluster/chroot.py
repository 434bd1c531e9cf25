"""Another Slurm version on this machine: a Debian root built by debootstrap, run by chroot.

Debian ships three Slurm versions: 22.05 (bookworm), 24.11 (trixie) and 26.05 (forky). For a
version the host does not have, :func:`ensure_root` builds (once, cached under ``roots_dir``)

    debootstrap --variant=minbase --include=slurmctld,slurmd,slurm-client,slurmdbd,munge,python3 \\
        <suite> <roots_dir>/<suite> http://deb.debian.org/debian

and :class:`ChrootRoot` runs munged, slurmctld and the slurmd's inside it. Facts relied on
(checked on a bookworm host, 2 cores):

* slurmdbd (accounting; the root uses the host's MariaDB over 127.0.0.1) is in a new root's packages; a root
  built without it gets it with ``apt-get install slurmdbd`` inside it (5 packages, 500 kB; from the root's
  package lists, updated only if that fails), in ``ensure_built``.
* Building a root takes about 1-2 minutes (measured: docs/slurm-versions.md);
  bookworm's debootstrap has no ``forky`` script, the ``sid`` script builds it.
* The cluster directory is bind-mounted into the root at the same path, so every path in
  slurm.conf, pid files and logs means the same thing inside and outside; ``/proc``, ``/sys``
  and ``/dev`` are plain (non-recursive) binds. Loopback only, no network namespace.
* slurmd >= 23.x dies (``Unable to bind listen port ... Address family not supported``) unless
  the root resolves this machine's hostname: ``127.0.0.1 <hostname>`` goes into its /etc/hosts.
* Wrappers in ``<cluster>/bin`` (``squeue``, ``scontrol``, ``sbatch``, daemons, munge tools)
  run the root's binary through ``chroot``; inside the root (a job's PATH) they run it directly.
  Through a chroot only root (or a user that exists in the root) can submit.
* Several clusters may share one root: ``/proc``, ``/sys``, ``/dev`` are mounted by the first
  and unmounted by the last (a lock file next to the root serialises this).
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from shockwave_lab.localcluster.root_packages import install_in_root
from shockwave_lab.localcluster.signals import run_group

log = logging.getLogger(__name__)

#: Slurm version (major.minor) -> Debian suite that ships it
SUITES = {"22.05": "bookworm", "24.11": "trixie", "26.05": "forky"}
DEFAULT_ROOTS_DIR = "/var/cache/shockwave/roots"
MIRROR = "http://deb.debian.org/debian"
INCLUDE = "slurmctld,slurmd,slurm-client,slurmdbd,munge,python3"
#: commands wrapped in <cluster>/bin
WRAPPED = ("squeue", "sinfo", "sprio", "scontrol", "sbatch", "scancel", "srun", "salloc", "sacct",
           "sstat", "sdiag", "sshare", "sattach", "sbcast", "sacctmgr", "slurmctld", "slurmd", "slurmdbd", "munged",
           "mungekey", "munge", "unmunge")
_SYSTEM_MOUNTS = ("proc", "sys", "dev")


class RootError(RuntimeError):
    """The root cannot be built or mounted; one-line message."""


def major_minor(version: str) -> str:
    """``24.11.5`` -> ``24.11``."""
    parts = version.strip().split(".")
    return ".".join(parts[:2])


def host_version() -> str | None:
    """Major.minor of the host's installed Slurm (``slurmctld -V``), or None."""
    exe = shutil.which("slurmctld") or ("/usr/sbin/slurmctld" if os.path.exists("/usr/sbin/slurmctld") else None)
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=10,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.split()
    return major_minor(words[1]) if len(words) >= 2 else None


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in major_minor(version).split(".") if p.isdigit())


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def host_python_binds(python: str) -> list[str]:
    """Host paths a root needs (read-only, same path) to run ``python`` (a venv's): its real
    interpreter, its standard library and the venv."""
    import sysconfig
    real = os.path.realpath(python)
    venv = Path(python).absolute().parent.parent
    return [real, sysconfig.get_paths()["stdlib"], str(venv)]


def _mounts() -> list[str]:
    """Mount points currently mounted (from /proc/self/mountinfo, octal escapes undone)."""
    out = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4]
            out.append(point.encode().decode("unicode_escape"))
    return out


def _is_mounted(path: Path) -> bool:
    return str(path) in _mounts()


class ChrootRoot:
    """A Debian root holding one Slurm version (``<roots_dir>/<suite>``)."""

    def __init__(self, version: str, roots_dir: str | os.PathLike = DEFAULT_ROOTS_DIR):
        version = major_minor(version)
        if version not in SUITES:
            raise RootError(f"unsupported Slurm version {version!r} (supported: {', '.join(SUITES)})")
        self.version = version
        self.suite = SUITES[version]
        self.roots_dir = Path(roots_dir).absolute()
        self.path = self.roots_dir / self.suite
        self.lock_file = self.roots_dir / f".{self.suite}.lock"

    # ------------------------------------------------------------------ building
    def built(self) -> bool:
        return (self.path / "usr/sbin/slurmctld").exists() and (self.path / "usr/bin/squeue").exists()

    def has_slurmdbd(self) -> bool:
        return (self.path / "usr/sbin/slurmdbd").exists()

    def ensure_built(self) -> float:
        """Build the root unless it exists, with slurmdbd; returns the seconds spent (0.0 if cached)."""
        with _locked(self.lock_file):
            t0 = time.monotonic()
            if not self.built():
                self._debootstrap()
            if not self.has_slurmdbd():
                if os.geteuid() != 0:
                    raise RootError("adding slurmdbd to a Slurm root needs root (chroot)")
                failed = install_in_root(self.path, ("slurmdbd",), self.has_slurmdbd)
                if failed:
                    raise RootError(failed)
            self._fix_hosts()
            return 0.0 if time.monotonic() - t0 < 0.5 else time.monotonic() - t0

    def _debootstrap(self) -> None:
        if os.geteuid() != 0:
            raise RootError("building a Slurm root needs root (debootstrap, chroot)")
        exe = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
        if not os.path.exists(exe):
            log.info("installing debootstrap with apt")
            apt_env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            for update in (False, True):      # a fresh machine may need `apt-get update` first
                if update:
                    subprocess.run(["apt-get", "update", "-qq"], capture_output=True,
                                   stdin=subprocess.DEVNULL, timeout=600, env=apt_env)
                if subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "debootstrap"],
                                  capture_output=True, stdin=subprocess.DEVNULL, timeout=600,
                                  env=apt_env).returncode == 0:
                    break
            if not os.path.exists(exe):
                raise RootError("debootstrap is missing and `apt-get install debootstrap` failed")
        script = Path("/usr/share/debootstrap/scripts") / self.suite
        if not script.exists():            # e.g. forky on bookworm's debootstrap
            script = script.with_name("sid")
        tmp = self.roots_dir / f"{self.suite}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        logfile = self.roots_dir / f"debootstrap-{self.suite}.log"
        log.info("building a %s root (Slurm %s) in %s", self.suite, self.version, self.path)
        with open(logfile, "w") as out:           # its own process group, killed whole if interrupted
            rc = run_group([exe, "--variant=minbase", f"--include={INCLUDE}", self.suite, str(tmp),
                            MIRROR, str(script)], stdout=out, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=3600).returncode
        if rc != 0:
            tail = " | ".join(logfile.read_text(errors="replace").strip().splitlines()[-3:])
            raise RootError(f"debootstrap {self.suite} failed (rc={rc}, log {logfile}): {tail}")
        os.replace(tmp, self.path)

    def _fix_hosts(self) -> None:
        hosts = self.path / "etc/hosts"
        name = socket.gethostname()
        text = hosts.read_text() if hosts.exists() else ""
        if not any(name in line.split()[1:] for line in text.splitlines() if line and not line.startswith("#")):
            hosts.write_text(text + ("" if text.endswith("\n") or not text else "\n") + f"127.0.0.1 {name}\n")

    def slurm_version(self) -> str:
        """Full version of the root's Slurm, e.g. ``24.11.5``."""
        out = subprocess.run(["chroot", str(self.path), "/usr/sbin/slurmctld", "-V"], capture_output=True,
                             text=True, timeout=30, stdin=subprocess.DEVNULL).stdout.split()
        if len(out) < 2:
            raise RootError(f"cannot run slurmctld -V in {self.path}")
        return out[1]

    # ------------------------------------------------------------------ mounts
    @property
    def shared_file(self) -> Path:
        """Shared extra binds (mounted by some cluster, unmounted with the system mounts)."""
        return self.roots_dir / f".{self.suite}.shared.json"

    def _shared(self) -> list[dict]:
        try:
            return json.loads(self.shared_file.read_text())
        except (FileNotFoundError, ValueError):
            return []

    def _mount_point(self, source: Path) -> tuple[Path, list[str]]:
        """The path of ``source`` in the root, created (dir or empty file) if missing; returns it
        and what was created (leaf first, to remove after unmounting)."""
        target = self.path / str(source).lstrip("/")
        made: list[str] = []
        d = target
        while not d.exists():
            made.append(str(d))
            d = d.parent
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
        return target, made

    def mount(self, cluster_dir: Path, binds: tuple[tuple[str, bool], ...] = ()) -> None:
        """Mount /proc, /sys, /dev, then each ``(host path, read_only)`` of ``binds``, then
        ``cluster_dir``, each at the same path in the root. Read-only binds (e.g. a Python) are
        shared by every cluster of this root; read-write ones belong to this cluster."""
        cluster_dir = Path(cluster_dir).absolute()
        with _locked(self.lock_file):
            self._fix_hosts()
            for name in _SYSTEM_MOUNTS:
                target = self.path / name
                if not _is_mounted(target):
                    args = ["-t", "proc", "proc"] if name == "proc" else ["--bind", f"/{name}"]
                    self._run_mount([*args, str(target)])
            shared = self._shared()
            own_file = cluster_dir / ".chroot-binds.json"
            own = json.loads(own_file.read_text()) if own_file.exists() else []
            for source, read_only in binds:
                src = Path(source).absolute()
                target, made = self._mount_point(src)
                if _is_mounted(target):
                    continue
                self._run_mount(["--bind", str(src), str(target)])
                if read_only:
                    self._run_mount(["-o", "remount,bind,ro", str(target)])
                    shared.append({"target": str(target), "made": made})
                    self.shared_file.write_text(json.dumps(shared))
                else:
                    own.append({"target": str(target), "made": made})
                    own_file.write_text(json.dumps(own))
            target, made = self._mount_point(cluster_dir)
            if not _is_mounted(target):
                (cluster_dir / ".chroot-mkdirs.json").write_text(json.dumps(made))
                self._run_mount(["--bind", str(cluster_dir), str(target)])

    def unmount(self, cluster_dir: Path) -> list[str]:
        """Undo :meth:`mount` for ``cluster_dir``; the shared binds and system mounts go when no
        cluster is left. Returns the mount points that could not be unmounted (normally none)."""
        cluster_dir = Path(cluster_dir).absolute()
        failed: list[str] = []
        with _locked(self.lock_file):
            target = self.path / str(cluster_dir).lstrip("/")
            if _is_mounted(target) and not self._umount(target):
                failed.append(str(target))
            made_file = cluster_dir / ".chroot-mkdirs.json"
            if not failed and made_file.exists():
                self._remove_made(json.loads(made_file.read_text()))
                made_file.unlink()
            own_file = cluster_dir / ".chroot-binds.json"
            own = json.loads(own_file.read_text()) if own_file.exists() else []
            for bind in reversed(own):
                if _is_mounted(Path(bind["target"])) and not self._umount(Path(bind["target"])):
                    failed.append(bind["target"])
                else:
                    self._remove_made(bind["made"])
            if not failed:
                own_file.unlink(missing_ok=True)
            prefix = str(self.path) + "/"
            shared = self._shared()
            keep = {str(self.path / n) for n in _SYSTEM_MOUNTS} | {b["target"] for b in shared}
            if [m for m in _mounts() if m.startswith(prefix) and m not in keep]:
                return failed                      # another cluster still runs in this root
            for bind in reversed(shared):
                if _is_mounted(Path(bind["target"])) and not self._umount(Path(bind["target"])):
                    failed.append(bind["target"])
                else:
                    self._remove_made(bind["made"])
            if not failed:
                self.shared_file.unlink(missing_ok=True)
            for name in reversed(_SYSTEM_MOUNTS):
                t = self.path / name
                if _is_mounted(t) and not self._umount(t):
                    failed.append(str(t))
        return failed

    def _remove_made(self, made: list[str]) -> None:
        """Remove the empty mount points we created inside the root (leaf first)."""
        for d in made:
            if not d.startswith(str(self.path) + "/"):
                continue
            try:
                if os.path.isdir(d) and not os.path.islink(d):
                    os.rmdir(d)
                elif os.path.isfile(d) and os.path.getsize(d) == 0:
                    os.unlink(d)
            except OSError:
                pass

    @staticmethod
    def _run_mount(args: list[str]) -> None:
        proc = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RootError(f"mount {' '.join(args)} failed: {proc.stderr.strip()}")

    @staticmethod
    def _umount(target: Path) -> bool:
        for _ in range(20):
            if subprocess.run(["umount", str(target)], capture_output=True, timeout=30,
                              stdin=subprocess.DEVNULL).returncode == 0:
                return True
            time.sleep(0.25)
        log.warning("could not unmount %s (busy)", target)
        return False

    # ------------------------------------------------------------------ wrappers
    def write_wrappers(self, bin_dir: Path) -> None:
        """``bin_dir/<cmd>`` for every command in :data:`WRAPPED` that the root has."""
        bin_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(bin_dir, 0o755)
        for cmd in WRAPPED:
            inner = next((f"{d}/{cmd}" for d in ("/usr/bin", "/usr/sbin")
                          if os.access(self.path / d.lstrip("/") / cmd, os.X_OK)), None)
            if inner is None:
                continue
            text = (
                "#!/bin/sh\n"
                f"# {cmd} of Slurm {self.version} in the root {self.path} (written by slurm-shockwave).\n"
                "# Outside the root: run it there, in the same directory if the root has it;\n"
                "# inside (this dir is bind-mounted there too, e.g. a job's PATH): run it directly.\n"
                f"if [ -x '{self.path}{inner}' ]; then\n"
                f"  d=$PWD; [ -d '{self.path}'\"$d\" ] || d=/\n"
                f"  exec chroot '{self.path}' /usr/bin/env -C \"$d\" {inner} \"$@\"\n"
                "fi\n"
                f"exec {inner} \"$@\"\n"
            )
            path = bin_dir / cmd
            tmp = path.with_name(cmd + ".tmp")
            tmp.write_text(text)
            os.chmod(tmp, 0o755)
            os.replace(tmp, path)

    @staticmethod
    def write_host_python(bin_dir: Path, python: str) -> Path:
        """``bin_dir/host-python``: the host's ``python`` (a venv's, e.g. with torch) usable inside the
        root, given the binds of :func:`host_python_binds`; ``exec -a`` keeps the venv active."""
        real = os.path.realpath(python)
        path = bin_dir / "host-python"
        path.write_text("#!/bin/bash\n# the host's Python, inside or outside the root (written by slurm-shockwave)\n"
                        f"exec -a '{python}' '{real}' \"$@\"\n")
        os.chmod(path, 0o755)
        return path

    def process_in_root(self, pid: int) -> bool:
        try:
            return os.readlink(f"/proc/{pid}/root") == str(self.path)
        except OSError:
            return False
