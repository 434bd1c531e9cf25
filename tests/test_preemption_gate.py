"""The preemption gate (solver/preemption.py, issue 22 item 1), no Slurm: a running job is preempted only when
the plan keeps it off longer than its measured preemption cost, never in its last round of work; a job it keeps
takes its GPUs back from the newly started jobs; the reasons say why a job is stopped and when it runs again;
the cost is measured from the job's own events; the simulator charges it and counts wasted preemptions."""
from __future__ import annotations

import math
from dataclasses import replace

from solver.preemption import ROUNDS_PER_RESTART, gate, verdict, wasted
from solver.types import RULES, ClusterView, JobPlan, JobView, Policy, RoundDecision
from slurm_shockwave.backends.base import check_decision
from slurm_shockwave.controller.loop import RoundLoop
from slurm_shockwave.controller.reasons import annotate
from slurm_shockwave.events.schema import Event
from slurm_shockwave.events.summary import summarize
from shockwave_lab.sim.cluster import SimulatedCluster
from tests.helpers import ScriptedViews, job, table

ROUND = 20.0


def jv(i, ran: bool, left_s: float, gpus: int = 1, run_s: float = 10 * ROUND) -> JobView:
    """A job with `left_s` seconds of work left (10 steps per second) that has run `run_s` (by default long
    enough for the restart bound to allow a first preemption)."""
    return JobView(job_id=i, arrival_time=0.0, num_gpus=gpus, batch_size=32, epochs_done=0, total_epochs=10,
                   samples_per_epoch=320, steps_done=0.0, total_steps=left_s * 10, throughput=10.0,
                   ran_last_round=ran, run_time=run_s)


def decided(view, run, plans):
    return check_decision(view, RoundDecision(run=tuple(run), plans=plans))


def test_the_rule():
    ran = {"run_s": 10 * ROUND}                                         # it has run 10 rounds, never restarted
    assert not verdict(None, 30.0, 15.0, ROUND, **ran).pays             # within its last round of work
    assert not verdict(20.0, 30.0, 500.0, ROUND, **ran).pays            # back sooner than its cost
    assert verdict(40.0, 30.0, 500.0, ROUND, **ran).pays
    assert verdict(None, 30.0, 500.0, ROUND, **ran).pays                # not planned in the window


def test_a_job_is_preempted_at_most_once_per_ten_rounds_of_its_run():
    """The restart bound (ROUNDS_PER_RESTART = 10: 3 per hour at 120 s rounds): the n-th preemption only after
    10 n rounds of run, whatever the plan says; 0 turns it off."""
    assert ROUNDS_PER_RESTART == 10
    off = 1000.0                                                        # the plan keeps it off long: it would pay
    assert not verdict(off, 30.0, 5000.0, ROUND, run_s=9 * ROUND).pays
    assert verdict(off, 30.0, 5000.0, ROUND, run_s=10 * ROUND).pays
    v = verdict(off, 30.0, 5000.0, ROUND, restarts=2, run_s=29 * ROUND)
    assert not v.pays and v.why == "2 restarts in 580 s of run: at most one per 10 rounds of run"
    assert verdict(off, 30.0, 5000.0, ROUND, restarts=2, run_s=30 * ROUND).pays
    assert verdict(off, 30.0, 5000.0, ROUND, restarts=5, run_s=0.0, rounds_per_restart=0).pays
    assert wasted(15.0, ROUND) == "last_round"
    assert wasted(500.0, ROUND, restarted_at=107.0, boundary=120.0) == "restarted_early"
    assert wasted(500.0, ROUND, restarted_at=125.0, boundary=120.0) is None
    assert "kept" in RULES


