"""Pytest fixtures for tests against a real local Slurm cluster, plus the recorder of
``tests/data/slurm/`` outputs.

Use in a test module::

    from tests.slurm_fixtures import slurm_cluster  # noqa: F401
    pytestmark = pytest.mark.slurm

``slurm_cluster`` is module-scoped: a ``LocalCluster(nodes=2, gpus_per_node=4)`` in a fresh
world-traversable temporary directory (jobs of non-root users need o+x on every ancestor,
which pytest's 0700 ``tmp_path`` lacks). It installs Slurm with apt if needed, skips with the
one-line reason on :class:`SlurmUnavailable` (not root, no apt), and always calls ``down()``.

Slurm versions: ``SHOCKWAVE_TEST_SLURM="22.05,24.11,26.05"`` runs every test that uses
``slurm_cluster`` once per version (default: the host's Slurm only). A version the host does
not have runs from a Debian root (built once, ~45 s, cached under ``SHOCKWAVE_ROOTS_DIR``,
default ``/var/cache/shockwave/roots``); through that chroot only root can submit, so tests
check ``slurm_cluster.bin_dir`` (None on the host's Slurm) before submitting as another user.

Re-record the parser fixtures of one version (needs root; ~25 s)::

    .venv/bin/python -m tests.slurm_fixtures record tests/data/slurm/24.11 24.11
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from shockwave_lab.localcluster import LocalCluster, SlurmUnavailable
from shockwave_lab.localcluster.accounting import ensure_users
from shockwave_lab.localcluster.chroot import DEFAULT_ROOTS_DIR, SUITES, ChrootRoot, host_version
from slurm_shockwave.slurm import SlurmCLI

JOB_USER = "swjobuser"
#: the accounts (RawShares 3:1) and users of the clusters with accounting (tests/share_fixtures.py)
ACCOUNTS = {"teama": 3, "teamb": 1}
USERS = {"sw-ann": "teama", "sw-bob": "teamb"}
#: a job name with shell metacharacters, quotes, unicode and a backslash (no newline)
ODD_NAME = "we\"ird; $(touch /tmp/pwned) `id` 'q' \u00fc|&<> \\ %x #"
ODD_COMMENT = "c;o\"m'm $HOME `id` \u00e9"


_ROOTS: list[Path] = []
_KEPT: set[Path] = set()


def make_root(prefix: str = "shockwave-slurm-") -> Path:
    """A fresh 0755 directory under the system temp dir, removed at the end of the test session
    (``SHOCKWAVE_KEEP_TEST_ROOTS=1`` keeps them for a post-mortem)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o755)
    _ROOTS.append(root)
    return root


def keep_root(root: Path) -> str:
    """Keep this test root after the session (a failed run's work directory, to read the failure); returns a
    line saying where it is."""
    root = Path(root)
    if root in _ROOTS:
        _ROOTS.remove(root)
    _KEPT.add(root)
    return f"kept for reading the failure: {root}"


def is_kept(root: Path) -> bool:
    return Path(root) in _KEPT


def _mount_points() -> list[str]:
    try:
        return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    except OSError:
        return []


def remove_test_roots(roots: list[Path] = _ROOTS) -> list[Path]:
    """Remove these directories (default: all that `make_root` made; the list is emptied); a directory with
    anything still mounted under it is left alone (never delete through a bind mount).  Returns those left."""
    left = []
    mounts = _mount_points()
    while roots:
        root = roots.pop()
        if any(m == str(root) or m.startswith(str(root) + "/") for m in mounts):
            left.append(root)
            continue
        shutil.rmtree(root, ignore_errors=True)
    return left


@pytest.fixture(scope="session", autouse=True)
def _test_roots_removed_at_the_end():
    yield
    if os.environ.get("SHOCKWAVE_KEEP_TEST_ROOTS") != "1":
        left = remove_test_roots()
        if left:
            print(f"\nleft (something is still mounted under them): {', '.join(map(str, left))}")


def ensure_user(name: str = JOB_USER) -> pwd.struct_passwd:
    """Create a local user (no home dir, /bin/sh) unless it exists; needs root (another worker may at once)."""
    return ensure_users([name])[name]


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


#: Slurm 24.11 refuses a restart whose credential is created in the same second as the requeue revoked the
#: old one ("Killing non-startable batch JobId=N: Job credential revoked": the job ends FAILED, 3 of 6 tries
#: here when StartTime=now followed PENDING at once; 0 of 8 on 22.05 and 26.05). Wait this long after a
#: requeued job is PENDING before ``StartTime=now`` / release.
CRED_REVOKE_GAP = 1.1


def settle_after_requeue() -> None:
    time.sleep(CRED_REVOKE_GAP)


def job_state(cli: SlurmCLI, job_id: int):
    jobs = cli.squeue_jobs(job_ids=[job_id])
    return jobs[0] if jobs else None


