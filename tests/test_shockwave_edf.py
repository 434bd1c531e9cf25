"""shockwave-edf, the default: no market; finishing jobs, the makespan's critical path, then the earliest
fair-finish deadline run first, each to completion; the plan's cadence, state, and the hostile-declaration cap."""
import json
import random
from dataclasses import replace

from solver.policies import default_policy
from solver.policies.shockwave_edf import ShockwaveEDF
from solver.types import JobView
from tests.helpers import mkjob, view


def test_it_is_the_default_and_never_calls_a_solver():
    assert default_policy() is ShockwaveEDF
    assert not hasattr(ShockwaveEDF(), "backend")


def test_equal_jobs_run_without_time_slicing():
    # four equal jobs on 2 GPUs: the two with the earliest fair-finish deadline (ties: job id) run in every
    # round until they finish instead of the four taking turns (every turn costs a restart)
    jobs = [mkjob(i, total=500, d=200.0) for i in range(4)]
    pol = ShockwaveEDF({"future_rounds": 8, "reopt_rounds": 100})
    runs = [set(pol.decide(view(jobs, r=r, G=2)).run) for r in range(8)]
    assert runs == [{0, 1}] * 8


def test_earliest_fair_finish_deadline_runs_first():
    # same work; the job that arrived first has the earlier fair-finish deadline and runs; the critical path
    # (the job with far more work than the rest) runs too
    jobs = [mkjob(0, total=10, arrival=600.0), mkjob(1, total=10, arrival=0.0), mkjob(2, total=10, arrival=300.0),
            mkjob(3, total=400, arrival=600.0)]
    d = ShockwaveEDF().decide(view(jobs, r=10, G=2, now=1200.0))
    assert set(d.run) == {1, 3}
    meta = d.plans
    assert meta[3].critical_path and not meta[1].critical_path
    assert meta[3].rule == "critical_path" and meta[1].rule == "deadline"
    assert meta[1].fair_finish_in_s < meta[2].fair_finish_in_s < meta[0].fair_finish_in_s


def test_decide_never_raises_on_garbage():
    bad = JobView(job_id="x", arrival_time=0.0, num_gpus=1, batch_size=0, epochs_done=5, total_epochs=0,
                  samples_per_epoch=0, steps_done=0, total_steps=0, throughput=0.0)
    d = ShockwaveEDF().decide(view([bad, mkjob(1)], G=1))
    assert len(d.run) <= 1


def test_empty_cluster():
    d = ShockwaveEDF().decide(view([], G=4))
    assert d.run == ()


def test_state_dict_roundtrip_continues_identically():
    rng = random.Random(3)
    jobs = [mkjob(i, g=rng.choice([1, 2]), total=rng.randint(20, 80), d=rng.uniform(50, 200),
                  arrival=0.0) for i in range(7)]
    a = ShockwaveEDF({"reopt_rounds": 4})
    for r in range(3):
        a.decide(view(jobs, r=r, G=4))
    state = json.loads(json.dumps(a.state_dict()))
    b = ShockwaveEDF({"reopt_rounds": 4})
    b.load_state_dict(state)
    for r in range(3, 7):
        da, db = a.decide(view(jobs, r=r, G=4)), b.decide(view(jobs, r=r, G=4))
        assert da.run == db.run and da.path == db.path and da.plans == db.plans


def test_declaring_a_huge_job_cannot_buy_the_cluster_through_the_critical_path():
    # mallory declares 10^6 epochs for each of her 4 jobs: all four are on the critical path, but it takes at
    # most her equal share (2 of 4 GPUs with two users); alice's jobs, due much earlier, get the other two
    jobs = ([replace(mkjob(f"m{i}", total=10 ** 6), user="mallory") for i in range(4)]
            + [replace(mkjob(f"a{i}", total=10), user="alice") for i in range(4)])
    d = ShockwaveEDF().decide(view(jobs, r=0, G=4))
    assert sorted(i[0] for i in d.run) == ["a", "a", "m", "m"]
    assert sum(d.plans[f"m{i}"].critical_path for i in range(4)) == 2
    # one user alone: the critical path is not capped
    d = ShockwaveEDF().decide(view([replace(j, user="alice") for j in jobs], r=0, G=4))
    assert sorted(d.run) == ["m0", "m1", "m2", "m3"]


def test_a_near_longest_job_with_more_slack_than_the_window_waits_until_its_slack_runs_out():
    # on 8 GPUs the longest job L (100,000 s left) sets the makespan bound; N2 (98,000 s) is within one plan window
    # (20 rounds of 120 s) of it and on the critical path; N1 (90,000 s) is within 15% of it but has 10,000 s of
    # slack, more than a window: it is not (three such jobs once held two thirds of a cluster for hours,
    # docs/public-traces.md), and the short jobs due before it run
    short = [mkjob(f"s{i}", g=2, total=10) for i in range(3)]
    big = {"L": 1000, "N1": 900, "N2": 980}
    jobs = [mkjob(k, g=2, total=n, arrival=600.0) for k, n in big.items()] + short
    d = ShockwaveEDF().decide(view(jobs, r=10, G=8, now=1200.0))
    assert {k: d.plans[k].critical_path for k in big} == {"L": True, "N1": False, "N2": True}
    assert {"L", "N2"} <= set(d.run) and "N1" not in d.run and sum(str(j).startswith("s") for j in d.run) == 2
    # once L and N2 have run 8,000 s N1 is 2,000 s from the bound (L's 92,000 s): on the path
    jobs[0] = mkjob("L", g=2, total=1000, done=80, arrival=600.0)
    jobs[2] = mkjob("N2", g=2, total=980, done=80, arrival=600.0)
    d = ShockwaveEDF().decide(view(jobs, r=80, G=8, now=9600.0))
    assert d.plans["N1"].critical_path and "N1" in d.run
