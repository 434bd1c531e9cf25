"""An elastic job's declared profile (`speedup=` hint, slurm/hints.py) in the controller's throughput per count, and
the resize log (slurm/resize.py: done, wasted by the rule shared with the simulator, a change revised while its job is
still pending); no Slurm."""
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


def test_a_resize_is_done_when_it_runs_at_its_count_and_wasted_when_changed_again_within_a_round(tmp_path):
    from types import SimpleNamespace as Job

    from slurm_shockwave.controller.metrics_server import ControllerMetrics
    metrics = ControllerMetrics()
    log = ResizeLog(StateStore(tmp_path / "s.sqlite"), metrics)
    log.started(5, 2, 4, 100.0, 60.0)
    log.started(5, 2, 4, 110.0, 60.0)                             # the same change again (a later round): once
    log.observe({5: Job(finished=False, state="RUNNING", gpus=4, start_time=120)}, 125.0, 60.0)
    log.started(5, 4, 2, 150.0, 60.0)                             # 30 s at 4 GPUs: wasted
    log.save()
    again = ResizeLog(StateStore(tmp_path / "s.sqlite"))          # kept across restarts
    assert again.counts == {"started": 2, "done": 1, "wasted": 1} and again.open["5"]["to"] == 2
    exported = {s.labels["outcome"]: s.value for f in metrics.registry.collect() if f.name == "shockwave_resizes"
                for s in f.samples if s.name == "shockwave_resizes_total"}
    assert exported == {"started": 2.0, "done": 1.0, "wasted": 1.0}
    # a job that ran at its new count and ended within the round that released it is done; one that ended before it
    # restarted (its start older than the change) is not
    log = ResizeLog(StateStore(tmp_path / "t.sqlite"))
    log.started(6, 1, 8, 200.0, 60.0)
    log.started(7, 1, 8, 200.0, 60.0)
    log.observe({6: Job(finished=True, state="COMPLETED", gpus=8, start_time=210),
                 7: Job(finished=True, state="COMPLETED", gpus=1, start_time=150)}, 260.0, 60.0)
    assert log.counts == {"started": 2, "done": 1, "wasted": 0} and not log.open


def test_a_resize_run_from_the_round_of_its_change_is_not_wasted_by_its_restart_time(tmp_path):
    """Times are rounds' starts: a job changed at the round starting at 100 that runs at its new count from 103 (its
    restart) has run that round there when the next one (160) changes it again, as in the simulator; a change at an
    early round (130) is wasted.  A job first seen at its count rounds later (the controller was down) counts from its
    own start."""
    from types import SimpleNamespace as Job

    log = ResizeLog(StateStore(tmp_path / "s.sqlite"))
    log.observe({}, 100.0, 60.0)
    log.started(5, 1, 4, 100.0, 60.0)
    log.started(6, 1, 4, 100.0, 60.0)
    run = {5: Job(finished=False, state="RUNNING", gpus=4, start_time=103), 6: Job(finished=False, state="RUNNING",
                                                                                   gpus=4, start_time=104)}
    log.observe(run, 130.0, 60.0)                                   # an early round
    assert log.open["5"]["ran_at"] == 100.0 and log.counts["done"] == 2
    log.started(6, 4, 2, 130.0, 60.0)                               # changed again in it: wasted
    log.observe(run, 160.0, 60.0)
    log.started(5, 4, 8, 160.0, 60.0)                               # the next regular round: not wasted
    assert log.counts == {"started": 4, "done": 2, "wasted": 1}
    log.save()
    late = ResizeLog(StateStore(tmp_path / "s.sqlite"))             # restarted; down from 160 to 400
    late.observe({5: Job(finished=False, state="RUNNING", gpus=8, start_time=370)}, 400.0, 60.0)
    assert late.open["5"]["ran_at"] == 370.0
    late.started(5, 8, 4, 420.0, 60.0)
    assert late.counts["wasted"] == 2
