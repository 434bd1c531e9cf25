"""The enactment reconcile: only differences, batched, idempotent, requeue at most once; holds are owned
through the AdminComment mark (slurm/ownership.py), never through Slurm's hold reason."""
import pytest

from slurm_shockwave.slurm.enact import (MAX_NEW_HOLDS, MAX_REASON_REWRITE_JOBS, MAX_REASON_REWRITES, Enactor, Observed,
                                        reconcile)
from slurm_shockwave.slurm.ownership import format_mark, marked, parse_mark, unmarked

HIGH = 1000
HELD = format_mark("held", "deferred")
PREEMPTED = format_mark("held", "preempted")


def obs(i, state="PENDING", held=False, reason="", restarts=0, sf=None, gpus=1, wanted=None, ac=""):
    return Observed(i, state, held, reason, restarts, sf, gpus, wanted, admin_comment=ac,
                    mark=parse_mark(ac).status if parse_mark(ac) else None)


def verbs(actions):
    return {(a.verb, a.value): a.job_ids for a in actions}


def never(_job, _restarts):
    return False


def test_advisory_releases_planned_and_holds_deferred_in_batches():
    jobs = [obs(1, held=True, reason="JobHeldAdmin", ac=HELD), obs(2), obs(3), obs(4, state="RUNNING")]
    acts = verbs(reconcile(jobs, {1, 4}, "advisory", HIGH, 0.0, {}, 60, never))
    assert acts == {("release", ""): (1,), ("site_factor", HIGH): (1,), ("site_factor", 0): (2, 3),
                    ("hold", HELD): (2, 3)}


def test_a_long_queue_is_held_over_several_rounds_oldest_first():
    """At most MAX_NEW_HOLDS new holds a round (the oldest jobs first), all with SiteFactor 0 at once; a job of
    ours left with requeuehold's user hold is re-held whatever the budget."""
    n = MAX_NEW_HOLDS + 120
    jobs = [obs(i, sf=0) for i in range(n, 0, -1)] + [obs(n + 1, held=True, reason="JobHeldUser", restarts=1, sf=0,
                                                          ac=PREEMPTED)]
    acts = verbs(reconcile(jobs, set(), "advisory", HIGH, 0.0, {}, 60, never))
    assert acts[("hold", HELD)] == tuple(range(1, MAX_NEW_HOLDS + 1)) and acts[("hold", PREEMPTED)] == (n + 1,)
    held = {i for i in range(1, MAX_NEW_HOLDS + 1)}
    later = [obs(i, sf=0, held=i in held, reason="JobHeldAdmin" if i in held else "",
                 ac=HELD if i in held else "") for i in range(1, n + 1)]
    assert verbs(reconcile(later, set(), "advisory", HIGH, 0.0, {}, 60, never)) == \
        {("hold", HELD): tuple(range(MAX_NEW_HOLDS + 1, n + 1))}


def test_reconcile_is_idempotent_once_slurm_matches():
    jobs = [obs(1, sf=HIGH), obs(2, held=True, reason="JobHeldAdmin", sf=0, ac=HELD), obs(4, state="RUNNING")]
    assert reconcile(jobs, {1, 4}, "advisory", HIGH, 0.0, {}, 60, never) == []


def test_user_holds_are_not_released():
    jobs = [obs(1, held=True, reason="JobHeldUser", sf=HIGH)]
    assert reconcile(jobs, {1}, "advisory", HIGH, 0.0, {}, 60, never) == []


def test_an_admins_own_hold_is_not_ours_whatever_its_reason():
    """JobHeldAdmin without our mark (a site admin's hold) is never released: ownership is the mark."""
    jobs = [obs(1, held=True, reason="JobHeldAdmin", sf=HIGH)]
    assert reconcile(jobs, {1}, "authoritative", HIGH, 0.0, {}, 60, never) == []


def test_marked_user_hold_left_by_requeuehold_is_ours():
    """kill -9 between `requeuehold` and `hold`: PENDING, JobHeldUser, marked -> ours: held as admin while
    deferred, released when planned."""
    left = [obs(5, held=True, reason="JobHeldUser", restarts=1, sf=0, ac=PREEMPTED)]
    assert verbs(reconcile(left, set(), "authoritative", HIGH, 0.0, {}, 60, never)) == {("hold", PREEMPTED): (5,)}
    assert verbs(reconcile(left, {5}, "authoritative", HIGH, 0.0, {}, 60, never)) == \
        {("release", ""): (5,), ("site_factor", HIGH): (5,)}


