"""A run the controller signalled and a later round planned again while it still ran (the kill -9 test's one
failure, 22.05: released in the second of its wrapper's requeue, its restart was killed and the job ended FAILED
with 9 of 20 epochs left).  The backend keeps it held while it runs, remembers the signal as overruled, and starts
the next round early once the job is back in the queue, to release it after the restart gap."""
from __future__ import annotations

import dataclasses
import threading

from slurm_shockwave.slurm.enact import Observed, reconcile
from slurm_shockwave.slurm.ownership import format_mark
from slurm_shockwave.slurm.timing import wait_for_round
from solver.types import RoundDecision
from tests.slurm_backend_fakes import fake_backend, sent, slurm_job

HIGH = 1000
PREEMPTED = format_mark("held", "preempted")


def verbs(actions):
    return {(a.verb, a.value): a.job_ids for a in actions}


def never(_job, _restarts):
    return False


def _verbs(b, since: int = 0):
    return [(a.verb, a.job_ids) for a in sent(b)[since:]]


def test_planned_again_after_its_signal_it_stays_held_and_is_followed(tmp_path):
    now = [1000.0]
    running = slurm_job(5, state="RUNNING", start_time=100)          # ran long enough to be signalled unreported
    other = slurm_job(6)
    b = fake_backend(tmp_path, [running, other], mode="authoritative", clock=lambda: now[0])
    b.observe()
    b.apply(RoundDecision(run=(6,)))                                   # 5 loses its round: held, then signalled
    assert ("signal", (5,)) in _verbs(b) and b.signalled[5][:2] == [1000.0, 0]
    assert b.stopping() == {5}
    n = len(sent(b))
    now[0] = 1003.0
    b.cli.jobs = [dataclasses.replace(running, held=True, priority=0, admin_comment=b._ac.get(5) or
                                      "shockwave:held preempted"), other]
    b.observe()
    b.apply(RoundDecision(run=(5,)))                                   # planned again while it still runs
    assert ("release", (5,)) not in _verbs(b, n)                       # its requeue may be under way
    assert b.signalled[5] == [1000.0, 0, 1]                            # remembered, as overruled
    assert b.stopping() == frozenset()                                 # no longer a preemption under way
    assert b._follow == {5}
    # back in the queue after its requeue: released, once the restart gap has passed since it was seen PENDING
    now[0] = 1005.0
    b.cli.jobs = [dataclasses.replace(running, state="PENDING", held=True, priority=0, restart_count=1,
                                      state_reason="JobHeldAdmin", admin_comment="shockwave:held preempted"), other]
    b.observe()
    n = len(sent(b))
    b.apply(RoundDecision(run=(5,)))
    assert ("release", (5,)) in _verbs(b, n)
    assert 5 not in b.signalled and b._follow == set()


class _Queue:
    """squeue's states of the polled jobs: one list of states per poll."""

    def __init__(self, polls):
        self.polls, self.asked = list(polls), []

    def squeue_jobs(self, job_ids=None, **_kw):
        self.asked.append(set(job_ids))
        states = self.polls.pop(0) if self.polls else {}
        return [slurm_job(j, state=s) for j, s in states.items()]


def test_a_followed_job_back_in_the_queue_starts_the_round_early():
    """Polled while nothing waits; COMPLETING (the requeue's clean-up) is not back yet; PENDING is."""
    clock = [0.0]

    def tick():
        clock[0] += 0.01
        return clock[0]
    q = _Queue([{7: "RUNNING"}, {7: "COMPLETING"}, {7: "PENDING"}])
    got = wait_for_round(q, threading.Event(), tick, 0.0, (0.001, 0.0), 100.0, {3}, set(), False, {7})
    assert got == {7} and q.asked == [{7}] * 3                          # `ours` not polled: nothing waits
    # without a followed job and nothing waiting: the regular round boundary, no poll
    q = _Queue([])
    assert wait_for_round(q, threading.Event(), tick, clock[0], (0.001, 0.0), 0.05, {3}, set(), False) == set()
    assert q.asked == []


