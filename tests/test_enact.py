"""The enactment reconcile: only differences, batched, idempotent, requeue at most once."""
from slurm_shockwave.controller.enact import Observed, reconcile

HIGH = 1000


def obs(i, state="PENDING", held=False, reason="", restarts=0, sf=None, gpus=1, wanted=None):
    return Observed(i, state, held, reason, restarts, sf, gpus, wanted)


def verbs(actions):
    return {(a.verb, a.value): a.job_ids for a in actions}


def never(_job, _restarts):
    return False


def test_advisory_releases_planned_and_holds_deferred_in_batches():
    jobs = [obs(1, held=True, reason="JobHeldAdmin"), obs(2), obs(3), obs(4, state="RUNNING")]
    acts = verbs(reconcile(jobs, {1, 4}, "advisory", HIGH, 0.0, {}, 60, never))
    assert acts == {("release", None): (1,), ("site_factor", HIGH): (1,), ("site_factor", 0): (2, 3),
                    ("hold", None): (2, 3)}


def test_reconcile_is_idempotent_once_slurm_matches():
    jobs = [obs(1, sf=HIGH), obs(2, held=True, reason="JobHeldAdmin", sf=0), obs(4, state="RUNNING")]
    assert reconcile(jobs, {1, 4}, "advisory", HIGH, 0.0, {}, 60, never) == []


def test_user_holds_are_not_released():
    jobs = [obs(1, held=True, reason="JobHeldUser", sf=HIGH)]
    assert reconcile(jobs, {1}, "advisory", HIGH, 0.0, {}, 60, never) == []


def test_advisory_never_preempts_running_jobs():
    assert reconcile([obs(5, state="RUNNING")], set(), "advisory", HIGH, 0.0, {}, 60, never) == []


def test_authoritative_signals_then_requeues_after_grace():
    jobs = [obs(5, state="RUNNING", restarts=0)]
    first = verbs(reconcile(jobs, set(), "authoritative", HIGH, 100.0, {}, 60, never))
    assert first == {("signal", "USR1"): (5,)}
    waiting = reconcile(jobs, set(), "authoritative", HIGH, 130.0, {5: 100.0}, 60, never)
    assert waiting == []
    later = verbs(reconcile(jobs, set(), "authoritative", HIGH, 161.0, {5: 100.0}, 60, never))
    assert later == {("requeue_hold", None): (5,)}


def test_a_journalled_requeue_is_never_repeated():
    jobs = [obs(5, state="RUNNING", restarts=0)]
    done = lambda job, restarts: job == 5 and restarts == 0  # noqa: E731
    assert reconcile(jobs, set(), "authoritative", HIGH, 500.0, {5: 100.0}, 60, done) == []
    # after the requeue really happened the restart count moved on: a later preemption is allowed
    jobs = [obs(5, state="RUNNING", restarts=1)]
    assert verbs(reconcile(jobs, set(), "authoritative", HIGH, 900.0, {5: 800.0}, 60, done)) == \
        {("requeue_hold", None): (5,)}


def test_requeue_held_job_is_released_when_planned_again():
    jobs = [obs(5, held=True, reason="job_requeued_in_held_state", restarts=1, sf=HIGH)]
    assert verbs(reconcile(jobs, {5}, "authoritative", HIGH, 0.0, {}, 60, never)) == {("release", None): (5,)}


def test_pending_job_asking_for_other_gpus_is_updated():
    jobs = [obs(7, gpus=2, wanted=4, sf=HIGH)]
    assert verbs(reconcile(jobs, {7}, "advisory", HIGH, 0.0, {}, 60, never)) == {("update_gpus", 4): (7,)}


def test_running_job_asking_for_other_gpus_is_requeued_first_in_authoritative_mode():
    jobs = [obs(8, state="RUNNING", gpus=1, wanted=2)]
    assert verbs(reconcile(jobs, {8}, "authoritative", HIGH, 0.0, {}, 60, never)) == {("signal", "USR1"): (8,)}
    assert reconcile(jobs, {8}, "advisory", HIGH, 0.0, {}, 60, never) == []


def test_a_job_that_just_started_is_not_preempted_yet():
    young = [Observed(9, "RUNNING", False, "", 0, None, 1, None, 30.0)]
    assert reconcile(young, set(), "authoritative", HIGH, 0.0, {}, 60, never, min_run=120) == []
    old = [Observed(9, "RUNNING", False, "", 0, None, 1, None, 130.0)]
    assert verbs(reconcile(old, set(), "authoritative", HIGH, 0.0, {}, 60, never, min_run=120)) == \
        {("signal", "USR1"): (9,)}
