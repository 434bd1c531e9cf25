"""A run whose wrapper reported its end while Slurm still shows it RUNNING (slurmstepd's completion message is retried
every 15 s while slurmctld is away): the reconcile neither signals nor requeues it (slurm/enact.py `RUN_END_S`)."""
import dataclasses

import pytest

from slurm_shockwave.events.progress import JobProgress
from slurm_shockwave.slurm.enact import RUN_END_S, Observed, reconcile
from slurm_shockwave.slurm.errors import SlurmError
from slurm_shockwave.slurm.jobview import RunEnds
from slurm_shockwave.slurm.ownership import format_mark
from solver.types import RoundDecision
from tests.slurm_backend_fakes import fake_backend, me, report, sent, slurm_job

PREEMPTED = format_mark("held", "preempted")


def never(_job, _restarts):
    return False


def test_a_run_whose_wrapper_reported_its_end_is_neither_signalled_nor_requeued_while_slurm_catches_up():
    """A requeue then would run the finished job again.  For RUN_END_S at most (a false claim gains that, once a
    run): then it is signalled, or requeued after its signal's grace, as any job that lost its round."""
    def run(ended_for, signalled):
        j = Observed(9, "RUNNING", True, "JobHeldAdmin", 1, None, 1, None, 300.0, PREEMPTED, "held",
                     run_ended_for=ended_for)
        acts = reconcile([j], set(), "authoritative", 1000, 100.0, signalled, 2, never)
        return {(a.verb, a.value): a.job_ids for a in acts}
    assert run(5.0, {}) == run(5.0, {9: [90.0, 1]}) == {}
    assert run(None, {}) == run(RUN_END_S + 1, {}) == {("signal", "B:USR1"): (9,)}
    assert run(None, {9: [90.0, 1]}) == run(RUN_END_S + 1, {9: [90.0, 1]}) == {("requeue_hold", PREEMPTED): (9,)}
    # the end of this run (restart 1) in its events: from the first round that saw it; not an end of the run before
    job, ends = type("J", (), {"job_id": 9, "state": "RUNNING", "restart_count": 1}), RunEnds()
    ended = JobProgress(started=True, running=False, start_restart=1, finished=True)
    assert ends.ended_for(job, ended, 100.0) == 0.0 and ends.ended_for(job, ended, 130.0) == 30.0
    assert ends.ended_for(job, JobProgress(started=True, start_restart=0, finished=True), 100.0) is None
    assert ends.ended_for(job, JobProgress(started=True, running=True, start_restart=1), 100.0) is None
    # a run that ended without finishing (it failed, or its own requeue did): Slurm or the controller still acts
    assert ends.ended_for(job, JobProgress(started=True, start_restart=1, exit_code=1), 100.0) is None
    # a read of the queue that failed (slurmctld away): Slurm hears of the end only from now on, the window starts anew
    ends.reading()
    ends.answered()
    assert ends.ended_for(job, ended, 150.0) == 50.0
    ends.reading()
    ends.reading()
    ends.answered()
    assert ends.ended_for(job, ended, 400.0) == 0.0 and ends.ended_for(job, ended, 410.0) == 10.0
    ends.keep({8})
    assert ends.first == {}

def test_the_backend_sees_the_end_a_wrapper_reported_and_signals_the_job_only_after_run_end_s(tmp_path):
    """Through the backend, from the job's own events in the store: job 5 still shows RUNNING after its wrapper
    reported this run's start and its end; a round that runs job 6 instead leaves it alone for RUN_END_S, then
    preempts it as any job that lost its round; the run before it ended (restart 0) says nothing of the next run."""
    now = [1000.0]
    running = slurm_job(5, state="RUNNING", start_time=100, user_id=me())
    b = fake_backend(tmp_path, [running, slurm_job(6, user_id=me())], mode="authoritative", clock=lambda: now[0])
    report(b, 5, "start")
    report(b, 5, "exit", exit_code=0, reason="completed")

    def round_at(t, job=running):
        now[0] = t
        b.cli.jobs = [job, slurm_job(6, user_id=me())]
        n = len(sent(b))
        b.observe()
        b.apply(RoundDecision(run=(6,)))
        return [(a.verb, a.job_ids) for a in sent(b)[n:] if 5 in a.job_ids]

    assert round_at(1000.0) == [] and round_at(1000.0 + RUN_END_S - 1) == []
    # slurmctld away for a while (the read raises): the window starts again when it answers
    reads = b.cli.squeue_jobs
    b.cli.squeue_jobs = lambda *a, **k: (_ for _ in ()).throw(SlurmError("timed out", cmd=["squeue"], returncode=1))
    with pytest.raises(SlurmError):
        b.observe()
    b.cli.squeue_jobs = reads
    assert round_at(1000.0 + 2 * RUN_END_S) == [] and round_at(1000.0 + 3 * RUN_END_S - 1) == []
    assert ("signal", (5,)) in round_at(1000.0 + 3 * RUN_END_S + 1)
    # a later run (restart 1) whose wrapper has not reported yet: the end of run 0 does not cover it
    assert b._observed[5].run_ended_for is not None
    round_at(2000.0, dataclasses.replace(running, restart_count=1, start_time=1500))
    assert b._observed[5].run_ended_for is None


def test_a_run_whose_own_requeue_failed_is_still_requeued_by_the_controller(tmp_path):
    """Its wrapper gave up its `scontrol requeue` (slurmctld away too long) and exited 1 with work left: not a finished
    run; while Slurm still shows it RUNNING, the round that runs another job preempts it at once (its requeue saves
    the work the failed one would have left unfinished)."""
    running = slurm_job(5, state="RUNNING", start_time=100, user_id=me())
    b = fake_backend(tmp_path, [running, slurm_job(6, user_id=me())], mode="authoritative", clock=lambda: 1000.0)
    report(b, 5, "start")
    report(b, 5, "exit", exit_code=1, reason="ended early: 3/10 epochs, requeue failed: timed out")
    b.observe()
    b.apply(RoundDecision(run=(6,)))
    assert b._observed[5].run_ended_for is None
    assert ("signal", (5,)) in [(a.verb, a.job_ids) for a in sent(b)]
