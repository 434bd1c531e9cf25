"""kill -9 of the controller at 20 points spread over its rounds, a restart each time, on 12 managed jobs that
checkpoint and resume (shockwave-run + tests/safety_train.py), authoritative mode, a rotating policy
(max_min_fairness: jobs lose their round often, so preemptions happen every few seconds).

Kill points (tests/safety_ctl.py): before/after a given Slurm command, e.g. right after `requeuehold`
(before the `hold` that makes it an admin hold), right after the AdminComment mark (before the hold or
the requeue), right after `release` (before StartTime=now and the unmarking), during observe, after a
signal.  A point the controller did not reach within its window is skipped (the report lists the kills
that struck); the test requires at least 18 of the 20 to strike, the preemption points among them
(a typical run: 20 of 20, about 150 s).

Then: every job completes, each epoch done exactly once, every restart preceded by a checkpoint, Slurm's
restart count = runs - 1, none left held, state integrity ok, rounds contiguous.
"""
from __future__ import annotations

import time

import pytest

from tests.safety_lab import Lab, wait_job_progress
from tests.slurm_fixtures import cluster_up, make_root, wait_for

pytestmark = pytest.mark.slurm

# (token, n-th matching call of this controller process, before|after)
KILL_POINTS = [
    ("squeue", 1, "after"),                                  # mid-observe
    ("scancel", 1, "before"),                                # signal journalled, not sent
    ("AdminComment=shockwave:held", 1, "after"),             # marked, before hold / requeuehold
    ("requeuehold", 1, "after"),                             # between requeuehold and hold
    ("hold", 1, "before"),
    ("scancel", 1, "after"),                                 # signal sent, before it is settled
    ("release", 1, "after"),                                 # released, before StartTime=now and unmark
    ("sinfo", 1, "after"),
    ("requeuehold", 1, "before"),                            # marked + journalled, requeue not issued
    ("SiteFactor=0", 1, "after"),
    ("StartTime=now", 1, "after"),                           # before the mark is cleared
    ("hold", 1, "after"),
    ("AdminComment=", 1, "before"),                          # before unmarking a released job
    ("sprio", 1, "before"),
    ("requeuehold", 1, "after"),
    ("AdminComment=shockwave:held", 2, "after"),
    ("squeue", 3, "after"),                                  # a later round
    ("release", 1, "before"),
    ("scancel", 2, "after"),
    ("AdminComment=shockwave:held", 1, "before"),           # hold/requeue journalled, mark not yet written
]
MUST_STRIKE = {"requeuehold:1:after", "AdminComment=shockwave:held:1:after", "release:1:after", "scancel:1:after"}
WINDOW = 25          # seconds a controller process gets to reach its kill point


@pytest.fixture(scope="module")
def cluster():
    yield from cluster_up("shockwave-kill9-", nodes=1, gpus_per_node=4)


def test_kill_9_at_20_points(cluster):
    lab = Lab(cluster, make_root("shockwave-kill9-lab-"), epochs=30, epoch_s=1.0, round_s=3, grace=2)
    lab.submit(12)
    struck: list[str] = []
    t0 = time.monotonic()
    try:
        lab.start()                                   # a first clean controller gets the workload going
        wait_job_progress(lab)
        lab.stop()
        struck = lab.strike(KILL_POINTS, WINDOW)
        lab.start()                                   # the last one runs the workload to its end
        wait_for(lab.all_finished, timeout=400, interval=1, what="every job completed")
        assert lab.stop() == 0
    finally:
        lab.stop()
    summary = lab.check()
    elapsed = time.monotonic() - t0
    print(f"\nkill9: {len(struck)} kills struck in {elapsed:.0f} s: {struck}\n"
          f"restarts per job: {summary['restarts']}, rounds: {summary['rounds']}, requeues: {summary['requeues']}")
    assert len(struck) >= 18, struck                # a point is missed only if its event did not come in time
    assert MUST_STRIKE <= set(struck), struck
