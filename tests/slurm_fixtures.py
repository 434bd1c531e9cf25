"""Pytest fixtures for tests against a real local Slurm cluster, plus the recorder of
``tests/data/slurm/`` outputs.

Use in a test module::

    from tests.slurm_fixtures import slurm_cluster  # noqa: F401
    pytestmark = pytest.mark.slurm

``slurm_cluster`` is module-scoped: a ``LocalCluster(nodes=2, gpus_per_node=4)`` in a fresh
world-traversable temporary directory (jobs of non-root users need o+x on every ancestor,
which pytest's 0700 ``tmp_path`` lacks). It installs Slurm with apt if needed, skips with the
one-line reason on :class:`SlurmUnavailable` (not root, no apt), and always calls ``down()``.

Re-record the parser fixtures (needs root; ~25 s)::

    .venv/bin/python -m tests.slurm_fixtures record tests/data/slurm
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from slurm_shockwave.localcluster import LocalCluster, SlurmUnavailable
from slurm_shockwave.slurmcli import SlurmCLI

JOB_USER = "swjobuser"
#: a job name with shell metacharacters, quotes, unicode and a backslash (no newline)
ODD_NAME = "we\"ird; $(touch /tmp/pwned) `id` 'q' \u00fc|&<> \\ %x #"
ODD_COMMENT = "c;o\"m'm $HOME `id` \u00e9"


def make_root(prefix: str = "shockwave-slurm-") -> Path:
    """A fresh 0755 directory under the system temp dir."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o755)
    return root


def ensure_user(name: str = JOB_USER) -> pwd.struct_passwd:
    """Create a local user (no home dir, /bin/sh) unless it exists; needs root."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True,
                       capture_output=True, stdin=subprocess.DEVNULL, timeout=30)
        return pwd.getpwnam(name)


def wait_for(predicate: Callable[[], object], timeout: float = 20, interval: float = 0.2,
             what: str = "condition") -> object:
    """Poll ``predicate`` until it returns something truthy; AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def job_state(cli: SlurmCLI, job_id: int):
    jobs = cli.squeue_jobs(job_ids=[job_id])
    return jobs[0] if jobs else None


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[LocalCluster]:
    root = make_root()
    cluster = LocalCluster(root=root, nodes=2, gpus_per_node=4)
    try:
        try:
            cluster.ensure_installed()
            cluster.up(timeout=60)
        except SlurmUnavailable as exc:
            pytest.skip(str(exc))
        yield cluster
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------- recorder
def _save(out: Path, name: str, text: str) -> None:
    (out / name).write_text(text)
    print(f"  wrote {name} ({len(text)} bytes)")


def _sbatch(cli: SlurmCLI, workdir: Path, *args: str, user: str | None = None) -> int:
    argv = ["sbatch", "--parsable", "-D", str(workdir), "-o", str(workdir / "out.%j"), *args]
    if user is None:
        return int(cli.run(argv).stdout.strip())
    proc = subprocess.run(argv, env=cli.full_env(), capture_output=True, text=True, user=user,
                          stdin=subprocess.DEVNULL, timeout=30, check=True, cwd=str(workdir))
    return int(proc.stdout.strip())


def record(out: Path) -> None:
    """Drive a fresh 2x4-GPU cluster through the cases the parsers must handle and save the
    raw outputs: idle/busy sinfo, squeue with running/pending/held/odd-named/requeued jobs."""
    out.mkdir(parents=True, exist_ok=True)
    ensure_user()
    root = make_root("shockwave-record-")
    work = root / "work"
    work.mkdir()
    shutil.chown(work, user=JOB_USER)
    os.chmod(work, 0o777)
    with LocalCluster(root=root, nodes=2, gpus_per_node=4) as c:
        cli = c.cli
        _save(out, "squeue_empty.json", cli.run(["squeue", "--json"]).stdout)
        _save(out, "sinfo_idle.json", cli.run(["sinfo", "--json"]).stdout)
        a = _sbatch(cli, work, "-J", "run-a", "--gres=gpu:2", "--requeue", "--comment", "shockwave:a",
                    "--signal=B:USR1@30", "--wrap", "sleep 300")
        b = _sbatch(cli, work, "-J", "run-b-user", "--gres=gpu:2", "--wrap", "sleep 300", user=JOB_USER)
        cj = _sbatch(cli, work, "-J", "run-c-perjob", "--gpus=2", "--no-requeue", "--wrap", "sleep 300")
        wait_for(lambda: all(j.running for j in cli.squeue_jobs(job_ids=[a, b, cj])), what="a,b,c running")
        d = _sbatch(cli, work, "-J", "pend-2node", "-N", "2", "--gres=gpu:4", "--wrap", "sleep 300")
        e = _sbatch(cli, work, "-J", ODD_NAME, "--comment", ODD_COMMENT, "--gres=gpu:1", "--wrap", "true")
        f = _sbatch(cli, work, "-J", "pend-site", "--gres=gpu:3", "--wrap", "sleep 300")
        g = _sbatch(cli, work, "-J", "held-admin", "--gres=gpu:1", "--wrap", "sleep 300")
        h = _sbatch(cli, work, "-J", "held-user", "-H", "--gres=gpu:1", "--wrap", "sleep 300", user=JOB_USER)
        fin = _sbatch(cli, work, "-J", "fails", "--wrap", "exit 3")
        cli.scontrol_update([f], SiteFactor=5000, Nice=-999)
        cli.scontrol_update([d], SiteFactor=-50)
        cli.hold([g, cj])
        wait_for(lambda: job_state(cli, fin).finished, what="failing job to finish")
        time.sleep(0.5)
        _save(out, "squeue_mixed.json", cli.run(["squeue", "--json"]).stdout)
        _save(out, "sinfo_busy.json", cli.run(["sinfo", "--json"]).stdout)
        _save(out, "sprio_site.txt", cli.run(["sprio", "-h", "-o", "%i|%S"]).stdout)
        cli.requeue([a])
        cli.requeue([b], hold=True)
        wait_for(lambda: job_state(cli, a).pending and job_state(cli, b).pending, what="requeued pending")
        _save(out, "squeue_requeued.json", cli.run(["squeue", "--json"]).stdout)
        wait_for(lambda: job_state(cli, a).running, timeout=30, what="requeued job to restart")
        _save(out, "squeue_restarted.json", cli.run(["squeue", "--json"]).stdout)
        cli.cancel([a, b, cj, d, e, f, g, h])
        wait_for(lambda: all(j.finished for j in cli.squeue_jobs()), what="all cancelled")
        _save(out, "squeue_finished.json", cli.run(["squeue", "--json"]).stdout)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "record":
        record(Path(sys.argv[2]))
    else:
        sys.exit("usage: python -m tests.slurm_fixtures record DIR")
