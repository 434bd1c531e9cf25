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
    assert [(a.verb, a.value, a.job_ids) for a in first] == [("hold", PREEMPTED, (5,)), ("signal", "B:USR1", (5,))]
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
        {("hold", PREEMPTED): (8,), ("signal", "B:USR1"): (8,)}
    assert reconcile(jobs, {8}, "advisory", HIGH, 0.0, {}, 60, never) == []


def test_a_job_that_just_started_is_not_preempted_yet():
    young = [Observed(9, "RUNNING", False, "", 0, None, 1, None, 30.0)]
    assert reconcile(young, set(), "authoritative", HIGH, 0.0, {}, 60, never, min_run=120) == []
    old = [Observed(9, "RUNNING", False, "", 0, None, 1, None, 130.0)]
    assert verbs(reconcile(old, set(), "authoritative", HIGH, 0.0, {}, 60, never, min_run=120)) == \
        {("hold", PREEMPTED): (9,), ("signal", "B:USR1"): (9,)}


def test_a_signal_to_an_earlier_run_does_not_count():
    """The job was signalled, requeued (by its wrapper) and restarted between two observations: its new run
    gets its own signal and grace, it is not requeued at once without a checkpoint."""
    jobs = [obs(5, state="RUNNING", held=True, reason="JobHeldAdmin", restarts=1, ac=PREEMPTED)]
    assert verbs(reconcile(jobs, set(), "authoritative", HIGH, 500.0, {5: [100.0, 0]}, 60, never)) == \
        {("signal", "B:USR1"): (5,)}
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
                                                                     ("signal", "B:USR1"): (9,)}


# ---------------------------------------------------------------- each job's own checkpoint signal (issue 33)
def test_each_job_gets_its_own_signal_grouped_per_signal_and_scope():
    """`B:NAME` goes to the batch shell, `NAME` to the job's steps (as `sbatch --signal`); one action (one scancel)
    per signal and scope; a job that declares none gets the configured one at its batch shell; idempotent."""
    jobs = [obs(1, state="RUNNING"), Observed(2, "RUNNING", False, "", 0, None, 1, signal="USR2"),
            Observed(3, "RUNNING", False, "", 0, None, 1, signal="USR2"),
            Observed(4, "RUNNING", False, "", 0, None, 1, signal="B:USR1"),
            Observed(5, "RUNNING", False, "", 0, None, 1, signal="B:TERM")]
    acts = reconcile(jobs, set(), "authoritative", HIGH, 100.0, {}, 60, never)
    assert {a.value: a.job_ids for a in acts if a.verb == "signal"} == {"B:USR1": (1, 4), "USR2": (2, 3),
                                                                        "B:TERM": (5,)}
    assert [a.verb for a in acts].count("signal") == 3
    signalled = {j.job_id: [100.0, 0] for j in jobs}
    held = [Observed(j.job_id, "RUNNING", True, "JobHeldAdmin", 0, None, 1, admin_comment=PREEMPTED, mark="held",
                     signal=j.signal) for j in jobs]
    assert reconcile(held, set(), "authoritative", HIGH, 110.0, signalled, 60, never) == []
    # the configured signal is the fallback, to the batch shell
    acts = reconcile([obs(1, state="RUNNING")], set(), "authoritative", HIGH, 100.0, {}, 60, never, signal="USR2")
    assert [(a.verb, a.value) for a in acts if a.verb == "signal"] == [("signal", "B:USR2")]


def test_a_declared_signal_that_would_kill_is_never_sent():
    jobs = [Observed(i, "RUNNING", False, "", 0, None, 1, signal=s) for i, s in enumerate(["KILL", "B:STOP", "SEGV"])]
    acts = reconcile(jobs, set(), "authoritative", HIGH, 100.0, {}, 60, never, signal="USR2")
    assert {a.value: a.job_ids for a in acts if a.verb == "signal"} == {"B:USR2": (0, 1, 2)}


def test_the_enactor_sends_to_the_batch_shell_or_to_the_steps():
    cli = FakeCLI()
    acts = reconcile([obs(1, state="RUNNING"), Observed(2, "RUNNING", False, "", 0, None, 1, signal="USR2")],
                     set(), "authoritative", HIGH, 100.0, {}, 60, never)
    Enactor(cli, FakeState()).execute(0, acts, {})
    assert [(a, k) for n, a, k in cli.calls if n == "signal"] == [(([1], "USR1"), {"scope": "batch"}),
                                                                  (([2], "USR2"), {"scope": "steps"})]