def test_a_job_in_its_last_round_keeps_its_gpus_from_the_newest_start():
    view = ClusterView(now=1000.0, round_index=5, round_length=ROUND, num_gpus=2,
                       jobs=(jv(1, True, 15.0), jv(2, True, 900.0), jv(3, False, 900.0), jv(4, False, 900.0)))
    d = decided(view, (3, 4), {3: JobPlan(3, rule="market"), 4: JobPlan(4, rule="market"),
                               2: JobPlan(2, next_offset=3)})
    g, verdicts = gate(view, d, {2: 12.0}, 30.0)
    assert set(g.run) == {1, 3} and g.plans[1].rule == "kept" and g.plans[4].next_offset == 1
    assert not verdicts[1].pays and verdicts[2].pays and verdicts[2].cost_s == 12.0
    check_decision(view, g)                                             # still within capacity, placed
    plans = annotate(view, g, "authoritative").plans
    assert plans[1].reason.startswith("kept running: within its last round of work")
    assert plans[2].reason.startswith("being stopped: off for 60 s, more than its preemption cost (12 s, measured)")
    assert "released at t+1060s (round +3)" in plans[2].reason and plans[2].expected_start == 1060.0


def test_a_preemption_whose_gpus_no_start_takes_is_not_made():
    """Jobs 1 and 2 lose their round to job 4, a 4-GPU start; the restart bound keeps job 3 (it has run 5 rounds), so
    job 4 goes back out: 1 and 2 then keep running (their GPUs would idle), and the round restarts nobody."""
    view = ClusterView(now=1000.0, round_index=5, round_length=ROUND, num_gpus=4,
                       jobs=(jv(1, True, 900.0), jv(2, True, 800.0), jv(3, True, 900.0, run_s=5 * ROUND),
                             jv(4, False, 900.0, gpus=4)))
    plans = {4: JobPlan(4, rule="market"), **{i: JobPlan(i, next_offset=5) for i in (1, 2, 3)}}
    g, verdicts = gate(view, decided(view, (4,), plans), {}, 5.0)
    assert sorted(g.run) == [1, 2, 3] and {g.plans[i].rule for i in (1, 2, 3)} == {"kept"}
    assert not any(v.pays for v in verdicts.values())
    assert verdicts[2].why == verdicts[1].why == "its GPUs would idle: nothing starts there"
    check_decision(view, g)
    # a start that still fits beside the kept job takes the preempted ones' GPUs: they are stopped
    view = replace(view, jobs=(*view.jobs[:3], jv(4, False, 900.0, gpus=3)))
    plans[4] = JobPlan(4, rule="market")
    g, verdicts = gate(view, decided(view, (4,), plans), {}, 5.0)
    assert sorted(g.run) == [3, 4] and verdicts[1].pays and verdicts[2].pays
    # a policy that runs nothing there leaves the GPUs idle by its own choice: the preemptions stand
    g, verdicts = gate(view, decided(view, (3,), plans), {}, 5.0)
    assert g.run == (3,) and verdicts[1].pays and verdicts[2].pays


def test_the_work_left_is_the_least_of_the_plans_prediction_and_the_views():
    """The plan predicts whole epochs at the batch sizes it expects; the view's steps at its throughput may say less
    (a last epoch faster than predicted), and the controller counts waste by the view's: the gate reads the least."""
    from solver.preemption import remaining_s, work_left_s
    view = ClusterView(now=1000.0, round_index=5, round_length=ROUND, num_gpus=1,
                       jobs=(jv(1, True, 15.0), jv(2, False, 900.0)))
    plans = {1: JobPlan(1, next_offset=3, predicted_remaining_s=600.0), 2: JobPlan(2, rule="market")}
    assert remaining_s(view.jobs[0], plans[1]) == 600.0 and work_left_s(view.jobs[0], plans[1]) == 15.0
    g, verdicts = gate(view, decided(view, (2,), plans), {}, 5.0)
    assert g.run == (1,) and not verdicts[1].pays and verdicts[1].why == "within its last round of work (15 s left)"
    assert work_left_s(view.jobs[1], JobPlan(2, predicted_remaining_s=10.0)) == 10.0   # the plan's, when it is less
    from dataclasses import replace
    assert work_left_s(replace(jv(3, True, 5.0), throughput=0.0), None) is None                # nothing known