def test_marked_but_not_held_is_held_again_or_unmarked():
    """kill -9 between writing the mark and `hold`: held when deferred, unmarked when planned."""
    j = [obs(6, sf=0, ac=HELD)]
    assert verbs(reconcile(j, set(), "advisory", HIGH, 0.0, {}, 60, never)) == {("hold", HELD): (6,)}
    assert verbs(reconcile(j, {6}, "advisory", HIGH, 0.0, {}, 60, never)) == \
        {("mark", ""): (6,), ("site_factor", HIGH): (6,)}
    running = [obs(6, state="RUNNING", ac=HELD)]
    assert verbs(reconcile(running, {6}, "authoritative", HIGH, 0.0, {}, 60, never)) == {("mark", ""): (6,)}


def test_an_admins_comment_is_kept_around_our_mark():
    mine = marked("site: keep", "held", "deferred, planned at 14:32")
    assert mine == "site: keep | shockwave:held deferred, planned at 14:32"
    assert parse_mark(mine).reason == "deferred, planned at 14:32" and unmarked(mine) == "site: keep"
    assert parse_mark("site: keep") is None and parse_mark("shockwave:bogus x") is None
    assert parse_mark(marked("a | b", "held", "x|y\nz")).reason == "x y z"       # no separator, no newline
    jobs = [obs(2, held=True, reason="JobHeldAdmin", sf=0, ac=mine)]
    assert verbs(reconcile(jobs, {2}, "advisory", HIGH, 0.0, {}, 60, never)) == \
        {("release", "site: keep"): (2,), ("site_factor", HIGH): (2,)}


def test_orphans_are_released_and_unmarked():
    orphans = [obs(3, held=True, reason="JobHeldAdmin", ac=HELD), obs(4, state="RUNNING", ac=HELD)]
    assert verbs(reconcile([], set(), "advisory", HIGH, 0.0, {}, 60, never, orphans=orphans)) == \
        {("release", ""): (3,), ("mark", ""): (4,)}


def test_reason_rewrites_are_batched_and_bounded():
    jobs = [obs(i, held=True, reason="JobHeldAdmin", sf=0, ac=HELD) for i in range(100)]
    same = {i: "waits: planned at 14:32" for i in range(100)}
    acts = reconcile(jobs, set(), "advisory", HIGH, 0.0, {}, 60, never, reasons=same)
    assert [(a.verb, len(a.job_ids)) for a in acts] == [("mark", 100)]
    unique = {i: f"waits {i}" for i in range(100)}
    acts = reconcile(jobs, set(), "advisory", HIGH, 0.0, {}, 60, never, reasons=unique)
    assert len(acts) == MAX_REASON_REWRITES
    # at most MAX_REASON_REWRITE_JOBS jobs per round, whatever the number of jobs with a new reason
    many = [obs(i, held=True, reason="JobHeldAdmin", sf=0, ac=HELD) for i in range(3 * MAX_REASON_REWRITE_JOBS)]
    acts = reconcile(many, set(), "advisory", HIGH, 0.0, {}, 60, never,
                     reasons={i: f"waits {i % 2}" for i in range(len(many))})
    assert sum(len(a.job_ids) for a in acts) == MAX_REASON_REWRITE_JOBS
    # unchanged text: nothing rewritten
    jobs = [obs(1, held=True, reason="JobHeldAdmin", sf=0, ac=format_mark("held", "waits"))]
    assert reconcile(jobs, set(), "advisory", HIGH, 0.0, {}, 60, never, reasons={1: "waits"}) == []


class FakeCLI:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append((name, a, k))


class FakeState:
    def intend_many(self, round_index, job_ids, *a):
        return [1] * len(job_ids)

    def settle(self, *a):
        pass


def test_the_mark_is_written_before_the_hold_and_cleared_after_the_release():
    cli = FakeCLI()
    en = Enactor(cli, FakeState())
    acts = reconcile([obs(1), obs(2, held=True, reason="JobHeldUser", sf=HIGH, ac=HELD),
                      obs(3, state="RUNNING", restarts=0)], {2}, "authoritative", HIGH, 100.0, {3: 0.0}, 60, never)
    seen = []
    en.execute(0, acts, {}, on_done=lambda a: seen.append(a.verb))
    names = [(n, a[0] if a else None, k.get("AdminComment")) for n, a, k in cli.calls]
    assert names.index(("scontrol_update", [3], PREEMPTED)) < names.index(("requeue", [3], None))
    first = [k for n, a, k in cli.calls if n == "scontrol_update" and a[0] == [1]][0]
    assert ("hold", [1], None) not in names and first == {"AdminComment": HELD, "Priority": 0}  # marked + held at once
    assert names.index(("release", [2], None)) < names.index(("scontrol_update", [2], ""))
    assert seen == [a.verb for a in acts]


