"""An elastic job's declared profile (`speedup=` hint, slurm/hints.py) in the controller's throughput per count, and
the resize log's count of a change revised while its job is still pending (slurm/resize.py); no Slurm."""
from __future__ import annotations

import pytest

from slurm_shockwave.journal.store import StateStore
from slurm_shockwave.slurm.resize import ResizeLog, throughputs


def test_a_declared_profile_scales_counts_it_lists_until_the_job_reports_its_own():
    """`speedup=1x0.6/4x3.4` on a job asking 2 GPUs: factors relative to its own count; an unlisted count (8) by
    the exponent; a count it ran on (4) by its report, the others scaled from it by the profile."""
    from slurm_shockwave.slurm.hints import parse_hints

    profile = parse_hints("shockwave gpus=1-8 speedup=1x0.6/4x3.4", "shockwave", 8).speedup
    thr = throughputs([1, 2, 4, 8], {}, 2, 10.0, 0.5, profile)
    assert thr == pytest.approx({1: 6.0, 2: 10.0, 4: 34.0, 8: 34.0 * 2**0.5})
    ran = throughputs([1, 2, 4, 8], {4: 30.0}, 2, 10.0, 0.5, profile)
    assert ran == pytest.approx({1: 30.0 * 0.6 / 3.4, 2: 30.0 / 3.4, 4: 30.0, 8: 30.0 * 2**0.5})


def test_a_change_revised_while_the_job_is_pending_is_one_change(tmp_path):
    """A round re-decides a pending job's count before it runs (an early round after its requeue): its request is
    updated again, no restart more: one change, its target moved; taken back to its old count, wasted only when the
    job was requeued for it."""
    from types import SimpleNamespace as Job

    log = ResizeLog(StateStore(tmp_path / "s.sqlite"))
    log.started(5, 1, 4, 100.0, 60.0)                              # a running job: held and signalled for 4
    log.started(5, 4, 8, 104.0, 60.0, pending=True)                # requeued, then its request updated to 8
    assert log.counts == {"started": 1, "done": 0, "wasted": 0} and log.open["5"] == {
        "from": 1, "to": 8, "t": 100.0, "ran_at": None, "requeued": True}
    log.observe({5: Job(finished=False, state="RUNNING", gpus=8, start_time=106)}, 110.0, 60.0)
    assert log.counts == {"started": 1, "done": 1, "wasted": 0}
    log.started(6, 1, 2, 100.0, 60.0, pending=True)                # never ran: its request only
    log.started(6, 2, 1, 104.0, 60.0, pending=True)                # taken back: nothing was spent
    log.started(7, 1, 4, 100.0, 60.0)
    log.started(7, 4, 1, 104.0, 60.0, pending=True)                # requeued for nothing
    assert log.counts == {"started": 3, "done": 1, "wasted": 1} and set(log.open) == {"5"}