def test_the_work_left_is_read_on_the_gpus_the_job_keeps():
    """An elastic job lent 2 of its 16 GPUs runs at its 2-GPU rate: 15 s left at its 16-GPU throughput is 120 s there,
    not its last round; one lent more than it asked keeps its asked count (`held`); a rigid job on a slower type
    has its steps at that type's rate; not running, or nothing known of its count: its throughput's."""
    from dataclasses import replace

    from solver.preemption import LastRounds, work_left_s
    lent = replace(jv(1, True, 15.0, gpus=16), gpus_range=(1, 16), running_gpus=2,
                   throughput_by_gpus={1: 0.7, 2: 1.25, 16: 10.0})
    assert work_left_s(lent, None) == 120.0 and work_left_s(lent, JobPlan(1, predicted_remaining_s=8.0)) == 64.0
    view = ClusterView(now=1000.0, round_index=5, round_length=ROUND, num_gpus=16,
                       jobs=(lent, jv(2, False, 900.0, gpus=16)))       # the start takes every GPU
    g, verdicts = gate(view, decided(view, (2,), {2: JobPlan(2, rule="market")}), {}, 5.0)
    assert g.run == (2,) and verdicts[1].pays and verdicts[1].remaining_s == 120.0  # lent GPUs: no restart bound
    memory = LastRounds()
    memory.note(view)
    assert memory._left == {}                                           # not within its last round: not counted
    assert work_left_s(replace(lent, running_gpus=16), None) == 15.0
    assert work_left_s(replace(lent, num_gpus=2, running_gpus=16, throughput=1.25), None) == 120.0  # keeps its 2
    slow = replace(jv(3, True, 15.0), running_type="k80", throughput_by_type={"v100": 10.0, "k80": 2.5})
    assert work_left_s(slow, None) == 60.0 and work_left_s(replace(slow, running_type=None), None) == 15.0
    assert work_left_s(replace(lent, ran_last_round=False), None) == 15.0
    assert work_left_s(replace(lent, throughput_by_gpus={}), None) == 15.0   # its count's rate unknown


def test_a_job_planned_back_sooner_than_its_cost_is_kept_running():
    view = ClusterView(now=0.0, round_index=1, round_length=ROUND, num_gpus=1, jobs=(jv(1, True, 900.0),
                                                                                     jv(2, False, 900.0)))
    d = decided(view, (2,), {2: JobPlan(2, rule="market"), 1: JobPlan(1, next_offset=1)})
    g, verdicts = gate(view, d, {}, 30.0)                               # 20 s off < 30 s (default) cost
    assert g.run == (1,) and "sooner than its preemption cost (30 s, default)" in verdicts[1].why
    g, _ = gate(view, d, {1: 5.0}, 30.0)                                # measured: 5 s, pays
    assert g.run == (2,)


def test_a_kept_job_that_does_not_fit_is_preempted_after_all():
    """Only the newly started job 3 (1 GPU) can give GPUs back; job 1 needs 2: it is preempted after all."""
    view = ClusterView(now=0.0, round_index=1, round_length=ROUND, num_gpus=2,
                       jobs=(jv(1, True, 10.0, gpus=2), jv(2, True, 900.0), jv(3, False, 900.0)))
    g, verdicts = gate(view, decided(view, (2, 3), {}), {}, 30.0)
    assert set(g.run) == {2, 3} and verdicts[1].pays and "its GPUs went to running jobs" in verdicts[1].why
    # a job whose preemption is under way is not judged again
    g, verdicts = gate(view, decided(view, (2, 3), {}), {}, 30.0, stopping=frozenset({1}))
    assert 1 not in verdicts


