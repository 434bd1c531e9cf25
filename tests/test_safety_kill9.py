"""kill -9 of the controller at 20 points spread over its rounds, a restart each time, on 16 managed jobs that
checkpoint and resume (shockwave-run + tests/safety_train.py; every fourth one checkpoints slowly, 4 s, twice
the grace), authoritative mode with the preemption gate on, a rotating policy (tests/safety_ctl.py `Rotate`:
jobs lose their round every round, so preemptions happen every few seconds).

Kill points (tests/safety_ctl.py): before/after a given Slurm command, e.g. right after `requeuehold`
(before the `hold` that makes it an admin hold), right after the AdminComment mark (before the hold or
the requeue), right after `release` (before StartTime=now and the unmarking), right after a node pin (before the
release), during observe, after a signal.  A point the controller did not reach within its window is skipped (the report lists the kills
that struck); the test requires at least 18 of the 20 to strike, the preemption points among them
(a typical run: 20 of 20).  The last controller must stop cleanly (exit 0) on SIGTERM.

Then (tests/safety_lab.py `Lab.check`): every job completes, each epoch done exactly once, every restart
preceded by a checkpoint, Slurm's restart count = runs - 1, none left held, state integrity ok, rounds
contiguous, no wasted preemption.  A failed run keeps its directory; bench/kill9_loop.py loops this test.
"""
from __future__ import annotations

import time

import pytest

from tests.safety_lab import Lab
from tests.slurm_fixtures import cluster_up, make_root

pytestmark = pytest.mark.slurm

# (token, n-th matching call of this controller process, before|after)
KILL_POINTS = [
    ("squeue", 1, "after"),                                  # mid-observe
    ("NodeList=node", 1, "after"),                           # pinned (journalled), not released (early:
                                                             # each job is pinned once)
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
    ("AdminComment=shockwave:held", 2, "after"),
    ("squeue", 3, "after"),                                  # a later round
    ("release", 1, "before"),
    ("scancel", 2, "after"),
    ("AdminComment=shockwave:held", 1, "before"),           # hold/requeue journalled, mark not yet written
]
MUST_STRIKE = {"requeuehold:1:after", "AdminComment=shockwave:held:1:after", "release:1:after", "scancel:1:after"}
WINDOW = 25          # seconds a controller process gets to reach its kill point
EPOCHS = 20          # of 1 s per job: enough work for every point to strike on a loaded machine


@pytest.fixture(scope="module")
def cluster():
    yield from cluster_up("shockwave-kill9-", nodes=1, gpus_per_node=4)


def test_kill_9_at_20_points(cluster):
    lab = Lab(cluster, make_root("shockwave-kill9-lab-"), epochs=EPOCHS, epoch_s=1.0, round_s=3, grace=2)
    # every fourth job checkpoints slowly (4 s, twice the grace): its own requeue meets the controller's
    lab.submit(16, checkpoint_s=lambda i: 4 if i % 4 == 0 else 0)
    t0 = time.monotonic()
    struck, summary = lab.kill9(KILL_POINTS, WINDOW)
    elapsed = time.monotonic() - t0
    print(f"\nkill9: {len(struck)} kills struck in {elapsed:.0f} s: {struck}\n"
          f"restarts per job: {summary['restarts']}, rounds: {summary['rounds']}, requeues: {summary['requeues']}, "
          f"figures: {summary['figures']}")
    assert len(struck) >= 18, struck                # a point is missed only if its event did not come in time
    assert MUST_STRIKE <= set(struck), struck