def slurm_test_versions() -> list[str]:
    """Slurm versions to test on: ``SHOCKWAVE_TEST_SLURM`` (comma-separated), default the host's."""
    raw = os.environ.get("SHOCKWAVE_TEST_SLURM", "").strip()
    if not raw:
        return [host_version() or "22.05"]
    versions = [v.strip() for v in raw.split(",") if v.strip()]
    bad = [v for v in versions if v not in SUITES]
    if bad:
        raise pytest.UsageError(f"SHOCKWAVE_TEST_SLURM: unsupported version(s) {bad}; use {', '.join(SUITES)}")
    return versions



ROOTS_DIR = os.environ.get("SHOCKWAVE_ROOTS_DIR", DEFAULT_ROOTS_DIR)


def version_test_versions() -> list[str]:
    """Versions for tests/test_slurm_versions.py: ``SHOCKWAVE_TEST_SLURM`` if set, else the host's
    plus every version whose root is already built under ``ROOTS_DIR`` (``.ci/setup`` builds them;
    outside CI a version that is not built is not collected at all; under CI=true every version is)."""
    if os.environ.get("SHOCKWAVE_TEST_SLURM", "").strip():
        return slurm_test_versions()
    host = host_version() or "22.05"
    if os.environ.get("CI", "").lower() == "true":      # .ci/setup built them; a missing one fails the run
        return [host, *[v for v in SUITES if v != host]]
    built = [v for v in SUITES if v != host and ChrootRoot(v, ROOTS_DIR).built()]
    return [host, *built]


def make_cluster(root: Path, version: str | None = None, **kwargs) -> LocalCluster:
    """A LocalCluster of ``version`` (default: the host's) with the test roots dir."""
    kwargs.setdefault("nodes", 2)
    kwargs.setdefault("gpus_per_node", 4)
    return LocalCluster(root=root, slurm=version, roots_dir=ROOTS_DIR, **kwargs)


def cluster_up(prefix: str = "shockwave-slurm-", version: str | None = None, **kwargs) -> Iterator[LocalCluster]:
    """Body of a module-scoped cluster fixture (``yield from cluster_up(...)``): a LocalCluster of ``version``
    (``make_cluster`` arguments) started in a fresh root, skipped when Slurm is unavailable (a failure under
    CI=true, see conftest.py), stopped by pid and removed afterwards."""
    root = make_root(prefix)
    cluster = make_cluster(root, version, **kwargs)
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


@pytest.fixture(scope="module", params=slurm_test_versions(), ids=lambda v: f"slurm{v}")
def slurm_cluster(request) -> Iterator[LocalCluster]:
    yield from cluster_up(version=request.param)


@pytest.fixture(scope="module", params=version_test_versions(), ids=lambda v: f"slurm{v}")
def versions_cluster(request) -> Iterator[LocalCluster]:
    """Like ``slurm_cluster``, over :func:`version_test_versions` (all built versions by default), with real
    accounting (MariaDB + slurmdbd): accounts ``ACCOUNTS`` at shares 3:1 with one user each (``USERS``)."""
    yield from cluster_up(version=request.param, accounts=ACCOUNTS, users=USERS)


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