def test_the_preemption_cost_is_measured_from_the_jobs_own_events():
    t = 1_700_000_000.0

    def ev(kind, ts, restart, **kw):
        return Event(kind=kind, job="7", ts=t + ts, restart=restart, **kw)
    events = [ev("start", 0, 0), ev("epoch_end", 10, 0, epoch=0, batch_size=32, duration_s=10.0),
              ev("signal", 15, 0, signal=10, reason="checkpoint request"), ev("checkpoint", 18, 0, path="c"),
              ev("exit", 19, 0, exit_code=0), ev("start", 60, 1),
              ev("epoch_end", 75, 1, epoch=1, batch_size=32, duration_s=10.0)]
    p = summarize(events)
    # checkpoint 15 -> 19 (4 s) + restart 60 -> 75 less the 10 s epoch (5 s); the 41 s held in between is not
    assert p.preempt_cost_s == 9.0 and p.preemptions_measured == 1


class Alternate(Policy):
    """Run the job that did not run last round: preempts every round, even a job about to finish."""
    name = "alternate"

    def decide(self, view):
        fresh = [j for j in view.jobs if not j.ran_last_round] or list(view.jobs)
        return RoundDecision(run=(min(j.job_id for j in fresh),))


def test_the_simulator_counts_wasted_preemptions_and_the_gate_removes_them():
    thr = table({("ResNet-18", 32, 1): 10.0})
    jobs = [job(0, 2500, isolated_runtime=250), job(1, 2500, isolated_runtime=250)]
    off = RoundLoop(SimulatedCluster(jobs, thr, 1, restart_penalty=20.0), Alternate())
    off.run()
    on = RoundLoop(SimulatedCluster(jobs, thr, 1, restart_penalty=20.0), Alternate(), preemption_cost_s=20.0)
    on.run()
    assert off.preemptions["wasted"] > 0 and off.preemptions["kept"] == 0
    assert on.preemptions["wasted"] == 0 and on.preemptions["kept"] > 0
    assert on.preemptions["preempted"] < off.preemptions["preempted"]
    assert on.decided_by()["all"].get("kept", 0) > 0


class _State(dict):
    def get(self, key, default=None):
        return super().get(key, default)

    def put(self, key, value):
        self[key] = value


def test_the_controller_counts_a_restart_before_the_next_round_as_wasted():
    from types import SimpleNamespace

    from slurm_shockwave.slurm.preemptions import PreemptionLog

    def slurm_job(restart, start, state="RUNNING"):
        return SimpleNamespace(state=state, restart_count=restart, start_time=start, finished=False)
    state = _State()
    log = PreemptionLog(state)
    log.signalled(5, 0, 1000.0, 500.0, ROUND)
    log.signalled(6, 0, 1000.0, 500.0, ROUND)
    log.signalled(7, 0, 1000.0, 10.0, ROUND)                          # its last round: wasted at once
    log.observe({5: slurm_job(1, 1007), 6: slurm_job(0, 900), 7: slurm_job(0, 900)}, ROUND, 1012.4)
    assert log.counts["wasted_restarted_early"] == 1 and "5" not in log.open   # ran again before round k+1
    log.observe({6: slurm_job(1, 1013), 7: slurm_job(1, 1013)}, ROUND, 1032.0)
    assert log.counts == {"preempted": 3, "kept": 0, "wasted": 2, "wasted_last_round": 1,
                          "wasted_restarted_early": 1} and not log.open
    log.save()
    assert PreemptionLog(state).counts == log.counts                   # counts survive a restart


def test_the_job_the_guard_starts_first_is_a_reservation_the_restart_bound_does_not_take_back():
    """A job just started (its restart bound keeps it) takes its GPU back from a newly planned gang, but not from
    the first job of the starvation guard: a gang as large as the cluster starts at last.  A keep that saves a
    preemption's waste (a job in its last round of work) delays the guard's gang a round."""
    for rule, kept in (("deadline", True), ("guard", False)):
        view = ClusterView(now=0.0, round_index=3, round_length=ROUND, num_gpus=2,
                           jobs=(jv(1, True, 900.0, run_s=ROUND), jv(2, False, 300.0, gpus=2)))
        d = decided(view, (2,), {2: JobPlan(2, rule=rule), 1: JobPlan(1, next_offset=3)})
        g, verdicts = gate(view, d, {}, 30.0)
        assert (g.run == (1,)) is kept and (g.run == (2,)) is not kept
        assert verdicts[1].why.startswith("0 restarts in 20 s of run: at most one per 10 rounds of run")
        assert verdicts[1].pays is not kept
        if not kept:
            assert verdicts[1].why.endswith("but its GPUs went to the job that waited the starvation bound longest")
    # a job in its last round of work (15 s left) keeps its GPU from the guard's gang too: it waits a round at most
    view = ClusterView(now=0.0, round_index=3, round_length=ROUND, num_gpus=2,
                       jobs=(jv(1, True, 15.0), jv(2, False, 300.0, gpus=2)))
    g, verdicts = gate(view, decided(view, (2,), {2: JobPlan(2, rule="guard"), 1: JobPlan(1, next_offset=3)}), {}, 30.0)
    assert g.run == (1,) and not verdicts[1].pays and g.plans[2].next_offset == 1


