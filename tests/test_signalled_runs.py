"""A run the controller signalled and a later round planned again while it still ran (the kill -9 test's one
failure, 22.05: released in the second of its wrapper's requeue, its restart was killed and the job ended FAILED
with 9 of 20 epochs left).  The backend keeps it held while it runs, remembers the signal as overruled, and starts
the next round early once the job is back in the queue, to release it after the restart gap."""
from __future__ import annotations

import dataclasses
import threading

from slurm_shockwave.slurm.timing import wait_for_round
from solver.types import RoundDecision
from tests.slurm_backend_fakes import fake_backend, sent, slurm_job


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
