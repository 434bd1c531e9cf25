"""Real accounting in tests (issue 24): clusters with MariaDB + slurmdbd and two accounts at shares 3:1, jobs
submitted as their users, and the recorder of ``tests/data/slurm/<version>/sshare_*``.

Re-record one version (root; ~90 s: it waits for Slurm's usage tick)::

    .venv/bin/python -m tests.share_fixtures record tests/data/slurm/24.11 24.11
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from shockwave_lab.localcluster import LocalCluster
from shockwave_lab.localcluster.accounting import ensure_users
from slurm_shockwave.slurm.shares import JSON_ARGV, TEXT_ARGV, parse_sshare_text
from tests.slurm_fixtures import ACCOUNTS, USERS, make_cluster, make_root, wait_for


def accounting_cluster(root: Path, version: str | None = None, **kwargs) -> LocalCluster:
    """``make_cluster`` with real accounting and the accounts and users above."""
    kwargs.setdefault("accounts", ACCOUNTS)
    kwargs.setdefault("users", USERS)
    return make_cluster(root, version, **kwargs)


def workdir(root: Path) -> Path:
    """A directory every user's jobs can write their output to."""
    work = Path(root) / "work"
    work.mkdir(exist_ok=True)
    work.chmod(0o1777)
    return work


def sbatch_as(cluster: LocalCluster, user: str, work: Path, *args: str) -> int:
    """Submit as ``user`` (on the host's Slurm or in the cluster's Debian root); the job id."""
    argv = cluster.as_user(user, ["sbatch", "--parsable", "-D", str(work), "-o", str(work / "out.%j"), *args],
                           cwd=str(work))
    r = subprocess.run(argv, env=cluster.full_env(), capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, cwd=str(work))
    if r.returncode != 0:
        raise AssertionError(f"sbatch as {user} failed: {r.stderr.strip() or r.stdout.strip()}")
    return int(r.stdout.strip().split(";")[0])


def sacctmgr(cluster: LocalCluster, *args: str) -> str:
    r = cluster.run(["sacctmgr", "-i", *args])
    if r.returncode != 0:
        raise AssertionError(f"sacctmgr {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def _save(out: Path, name: str, text: str) -> None:
    (out / name).write_text(text)
    print(f"  wrote {name} ({len(text)} bytes)")


def record(out: Path, version: str | None = None) -> None:
    """teama (3) with sw-ann, teamb (1) with sw-bob and sw-ann, and labc (2) under teama with sw-carl: sshare before
    any job (``sshare_idle``) and once every user's job has ended and Slurm's next usage tick has passed
    (``sshare_used``), as text (``.txt``, every version) and JSON (``.json``, 24.11 / 26.05)."""
    out.mkdir(parents=True, exist_ok=True)
    root = make_root("shockwave-record-shares-")
    with accounting_cluster(root, version, nodes=1, gpus_per_node=4) as c:
        ensure_users(["sw-carl"], c.chroot.path if c.chroot is not None else None)
        sacctmgr(c, "add", "account", "labc", "parent=teama", "fairshare=2")
        sacctmgr(c, "add", "user", "sw-carl", "account=labc")
        sacctmgr(c, "add", "user", "sw-ann", "account=teamb")
        newer = not c.slurm_version.startswith("22.")
        _save(out, "sshare_idle.txt", c.cli.run(list(TEXT_ARGV)).stdout)
        if newer:
            _save(out, "sshare_idle.json", c.cli.run(list(JSON_ARGV)).stdout)
        work = workdir(root)
        jobs = [sbatch_as(c, "sw-ann", work, "--gres=gpu:2", "--wrap", "sleep 6"),
                sbatch_as(c, "sw-bob", work, "--gres=gpu:1", "--wrap", "sleep 6"),
                sbatch_as(c, "sw-carl", work, "--gres=gpu:1", "--wrap", "sleep 3")]
        wait_for(lambda: all(j.finished for j in c.cli.squeue_jobs(job_ids=jobs)), timeout=60, what="jobs done")

        def ticked():
            rows = parse_sshare_text(c.cli.run(list(TEXT_ARGV)).stdout)
            users = [r for r in rows if r.user.startswith("sw-") and r.raw_usage > 0]
            return len(users) == 3 and all(r.effective_usage for r in users)
        wait_for(ticked, timeout=150, interval=2, what="usage of every user after a PriorityCalcPeriod tick")
        _save(out, "sshare_used.txt", c.cli.run(list(TEXT_ARGV)).stdout)
        if newer:
            _save(out, "sshare_used.json", c.cli.run(list(JSON_ARGV)).stdout)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "record":
        t0 = time.monotonic()
        record(Path(sys.argv[2]), sys.argv[3] if len(sys.argv) == 4 else None)
        print(f"recorded in {time.monotonic() - t0:.0f} s (load {os.getloadavg()[0]:.1f})")
    else:
        sys.exit("usage: python -m tests.share_fixtures record DIR [VERSION]")