def test_a_signalled_run_planned_again_is_not_released_while_it_runs():
    """Its own requeue may be under way (the wrapper checkpoints, then `scontrol requeue`): released at that moment,
    Slurm restarts it in the second of the requeue and kills the restart (the job ended FAILED with 9 of 20 epochs
    in a kill -9 run).  It stays held and is released once seen PENDING; a job held while running that no signal
    reached (it started between our observation and our hold) is released at once, as before."""
    held = Observed(9, "RUNNING", True, "JobHeldAdmin", 2, None, 1, admin_comment=PREEMPTED, mark="held",
                    running_for=20.0)
    signalled = {9: [100.0, 2]}
    assert verbs(reconcile([held], {9}, "authoritative", HIGH, 104.0, signalled, 2, never)) == {}
    assert verbs(reconcile([held], {9}, "authoritative", HIGH, 104.0, {}, 2, never)) == {("release", ""): (9,)}
    # a signal sent to an earlier run does not count for this one
    assert verbs(reconcile([held], {9}, "authoritative", HIGH, 104.0, {9: [50.0, 1]}, 2, never)) == {
        ("release", ""): (9,)}
    # back in the queue, held: released (the restart gap is the backend's, timing.py)
    pending = Observed(9, "PENDING", True, "JobHeldAdmin", 3, 0, 1, admin_comment=PREEMPTED, mark="held")
    assert ("release", "") in verbs(reconcile([pending], {9}, "authoritative", HIGH, 106.0, signalled, 2, never))


def test_a_replanned_signal_is_sent_afresh_when_the_run_loses_a_later_round():
    """Planned again after its signal, the run went on (its program checkpointed or ignored the signal and did not
    requeue): when it loses a later round it gets a new signal (its last checkpoint may be old), not a requeue."""
    from slurm_shockwave.slurm.preemptions import replanned, signal_time

    held = Observed(9, "RUNNING", True, "JobHeldAdmin", 2, None, 1, admin_comment=PREEMPTED, mark="held",
                    running_for=200.0)
    entry = [100.0, 2, 1]
    assert replanned(entry) and not replanned([100.0, 2]) and signal_time(entry, 2) == 100.0
    acts = verbs(reconcile([held], set(), "authoritative", HIGH, 300.0, {9: entry}, 2, never))
    assert acts == {("signal", "B:USR1"): (9,)}
    # not replanned: past its grace it is requeued held, as before
    acts = verbs(reconcile([held], set(), "authoritative", HIGH, 300.0, {9: [100.0, 2]}, 2, never))
    assert set(acts) == {("requeue_hold", PREEMPTED)}


def test_a_controller_killed_around_the_replanned_round_still_does_not_release_the_running_job(tmp_path):
    """kill -9 at the new point: after the round that planned the signalled job again (its overruled signal saved)
    or just before that save (the signal saved, not yet overruled): a new controller on the same state directory
    keeps the job held while it runs and releases it once it is back in the queue."""
    now = [1000.0]
    running = slurm_job(5, state="RUNNING", start_time=100)
    held = dataclasses.replace(running, held=True, priority=0, admin_comment="shockwave:held preempted")
    b = fake_backend(tmp_path, [running], mode="authoritative", clock=lambda: now[0])
    b.observe()
    b.apply(RoundDecision(run=()))                                     # held, then signalled; the signal saved
    for saved in ([1000.0, 0], [1000.0, 0, 1]):                        # before / after the replanned round's save
        b.state.put("signalled", {"5": saved})
        now[0] += 3.0
        again = fake_backend(tmp_path, [held], mode="authoritative", clock=lambda: now[0])   # the restart
        assert again.signalled == {5: saved}
        n = len(sent(again))
        again.observe()
        again.apply(RoundDecision(run=(5,)))
        assert ("release", (5,)) not in _verbs(again, n) and again.signalled[5] == [1000.0, 0, 1]
    again.cli.jobs = [dataclasses.replace(held, state="PENDING", restart_count=1, state_reason="JobHeldAdmin")]
    now[0] += 3.0
    again.observe()
    n = len(sent(again))
    again.apply(RoundDecision(run=(5,)))
    assert ("release", (5,)) in _verbs(again, n)