def test_the_killing_signals_are_the_configs():
    """hints.py may not import the controller's config (test_architecture): the two sets are kept equal here."""
    from slurm_shockwave.controller.config import _FORBIDDEN_SIGNALS
    from slurm_shockwave.slurm.hints import KILLING_SIGNALS
    assert set(KILLING_SIGNALS) == _FORBIDDEN_SIGNALS


@pytest.mark.parametrize("comment, expected", [
    ("shockwave signal=USR2", {"signal": "USR2"}), ("shockwave,epochs=3,signal=B:USR1@90", {"epochs": 3,
                                                                                           "signal": "B:USR1"}),
    ("shockwave:signal=sigusr2 epochs=2", {"epochs": 2, "signal": "USR2"}), ("shockwave signal=12", {"signal": "USR2"}),
    ("shockwave signal=rb:term", {"signal": "B:TERM"}), ("shockwave signal=KILL", {"signal": "KILL"})])
def test_the_signal_hint(comment, expected):
    from slurm_shockwave.slurm.hints import parse_hints
    assert parse_hints(comment, "shockwave").as_dict() == expected


@pytest.mark.parametrize("comment", ["shockwave signal=FOO", "shockwave signal=USR1 signal=USR2", "shockwave signal=B:",
                                     "shockwave signal=", "shockwave signal=USR2@x"])
def test_an_invalid_signal_hint_is_refused(comment):
    from slurm_shockwave.slurm.hints import HintError, parse_hints
    with pytest.raises(HintError, match="signal"):
        parse_hints(comment, "shockwave")


def test_the_signal_of_the_submit_line_is_read_where_slurm_shows_it():
    """Only 26.05's `squeue --json` has `submit_line` (recorded: job 1 was submitted with --signal=B:USR1@30);
    22.05 and 24.11 show a job's --signal nowhere (squeue --json, scontrol show job, squeue -O: checked live)."""
    from pathlib import Path

    from slurm_shockwave.slurm.parse import parse_squeue_json
    data = Path(__file__).resolve().parent / "data" / "slurm"
    for version, want in (("22.05", ""), ("24.11", ""), ("26.05", "B:USR1")):
        jobs = {j.job_id: j for j in parse_squeue_json((data / version / "squeue_mixed.json").read_text())}
        assert jobs[1].signal == want and all(j.signal == "" for i, j in jobs.items() if i != 1)


def test_a_submitit_job_is_recognised_and_a_killing_signal_is_reported(tmp_path):
    """The backend end to end on fakes: a submitit job (its script `.submission_file_<hex>.sh`, or its output
    `<id>_0_log.out`) is sent USR2 at its steps; a hint beats that; a job declaring KILL gets the configured signal
    and status says why; the journal holds what was sent."""
    from dataclasses import replace

    from slurm_shockwave.slurm.jobview import job_signal
    from solver.types import RoundDecision
    from tests.slurm_backend_fakes import fake_backend, sent, slurm_job
    run = dict(state="RUNNING", start_time=1)
    jobs = [slurm_job(1, **run, command="/home/a/logs/.submission_file_0f3a9c.sh"),
            slurm_job(2, **run, std_out="/home/a/logs/%j_0_log.out"),
            slurm_job(3, **run, command="/home/a/logs/.submission_file_0f3a9c.sh", comment="shockwave signal=B:USR1"),
            slurm_job(4, **run, comment="shockwave signal=KILL"), slurm_job(5, **run, command="/home/a/train.sh"),
            slurm_job(6, **run, signal="B:TERM")]
    assert job_signal(replace(jobs[1], std_out="/l/123_0_log.out"), {}, "USR1") == ("USR2", None)
    assert job_signal(replace(jobs[1], std_out="/l/123_0_log.out.bak"), {}, "USR1") == ("B:USR1", None)
    b = fake_backend(tmp_path, jobs, mode="authoritative", clock=lambda: 1000.0)
    b.observe()
    b.apply(RoundDecision(run=()))
    assert {a.value: a.job_ids for a in sent(b) if a.verb == "signal"} == {"USR2": (1, 2), "B:USR1": (3, 4, 5),
                                                                         "B:TERM": (6,)}
    calls = [(ids, k["sig"], k["scope"]) for n, ids, k in b.cli.calls if n == "signal"]
    assert sorted(calls) == [([1, 2], "USR2", "steps"), ([3, 4, 5], "USR1", "batch"), ([6], "TERM", "batch")]
    warnings = b.round_context().jobs["4"].warnings
    assert any("KILL would kill it" in w and "B:USR1" in w for w in warnings), warnings
    assert not any("signal" in w for w in b.round_context().jobs["1"].warnings)