def test_advisory_never_preempts_running_jobs():
    assert reconcile([obs(5, state="RUNNING")], set(), "advisory", HIGH, 0.0, {}, 60, never) == []


def test_authoritative_holds_signals_then_requeues_after_grace():
    """The hold (marked) comes before the signal: when the program requeues itself after its checkpoint the hold
    comes back with it, so it never restarts by itself on the GPUs it freed (issue 22)."""
    jobs = [obs(5, state="RUNNING", restarts=0)]
    first = reconcile(jobs, set(), "authoritative", HIGH, 100.0, {}, 60, never)
    assert [(a.verb, a.value, a.job_ids) for a in first] == [("hold", PREEMPTED, (5,)), ("signal", "USR1", (5,))]
    jobs = [obs(5, state="RUNNING", held=True, reason="JobHeldAdmin", restarts=0, ac=PREEMPTED)]
    waiting = reconcile(jobs, set(), "authoritative", HIGH, 130.0, {5: 100.0}, 60, never)
    assert waiting == []
    later = verbs(reconcile(jobs, set(), "authoritative", HIGH, 161.0, {5: 100.0}, 60, never))
    assert later == {("requeue_hold", PREEMPTED): (5,)}


def test_a_journalled_requeue_is_never_repeated():
    jobs = [obs(5, state="RUNNING", held=True, reason="JobHeldAdmin", restarts=0, ac=PREEMPTED)]
    done = lambda job, restarts: job == 5 and restarts == 0
    assert reconcile(jobs, set(), "authoritative", HIGH, 500.0, {5: 100.0}, 60, done) == []
    # after the requeue really happened the restart count moved on: a later preemption is allowed
    jobs = [obs(5, state="RUNNING", held=True, reason="JobHeldAdmin", restarts=1, ac=PREEMPTED)]
    assert verbs(reconcile(jobs, set(), "authoritative", HIGH, 900.0, {5: 800.0}, 60, done)) == \
        {("requeue_hold", PREEMPTED): (5,)}


def test_requeue_held_job_is_released_when_planned_again():
    jobs = [obs(5, held=True, reason="job_requeued_in_held_state", restarts=1, sf=HIGH, ac=PREEMPTED)]
    assert verbs(reconcile(jobs, {5}, "authoritative", HIGH, 0.0, {}, 60, never)) == {("release", ""): (5,)}


def test_pending_job_asking_for_other_gpus_is_updated():
    jobs = [obs(7, gpus=2, wanted=4, sf=HIGH)]
    assert verbs(reconcile(jobs, {7}, "advisory", HIGH, 0.0, {}, 60, never)) == {("update_gpus", 4): (7,)}


def test_running_job_asking_for_other_gpus_is_requeued_first_in_authoritative_mode():
    jobs = [obs(8, state="RUNNING", gpus=1, wanted=2)]
    assert verbs(reconcile(jobs, {8}, "authoritative", HIGH, 0.0, {}, 60, never)) == \
        {("hold", PREEMPTED): (8,), ("signal", "USR1"): (8,)}
    assert reconcile(jobs, {8}, "advisory", HIGH, 0.0, {}, 60, never) == []


def test_a_job_that_just_started_is_not_preempted_yet():
    young = [Observed(9, "RUNNING", False, "", 0, None, 1, None, 30.0)]
    assert reconcile(young, set(), "authoritative", HIGH, 0.0, {}, 60, never, min_run=120) == []
    old = [Observed(9, "RUNNING", False, "", 0, None, 1, None, 130.0)]
    assert verbs(reconcile(old, set(), "authoritative", HIGH, 0.0, {}, 60, never, min_run=120)) == \
        {("hold", PREEMPTED): (9,), ("signal", "USR1"): (9,)}


def test_a_signal_to_an_earlier_run_does_not_count():
    """The job was signalled, requeued (by its wrapper) and restarted between two observations: its new run
    gets its own signal and grace, it is not requeued at once without a checkpoint."""
    jobs = [obs(5, state="RUNNING", held=True, reason="JobHeldAdmin", restarts=1, ac=PREEMPTED)]
    assert verbs(reconcile(jobs, set(), "authoritative", HIGH, 500.0, {5: [100.0, 0]}, 60, never)) == \
        {("signal", "USR1"): (5,)}
    assert verbs(reconcile(jobs, set(), "authoritative", HIGH, 500.0, {5: [100.0, 1]}, 60, never)) == \
        {("requeue_hold", PREEMPTED): (5,)}
    # a signalled run whose hold was lost (kill -9 between the mark and the hold): held again, not re-signalled
    lost = [obs(5, state="RUNNING", restarts=1, ac=PREEMPTED)]
    assert verbs(reconcile(lost, set(), "authoritative", HIGH, 130.0, {5: [100.0, 1]}, 60, never)) == \
        {("hold", PREEMPTED): (5,)}


