"""Every policy decides on times relative to each job's arrival: a whole workload shifted by 1.7e9 s (arrivals
and the clock, as Unix times in the controller) gives the same decisions round by round (issue 12 item 1)."""
import dataclasses

import pytest

from shockwave_lab.data_files import experiment_paths
from shockwave_lab.simulate import load_workload, run_simulation
from shockwave_lab.workload.throughputs import ThroughputTable
from solver.policies import policy_names
from solver.types import ClusterView
from tests.helpers import random_workload, reference_table

SHIFT = 1.7e9


def shifted(jobs, by=SHIFT):
    return [dataclasses.replace(j, arrival_time=j.arrival_time + by) for j in jobs]


def rounds_of(jobs, thr, gpus, policy):
    res = run_simulation(jobs, thr, gpus, policy, keep_round_log=True)
    return [(r.round_index, tuple(sorted(map(str, r.run)))) for r in res.round_log], res.metrics


@pytest.mark.parametrize("policy", policy_names())
def test_shifted_workload_same_decisions_every_round(policy):
    thr = reference_table()
    jobs = random_workload(3, 24, 4, thr)
    a, ma = rounds_of(jobs, thr, 8, policy)
    b, mb = rounds_of(shifted(jobs), thr, 8, policy)
    assert len(a) > 10
    assert a == b
    assert mb.makespan == pytest.approx(ma.makespan, abs=1e-3)
    assert mb.unfair_fraction == ma.unfair_fraction


@pytest.mark.parametrize("policy", ["shockwave", "finish_time_fairness", "max_min_fairness"])
def test_same_views_shifted_same_decision(policy):
    """Feeding the very same ClusterViews with the clock and arrivals shifted gives the same decisions."""
    from solver.policies import make_policy
    thr = reference_table()
    jobs = random_workload(5, 16, 4, thr)
    views = []
    run_simulation(jobs, thr, 8, policy, on_round=lambda rec: views.append(rec.view))
    p1, p2 = make_policy(policy), make_policy(policy)
    for v in views:
        v2 = dataclasses.replace(v, now=v.now + SHIFT,
                                 jobs=tuple(dataclasses.replace(j, arrival_time=j.arrival_time + SHIFT)
                                            for j in v.jobs))
        assert isinstance(v2, ClusterView)
        assert sorted(map(str, p1.decide(v).run)) == sorted(map(str, p2.decide(v2).run))


def test_bundled_120_job_trace_shifted_same_unfair_fraction():
    p = experiment_paths("tacc_32gpus")
    table = ThroughputTable.load(p["throughputs"])
    jobs = load_workload(p["trace"], table, 32)
    a = run_simulation(jobs, table, 32, "shockwave").metrics
    b = run_simulation(shifted(jobs), table, 32, "shockwave").metrics
    assert b.unfair_fraction == a.unfair_fraction
    assert b.worst_rho == pytest.approx(a.worst_rho, rel=1e-6)
    assert b.makespan == pytest.approx(a.makespan, rel=1e-6)