def test_a_job_that_restarted_in_the_round_before_keeps_its_gpu_from_the_guard_unless_the_guard_job_is_wide():
    """The guard's reservation does not take a job out again the round after its restart (that restart would be
    wasted; found on the study's traces: the worst restarts per hour, docs/results_notes.md): the guard's job waits a
    round.  A guard job asking for more than half the GPUs still gets them: where small jobs keep restarting, it
    would never start (openb_p25: an 8-GPU job on 8 GPUs waited 13,650 s)."""
    fresh = replace(jv(1, True, 900.0, run_s=ROUND), restarts=1)         # the restart bound keeps it
    for guard_gpus, fresh_ids, runs in ((1, {1}, (3, 1)), (1, set(), (3, 2)), (2, {1}, (2,))):
        view = ClusterView(now=0.0, round_index=3, round_length=ROUND, num_gpus=2,
                           jobs=(fresh, jv(2, False, 300.0, gpus=guard_gpus), jv(3, True, 900.0)))
        run = (3, 2) if guard_gpus == 1 else (2,)
        g, verdicts = gate(view, decided(view, run, {2: JobPlan(2, rule="guard")}), {}, 30.0, fresh=fresh_ids)
        assert g.run == runs, (guard_gpus, fresh_ids, g.run)
        assert verdicts[1].pays is (1 not in runs)


def test_a_start_past_its_latest_fair_start_keeps_its_gpus_from_a_kept_job_whose_slack_covers_it():
    """A start past its latest fair start (`fair_finish_in_s` <= 0) takes its GPUs from a job the restart bound keeps
    when that job's slack covers the late job's remaining time (the elastic study's Saturn workloads,
    docs/results_notes.md); not when it is shorter (two late jobs would take turns), nor for a start within its fair
    start, nor from non-finite plan values."""
    nan, inf = math.nan, math.inf
    cases = ((0.0, 300.0, 1000.0, (2,)), (0.0, 300.0, 100.0, (1,)), (50.0, 300.0, 1000.0, (1,)),
             (0.0, 300.0, None, (2,)), (nan, 300.0, 1000.0, (1,)), (-inf, 300.0, 1000.0, (1,)),
             (0.0, nan, 1000.0, (1,)), (0.0, inf, 1000.0, (1,)))
    for late_in, left, slack, runs in cases:
        view = ClusterView(now=0.0, round_index=3, round_length=ROUND, num_gpus=2,
                           jobs=(jv(1, True, 900.0, run_s=ROUND), jv(2, False, 300.0, gpus=2)))
        plans = {2: JobPlan(2, rule="deadline", fair_finish_in_s=late_in, predicted_remaining_s=left),
                 1: JobPlan(1, next_offset=3, fair_finish_in_s=slack)}
        g, verdicts = gate(view, decided(view, (2,), plans), {}, 30.0)
        assert g.run == runs and verdicts[1].pays is (runs == (2,)), (late_in, left, slack, g.run)
        if runs == (2,):
            assert verdicts[1].why.endswith("but its GPUs went to a job past its latest fair start")