def test_a_job_held_while_running_is_released_with_its_mark():
    """It started between our observation and our hold: priority 0 while running, and a later requeue would
    bring it back held.  Planned: released (not only unmarked); deferred in advisory mode: hold and mark kept."""
    j = [obs(4, state="RUNNING", held=True, reason="JobHeldAdmin", ac=HELD)]
    assert verbs(reconcile(j, {4}, "advisory", HIGH, 0.0, {}, 60, never)) == {("release", ""): (4,)}
    assert verbs(reconcile(j, {4}, "authoritative", HIGH, 0.0, {}, 60, never)) == {("release", ""): (4,)}
    assert reconcile(j, set(), "advisory", HIGH, 0.0, {}, 60, never) == []
    free = [obs(4, state="RUNNING", ac=HELD)]
    assert verbs(reconcile(free, set(), "advisory", HIGH, 0.0, {}, 60, never)) == {("mark", ""): (4,)}


def test_enactment_stops_at_the_first_call_slurmctld_does_not_answer():
    from slurm_shockwave.slurm import SlurmTimeout

    class Down(FakeCLI):
        def __getattr__(self, name):
            def call(*a, **k):
                self.calls.append((name, a, k))
                raise SlurmTimeout("`scontrol hold 1` timed out after 5s")
            return call

    cli = Down()
    acts = reconcile([obs(1), obs(2, sf=0, held=True, ac=HELD), obs(3, state="RUNNING")], {2}, "authoritative",
                     HIGH, 100.0, {}, 60, never)
    results = Enactor(cli, FakeState()).execute(0, acts, {})
    assert len(cli.calls) == 1 and [s for _, s in results] == ["failed"] + ["skipped"] * (len(acts) - 1)


def test_a_requeued_job_is_released_no_sooner_than_the_restart_gap(tmp_path):
    """Slurm 24.11 kills a restart in the same second as its requeue (the job ends FAILED): the backend waits
    until RESTART_GAP_SECONDS after it first saw the requeued job PENDING before a release."""
    from slurm_shockwave.slurm.commands import RESTART_GAP_SECONDS
    from solver.types import RoundDecision
    from tests.slurm_backend_fakes import fake_backend, sent, slurm_job

    def requeued(job_id, restarts):           # pending again after its requeue, held by us
        return slurm_job(job_id, held=True, state_reason="JobHeldAdmin", priority=0, restart_count=restarts,
                         admin_comment=HELD)
    now, slept = [50.0], []
    b = fake_backend(tmp_path, [slurm_job(5, state="RUNNING", start_time=1), requeued(6, 2)],
                     clock=lambda: now[0], sleep=slept.append)
    b.observe()                                                         # 6 first seen requeued at 50
    now[0] = 100.0
    b.cli.jobs = [requeued(5, 1), requeued(6, 2)]
    b.observe()                                                         # 5 at 100
    now[0] = 100.3
    b.apply(RoundDecision(run=()))                                      # no release: no wait
    assert "release" not in [a.verb for a in sent(b)]
    b.apply(RoundDecision(run=(6,)))                                    # requeued long ago: no wait
    assert slept == [] and [a.job_ids for a in sent(b) if a.verb == "release"] == [(6,)]
    b.apply(RoundDecision(run=(5, 6)))
    assert slept == [pytest.approx(100.0 + RESTART_GAP_SECONDS - 100.3)]
    assert [a.job_ids for a in sent(b) if a.verb == "release"] == [(6,), (5, 6)]


def test_a_run_whose_wrapper_has_not_reported_its_start_is_not_signalled_yet():
    """Its signal handlers are not up: a checkpoint signal would be lost, or kill a shell that has not reached
    its `trap '' USR1` (the job ends FAILED with nothing written).  Once the start is reported it is; a job that
    never reports (no wrapper) after UNREPORTED_START_S."""
    from slurm_shockwave.slurm.enact import UNREPORTED_START_S

    def run(reported, running_for):
        j = Observed(9, "RUNNING", False, "", 1, None, 1, None, running_for, run_reported=reported)
        return verbs(reconcile([j], set(), "authoritative", HIGH, 0.0, {}, 60, never, min_run=3))
    assert run(False, 30.0) == {}
    assert run(True, 30.0) == run(False, UNREPORTED_START_S + 1) == {("hold", PREEMPTED): (9,),
                                                                     ("signal", "USR1"): (9,)}
