"""Install Slurm and munge from the distribution's packages (Debian/Ubuntu, apt).

Facts relied on (checked on Debian 12 "bookworm"):

* ``apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge`` installs
  Slurm 22.05.8 and munge 0.5.15: 8 packages, about 4 MB. Without
  ``--no-install-recommends`` it pulls ~45 packages (hdf5, rrd, ipmi, rocm-smi plugins), none
  of them needed.
* The packages' postinst scripts do not start any daemon when there is no init system
  (``policy-rc.d denied execution of start``); munge's postinst creates ``/etc/munge/munge.key``,
  which the local cluster does not use (it makes its own key).
* ``apt-get update`` must run once before the first install on a fresh machine.
* Accounting (``LocalCluster(accounting=True)``) adds ``slurmdbd`` and ``mariadb-server`` (about 20 packages,
  190 MB; no daemon is started by their postinst where ``policy-rc.d`` forbids it, as in containers).
"""
from __future__ import annotations

import os
import shutil
import subprocess

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")

#: executable -> package that provides it; all must be present for the cluster to start
REQUIRED_EXECUTABLES = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sbatch": "slurm-client",
    "squeue": "slurm-client",
    "sinfo": "slurm-client",
    "scontrol": "slurm-client",
    "scancel": "slurm-client",
    "munged": "munge",
    "mungekey": "munge",
}

#: the same for real accounting (MariaDB + slurmdbd; sacctmgr is in slurm-client)
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server")
ACCOUNTING_EXECUTABLES = {"slurmdbd": "slurmdbd", "sacctmgr": "slurm-client", "mariadbd": "mariadb-server",
                          "mariadb-install-db": "mariadb-server", "mariadb": "mariadb-server"}

_SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")


class SlurmUnavailable(RuntimeError):
    """Slurm cannot be installed or started here; ``str(exc)`` is a one-line reason."""

    def __init__(self, reason: str):
        super().__init__(" ".join(str(reason).split()))


def find_executable(name: str) -> str | None:
    """Path of ``name`` on PATH or in the sbin directories (non-login root shells may lack them)."""
    found = shutil.which(name)
    if found:
        return found
    for d in _SBIN_DIRS:
        cand = os.path.join(d, name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def missing_packages(accounting: bool = False) -> list[str]:
    """Packages whose executables are not found, in install order, without duplicates (``accounting``: with
    MariaDB and slurmdbd)."""
    missing: list[str] = []
    needed = {**REQUIRED_EXECUTABLES, **(ACCOUNTING_EXECUTABLES if accounting else {})}
    for exe, pkg in needed.items():
        if find_executable(exe) is None and pkg not in missing:
            missing.append(pkg)
    return missing


def _tail(text: str, limit: int = 300) -> str:
    one_line = " | ".join(line.strip() for line in (text or "").strip().splitlines() if line.strip())
    return one_line[-limit:]


def _apt(args: list[str], timeout: float) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        proc = subprocess.run(
            ["apt-get", *args], env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SlurmUnavailable(f"apt-get {args[0]} timed out after {timeout:.0f}s") from exc
    except OSError as exc:
        raise SlurmUnavailable(f"apt-get {args[0]} could not run: {exc}") from exc
    if proc.returncode != 0:
        raise SlurmUnavailable(f"apt-get {args[0]} failed (rc={proc.returncode}): {_tail(proc.stderr)}")


def ensure_installed(timeout: float = 600, accounting: bool = False) -> list[str]:
    """Install the missing Slurm/munge packages with apt; return the packages installed.

    Raises :class:`SlurmUnavailable` when something is missing and it cannot be installed:
    not root, no ``apt-get``, or apt failing. Runs ``apt-get update`` once before installing.
    """
    missing = missing_packages(accounting)
    if not missing:
        return []
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"Slurm packages missing ({', '.join(missing)}) and not root to install them")
    if shutil.which("apt-get") is None:
        raise SlurmUnavailable(f"Slurm packages missing ({', '.join(missing)}) and no apt-get to install them")
    _apt(["update", "-q"], timeout)
    _apt(["install", "-y", "-q", "--no-install-recommends", *PACKAGES,
          *(ACCOUNTING_PACKAGES if accounting else ())], timeout)
    still = missing_packages(accounting)
    if still:
        raise SlurmUnavailable(f"apt-get install finished but still missing: {', '.join(still)}")
    return missing
