"""A run whose wrapper reported its end while Slurm still shows it RUNNING (slurmstepd's completion message is retried
every 15 s while slurmctld is away): the reconcile neither signals nor requeues it (slurm/enact.py `RUN_END_S`)."""
from slurm_shockwave.events.progress import JobProgress
from slurm_shockwave.slurm.enact import RUN_END_S, Observed, reconcile
from slurm_shockwave.slurm.jobview import run_ended_for
from slurm_shockwave.slurm.ownership import format_mark

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
    job, seen = type("J", (), {"job_id": 9, "state": "RUNNING", "restart_count": 1}), {}
    ended = JobProgress(started=True, running=False, start_restart=1)
    assert run_ended_for(seen, job, ended, 100.0) == 0.0 and run_ended_for(seen, job, ended, 130.0) == 30.0
    assert run_ended_for({}, job, JobProgress(started=True, running=False, start_restart=0), 100.0) is None
    assert run_ended_for({}, job, JobProgress(started=True, running=True, start_restart=1), 100.0) is None