class _Scripted(Policy):
    """Round k runs `runs[k]`; job 2 by the starvation guard's rule."""

    name = "scripted"

    def __init__(self, runs):
        self.runs = runs

    def decide(self, view):
        run = self.runs[view.round_index]
        return RoundDecision(run=run, plans={j: JobPlan(j, rule="guard" if j == 2 else "deadline") for j in run})


def test_the_round_loop_tells_the_gate_which_jobs_restarted_in_the_round_before():
    """A job that ran in round 1 but not in round 0, and had run before (a restart), keeps its GPU in round 2 from the
    guard's 1-GPU job; one that also ran in round 0 (its restart was earlier) gives it up."""
    def views(restarted):
        one = [jv(1, restarted is False, 900.0, run_s=ROUND), jv(1, True, 900.0, run_s=ROUND),
               replace(jv(1, True, 900.0, run_s=ROUND), restarts=1)]
        return [ClusterView(now=k * ROUND, round_index=k, round_length=ROUND, num_gpus=2,
                            jobs=(one[k], jv(2, False, 300.0), jv(3, True, 900.0))) for k in range(3)]
    for restarted, first, last in ((True, (3,), (3, 1)), (False, (3, 1), (3, 2))):
        backend = ScriptedViews(views(restarted))
        RoundLoop(backend, _Scripted([first, (3, 1), (3, 2)]), preemption_cost_s=5.0).run()
        assert [d.run for d in backend.decisions] == [first, (3, 1), last], restarted


def test_a_kept_job_stays_on_the_type_it_runs_on():
    """On a cluster of two types a kept job takes its GPU back on the type it runs on (a move is a restart too),
    from the newcomer placed there, not from the last one started on the other type; unknown: any type (the last
    one started)."""
    from dataclasses import replace as with_
    base = jv(1, True, 900.0, run_s=ROUND)
    for running, evicted in (("a", 3), (None, 2)):
        view = ClusterView(now=0.0, round_index=3, round_length=ROUND, num_gpus=2, capacity={"a": 1, "b": 1},
                           jobs=(with_(base, running_type=running), jv(2, False, 300.0), jv(3, False, 300.0)))
        d = RoundDecision(run=(3, 2), placement={2: {"b": 1}, 3: {"a": 1}},     # 2 is the last started
                          plans={2: JobPlan(2, rule="deadline"), 3: JobPlan(3, rule="deadline"),
                                 1: JobPlan(1, next_offset=3)})
        g, _ = gate(view, d, {}, 30.0)
        assert evicted not in g.run and 1 in g.run
        if running:
            assert g.placement[1] == {"a": 1}


def test_a_kept_job_takes_from_its_own_user_first_and_never_from_a_poorer_user():
    """Fairness between users comes before the restart bound: a kept job's GPU comes back from its own user's
    newcomer before another's, and never from a user who would then hold fewer GPUs than its user."""
    from dataclasses import replace as with_
    a1, a2 = with_(jv(1, True, 900.0, run_s=ROUND), user="a"), with_(jv(2, False, 300.0), user="a")
    b3 = with_(jv(3, False, 300.0), user="b")
    view = ClusterView(now=0.0, round_index=3, round_length=ROUND, num_gpus=2, jobs=(a1, a2, b3))
    d = decided(view, (2, 3), {2: JobPlan(2, rule="deadline"), 3: JobPlan(3, rule="deadline"),
                               1: JobPlan(1, next_offset=3)})
    g, verdicts = gate(view, d, {}, 30.0)
    assert set(g.run) == {1, 3} and not verdicts[1].pays                # user a's own newcomer made room
    a4 = with_(jv(4, True, 900.0), user="a")                             # user a already holds a GPU
    view = ClusterView(now=0.0, round_index=3, round_length=ROUND, num_gpus=2, jobs=(a1, a4, b3))
    d = decided(view, (4, 3), {4: JobPlan(4, rule="deadline"), 3: JobPlan(3, rule="deadline"),
                               1: JobPlan(1, next_offset=3)})
    g, verdicts = gate(view, d, {}, 30.0)
    assert set(g.run) == {4, 3} and verdicts[1].pays
    assert verdicts[1].why.endswith("but its GPUs went to running jobs or other users")


