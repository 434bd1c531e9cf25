"""kill -9 of the controller with a preemption round trip on every other Slurm version (24.11 and 26.05, run
from their Debian roots): a short variant of tests/test_safety_kill9.py (which runs on the host's Slurm only).

6 managed jobs that checkpoint and resume (shockwave-run + tests/safety_train.py, run inside the version's
root by the host's Python) on 4 GPUs, authoritative mode, the rotating policy of tests/safety_ctl.py with a
plan kept 2 rounds and the rotation kept across restarts: every 2 rounds 2 jobs lose their turn, get the
checkpoint signal, are requeued and held by the controller (the 4 that ignore the signal) or requeue themselves
and are held (the 2 that honour it), and are released 2 rounds later.  The controller is killed (SIGKILL) at
the critical points of that round trip, restarted each time, and finally runs the workload to its end:

* after ``scancel --signal`` (the checkpoint signal), before the signal is settled in the journal;
* after the AdminComment mark, before the hold (or the requeuehold, whichever comes first);
* between ``requeuehold`` and the ``hold`` that makes it an admin hold;
* after ``release``, before ``StartTime=now`` and the unmarking;
* after ``StartTime=now``, before the unmarking.

A point the controller did not reach within its window is tried once more; every point must strike.  Then
the end checks of ``Lab.check()``: every job COMPLETED with all its epochs, none lost or repeated, every run
resumed where the last one ended, none left held, state DB intact, rounds contiguous, no requeue journalled
twice.  About 50 s per version.

Slurm 24.11 kills a job started (release / StartTime=now) within the same second as its requeue completed
("Job credential revoked", the job ends FAILED; the controller waits RESTART_GAP_SECONDS for that): a job that
did not complete is reported with the Slurm log lines about it.
"""
from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from shockwave_lab.localcluster.chroot import host_version
from tests.safety_lab import REPO, Lab
from tests.slurm_fixtures import cluster_up, is_kept, make_root, version_test_versions

pytestmark = pytest.mark.slurm

OTHER_VERSIONS = [v for v in version_test_versions() if v != (host_version() or "22.05")]

# (token, n-th matching call of this controller process, before|after); see tests/safety_ctl.py
KILL_POINTS = [
    ("scancel", 1, "after"),                                 # signal sent, before it is settled
    ("AdminComment=shockwave:held", 1, "after"),             # marked, before hold / requeuehold
    ("requeuehold", 1, "after"),                             # between requeuehold and hold
    ("release", 1, "after"),                                 # released, before StartTime=now and unmark
    ("StartTime=now", 1, "after"),                           # before the mark is cleared
]
TRIES = 2            # attempts per point
WINDOW = 20          # seconds a controller process gets to reach its kill point


@pytest.fixture(scope="module", params=OTHER_VERSIONS, ids=lambda v: f"slurm{v}")
def cluster_and_root(request):
    """A 1-node, 4-GPU cluster of the version, whose jobs run the host's Python inside its root and write
    under a lab directory bound read-write."""
    lab_root = make_root("shockwave-vkill9-lab-")
    gen = cluster_up("shockwave-vkill9-", version=request.param, nodes=1, gpus_per_node=4,
                     binds=[REPO], rw_binds=[lab_root], host_python=sys.executable)
    try:
        cluster = next(gen)
        assert cluster.bin_dir is not None, "expected a cluster run from a Debian root"
        yield cluster, lab_root
    finally:
        gen.close()                                   # cluster.down() (by pid) and its mounts unmounted
        if not is_kept(lab_root):                     # a failed run's directory is kept to be read
            shutil.rmtree(lab_root, ignore_errors=True)


def _slurm_evidence(cluster, job_ids) -> str:
    """Lines of the Slurm logs about a revoked credential or about the jobs that did not complete."""
    lines, ids = [], {str(j) for j in job_ids}
    for log in sorted(Path(cluster.paths.log).glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if "revoked" in line.lower() or ids & set(re.findall(r"JobId=(\d+)", line)):
                lines.append(f"{log.name}: {line}")
    return "\n".join(lines[-80:])


def _last_calls(lab) -> list[str]:
    """For each kill, the Slurm command that process ran last (where exactly it struck)."""
    last, out = {}, []
    for line in lab.calls.read_text().splitlines() if lab.calls.exists() else []:
        pid, _, rest = line.partition(" ")
        if rest.startswith("KILL "):
            out.append(f"{rest[5:]} <- {last.get(pid, '(none)')[:90]}")
        else:
            last[pid] = rest.replace(str(lab.c.bin_dir) + "/", "")
    return out


def test_kill_9_preemption_round_trip(cluster_and_root):
    cluster, lab_root = cluster_and_root
    # a plan is kept 2 rounds (a job that lost its round is still unplanned when its grace ends), and the
    # rotation goes on across the restarts: a preemption round trip every 2 rounds, whatever the kills; 32 epochs
    # so that the workload outlasts the 5 points under load (with 24, a CI run under load finished the workload
    # after 2 of them: the other 3 never had a round left to strike in)
    lab = Lab(cluster, lab_root, epochs=32, epoch_s=1.0, round_s=3, grace=2, rotate_slice=2, rotate_memory=True)
    lab.submit(6, ignore_signal=lambda i: i % 3 != 0)     # 4 of 6 are stopped by the controller's requeuehold
    t0 = time.monotonic()
    try:
        struck, summary = lab.kill9(KILL_POINTS, WINDOW, tries=TRIES, first_timeout=90, finish_timeout=300)
    except AssertionError as e:
        bad = [j for j, r in lab.raw().items() if r.get("job_state") != "COMPLETED"]
        raise AssertionError(f"{e}\n--- Slurm {cluster.slurm_version} log lines:\n"
                             f"{_slurm_evidence(cluster, bad)}") from None
    elapsed = time.monotonic() - t0
    print(f"\nSlurm {cluster.slurm_version} kill9: {len(struck)} kills struck in {elapsed:.0f} s: {struck}\n"
          f"killed right after: {_last_calls(lab)}\n"
          f"restarts per job: {summary['restarts']}, rounds: {summary['rounds']}, requeues: {summary['requeues']}, "
          f"figures: {summary['figures']}")
    assert struck == [f"{t}:{n}:{w}" for t, n, w in KILL_POINTS], struck
    # no start was refused (24.11: "Killing non-startable batch JobId=N: Job credential revoked"), even one that
    # Slurm would have retried: the controller's release waits long enough after a requeue
    refused = [line for line in _slurm_evidence(cluster, []).splitlines() if "non-startable" in line]
    assert not refused, "\n".join(refused)