def record(out: Path, version: str | None = None) -> None:
    """Drive a fresh 2x4-GPU cluster of ``version`` through the cases the parsers must handle and
    save the raw outputs: idle/busy nodes, squeue with running/pending/held/odd-named/requeued
    jobs. ``nodes_*.json`` is what ``SlurmCLI.sinfo_nodes`` reads (``sinfo --json`` on 22.05,
    ``scontrol show nodes --json`` later); ``sinfo_*.json`` is ``sinfo --json`` as it is."""
    out.mkdir(parents=True, exist_ok=True)
    root = make_root("shockwave-record-")
    work = root / "work"
    work.mkdir()
    os.chmod(work, 0o777)
    with make_cluster(root, version) as c:
        user = None
        if c.bin_dir is None:     # host's Slurm: a second user can submit; through a chroot only root
            ensure_user()
            shutil.chown(work, user=JOB_USER)
            user = JOB_USER
        cli = c.cli
        c_nodes = (["sinfo", "--json"] if c.bin_dir is None and c.slurm_version.startswith("22.")
                   else ["scontrol", "show", "nodes", "--json"])
        _save(out, "VERSION", c.run(["sinfo", "-V"]).stdout)
        _save(out, "squeue_empty.json", cli.run(["squeue", "--json", "--states=all"]).stdout)
        _save(out, "sinfo_idle.json", cli.run(["sinfo", "--json"]).stdout)
        _save(out, "nodes_idle.json", cli.run(c_nodes).stdout)
        a = _sbatch(cli, work, "-J", "run-a", "--gres=gpu:2", "--requeue", "--comment", "shockwave:a",
                    "--signal=B:USR1@30", "--wrap", "sleep 300")
        b = _sbatch(cli, work, "-J", "run-b-user", "--gres=gpu:2", "--wrap", "sleep 300", user=user)
        cj = _sbatch(cli, work, "-J", "run-c-perjob", "--gpus=2", "--no-requeue", "--wrap", "sleep 300")
        wait_for(lambda: all(j.running for j in cli.squeue_jobs(job_ids=[a, b, cj])), what="a,b,c running")
        d = _sbatch(cli, work, "-J", "pend-2node", "-N", "2", "--gres=gpu:4", "--wrap", "sleep 300")
        e = _sbatch(cli, work, "-J", ODD_NAME, "--comment", ODD_COMMENT, "--gres=gpu:1", "--wrap", "true")
        f = _sbatch(cli, work, "-J", "pend-site", "--gres=gpu:3", "--wrap", "sleep 300")
        g = _sbatch(cli, work, "-J", "held-admin", "--gres=gpu:1", "--wrap", "sleep 300")
        h = _sbatch(cli, work, "-J", "held-user", "-H", "--gres=gpu:1", "--wrap", "sleep 300", user=user)
        fin = _sbatch(cli, work, "-J", "fails", "--wrap", "exit 3")
        cli.scontrol_update([f], SiteFactor=5000, Nice=-999)
        cli.scontrol_update([d], SiteFactor=-50)
        cli.scontrol_update([g], AdminComment="shockwave: deferred, planned at 14:32")
        cli.hold([g, cj])
        wait_for(lambda: job_state(cli, fin).finished, what="failing job to finish")
        time.sleep(0.5)
        _save(out, "squeue_mixed.json", cli.run(["squeue", "--json", "--states=all"]).stdout)
        _save(out, "sinfo_busy.json", cli.run(["sinfo", "--json"]).stdout)
        _save(out, "nodes_busy.json", cli.run(c_nodes).stdout)
        _save(out, "sprio_site.txt", cli.run(["sprio", "-h", "-o", "%i|%S"]).stdout)
        cli.requeue([a])
        cli.requeue([b], hold=True)
        wait_for(lambda: job_state(cli, a).state == "PENDING" and job_state(cli, b).state == "PENDING",
                 what="requeued pending")
        _save(out, "squeue_requeued.json", cli.run(["squeue", "--json", "--states=all"]).stdout)
        wait_for(lambda: job_state(cli, a).running, timeout=40, what="requeued job to restart")
        _save(out, "squeue_restarted.json", cli.run(["squeue", "--json", "--states=all"]).stdout)
        cli.cancel([a, b, cj, d, e, f, g, h])
        wait_for(lambda: all(j.finished for j in cli.squeue_jobs()), what="all cancelled")
        _save(out, "squeue_finished.json", cli.run(["squeue", "--json", "--states=all"]).stdout)
    shutil.rmtree(root, ignore_errors=True)


def write_known_fields(data_dir: Path, target: Path) -> None:
    """Regenerate slurm/known_fields.py: every job/node field of every recorded version."""
    import json
    jobs: set[str] = set()
    nodes: set[str] = set()
    for f in sorted(data_dir.glob("*/squeue_*.json")):
        for j in json.loads(f.read_text())["jobs"]:
            jobs |= set(j)
    for f in sorted(data_dir.glob("*/nodes_*.json")):
        for n in json.loads(f.read_text())["nodes"]:
            nodes |= set(n)

    def fmt(name: str, items: set[str]) -> str:
        lines, cur = [], "   "
        for item in sorted(items):
            piece = f' "{item}",'
            if len(cur) + len(piece) > 100:
                lines.append(cur)
                cur = "   "
            cur += piece
        lines.append(cur)
        return f"{name} = frozenset({{\n" + "\n".join(lines) + "\n})\n"

    target.write_text(
        '"""Field names seen in the recorded outputs of every supported Slurm version (tests/data/slurm/).\n\n'
        'A field outside these sets is reported once as "unknown field" (never an error). Regenerate with\n'
        '``python -m tests.slurm_fixtures known-fields`` after recording a new version.\n"""\n'
        + fmt("KNOWN_JOB_FIELDS", jobs) + fmt("KNOWN_NODE_FIELDS", nodes))


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "record":
        record(Path(sys.argv[2]), sys.argv[3] if len(sys.argv) == 4 else None)
    elif len(sys.argv) == 2 and sys.argv[1] == "known-fields":
        here = Path(__file__).resolve().parent
        write_known_fields(here / "data" / "slurm", here.parent / "slurm_shockwave" / "slurmcli" / "known_fields.py")
    else:
        sys.exit("usage: python -m tests.slurm_fixtures record DIR [VERSION] | known-fields")


# -- kill -9 of a controller at a chosen Slurm call (tests/test_elastic_slurm.py, tests/test_reservations_slurm.py)
def die_after(token: str) -> None:
    """This process SIGKILLs itself right after the first Slurm command whose argv or input names `token`."""
    real = SlurmCLI.run

    def run(self, argv, *a, **kw):
        out = real(self, argv, *a, **kw)
        if token in " ".join(map(str, argv)) + str(kw.get("input") or ""):   # argv, or the lines scontrol reads
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    SlurmCLI.run = run


def killed(code: str) -> None:
    """Run `code` in a child Python (at the repository's root) that must die of SIGKILL (`die_after`)."""
    p = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