class _AllBut1(Policy):
    name = "all-but-1"

    def decide(self, view):
        return RoundDecision(run=tuple(j.job_id for j in view.jobs if j.job_id != 1),
                             plans={j.job_id: JobPlan(j.job_id) for j in view.jobs})


def test_a_job_whose_estimate_never_grows_past_a_round_is_kept_in_its_last_round_once_not_forever():
    """Its hints say one round of work (epochs=1, no reports): a job that outlives it every round was kept by the
    last-round rule forever (found 2026-12-06 by a real-Slurm test).  Kept in the round it is first found there and
    the next (the slack for its end, LAST_ROUND_SLACK), preempted in the one after with the reason; a new run (it
    stopped running in between) is kept again."""
    from solver.preemption import LAST_ROUND_SLACK
    assert LAST_ROUND_SLACK == 1
    stuck, other = jv(1, True, 2.0), jv(2, False, 900.0)
    rounds = [(stuck, other)] * 3 + [(jv(1, False, 2.0), other), (stuck, other)]
    views = [ClusterView(now=k * ROUND, round_index=k, round_length=ROUND, num_gpus=1, jobs=jobs)
             for k, jobs in enumerate(rounds)]
    backend = ScriptedViews(views)
    loop = RoundLoop(backend, _AllBut1(), preemption_cost_s=5.0, rounds_per_restart=0)
    loop.run()
    assert [d.run for d in backend.decisions] == [(1,), (1,), (2,), (2,), (1,)]
    assert backend.decisions[1].plans[1].reason.startswith("within its last round of work (2 s left)")
    assert backend.decisions[2].plans[1].reason.startswith(
        "ran past the last round of work it was kept for (2 s said left); not planned in the window")
    assert loop.preemptions["kept"] == 3 and loop.preemptions["preempted"] == 1



def test_last_rounds_keeps_a_job_while_its_steps_left_halve_and_remembers_a_run_not_a_job():
    """LastRounds: found within its last round (by its own steps) in round 0; from round 2 on (LAST_ROUND_SLACK) a job
    whose steps left did not halve in the two rounds before has outlived it (no progress; past its declared work:
    none left), one that ends slower than its estimate still halves them.  A job that stopped running is forgotten,
    and its next run counts afresh.  A job whose plan alone says it is ending (steps left: 900 s) is not counted."""
    from dataclasses import replace as with_

    from solver.preemption import LastRounds

    def view_at(k):
        slow = max(0.0, 100.0 - 30.0 * k)                       # 100 s left by its estimate; it runs slower
        return ClusterView(now=k * ROUND, round_index=k, round_length=ROUND, num_gpus=4,
                           jobs=(jv(1, True, 2.0), jv(2, True, 900.0), jv(3, True, slow), jv(4, True, 0.0)))
    d = decided(view_at(0), (1,), {1: JobPlan(1), 2: JobPlan(2, next_offset=3, predicted_remaining_s=0.001)})
    memory, outlived = LastRounds(), []
    for k in range(4):
        outlived.append(memory.outlived(view_at(k)))
        memory.note(view_at(k))
    assert outlived == [frozenset(), frozenset(), frozenset({1, 4}), frozenset({1, 4})]
    assert not gate(view_at(0), d, {}, 5.0, rounds_per_restart=0, outlived=outlived[-1])[1][2].pays   # plan: 0.001 s
    v = view_at(4)
    stopped = with_(v, jobs=(with_(v.jobs[0], ran_last_round=False), *v.jobs[1:]))
    assert memory.outlived(stopped) == frozenset({4})                # job 3: 0 left, down from 40 two rounds before
    memory.note(v)
    assert memory.outlived(v) == frozenset({4})                      # job 1's new run: found this round
    memory.note(v)
    assert memory.outlived(v) == frozenset({1, 3, 4})                # job 3 now stays at 0: past its work
