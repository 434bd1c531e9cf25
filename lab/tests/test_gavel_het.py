"""Gavel's heterogeneity-aware max-min fairness (solver/policies/gavel_het.py): the LP's allocation per GPU type and
its per-type round mechanism."""
import dataclasses
import random

import pytest

from solver.policies import make_policy
from shockwave_lab.baselines.gavel_het import max_min_het
from shockwave_lab.baselines.max_min_fairness import water_fill
from solver.types import ClusterView
from tests.helpers import mkjob


def typed(i, g=1, weight=1.0, **speeds):
    return dataclasses.replace(mkjob(i, g=g, weight=weight), throughput_by_type=speeds,
                               throughput=max(speeds.values()))


def effective(job, x, capacity):
    """sf/w x sum_t thr_t X_t / sum_t thr_t G_t: the normalised effective throughput the LP equalises."""
    thr = job.throughput_by_type
    return job.num_gpus / job.weight * sum(thr[t] * x[t] for t in thr) / sum(thr[t] * capacity[t] for t in thr)


def test_on_one_type_it_is_gavels_max_min_fairness():
    rng = random.Random(3)
    for _ in range(6):
        jobs = [dataclasses.replace(mkjob(i, g=rng.choice([1, 1, 2, 4, 8]), weight=rng.choice([1.0, 2.0])),
                                    throughput=rng.uniform(1, 10)) for i in range(rng.randint(3, 40))]
        x = max_min_het(jobs, {"gpu": 32})
        share = water_fill({j.job_id: float(j.num_gpus) for j in jobs}, {j.job_id: j.weight for j in jobs}, 32.0)
        for j in jobs:
            assert x[j.job_id]["gpu"] == pytest.approx(min(1.0, share[j.job_id] / j.num_gpus), abs=1e-8)


def test_each_job_gets_the_type_it_gains_most_on_equal_jobs_equal_throughput():
    # job 0 is 10x faster on v100; job 1 is as fast on both: max-min gives v100 to job 0, k80 to job 1
    capacity = {"v100": 1, "k80": 1}
    jobs = [typed(0, v100=10.0, k80=1.0), typed(1, v100=2.0, k80=2.0)]
    x = max_min_het(jobs, capacity)
    assert x[0]["v100"] > 0.9 and x[1]["k80"] > 0.9
    e = [effective(j, x[j.job_id], capacity) for j in jobs]
    # each its whole best type: 10/11 and 1/2 of their equal shares' throughput (type-blind halves: 1/2 and 1/2)
    assert e == pytest.approx([10 / 11, 0.5], abs=1e-6)
    # three equal jobs on the same two GPUs: equal normalised throughput, every GPU used
    jobs = [typed(i, v100=10.0, k80=1.0) for i in range(3)]
    x = max_min_het(jobs, capacity)
    e = [effective(j, x[j.job_id], capacity) for j in jobs]
    assert max(e) - min(e) < 1e-6
    assert sum(x[i]["v100"] for i in range(3)) == pytest.approx(1.0)


def test_levels_rise_past_a_capped_job():
    # job 0 can only use k80 (pinned there by its speeds) and is capped at X = 1 there; the others share v100
    capacity = {"v100": 2, "k80": 4}
    jobs = [typed(0, k80=1.0), typed(1, v100=5.0, k80=1.0), typed(2, v100=5.0, k80=1.0)]
    x = max_min_het(jobs, capacity)
    assert x[0]["k80"] == pytest.approx(1.0)
    assert x[1]["v100"] + x[1]["k80"] == pytest.approx(1.0) and x[2]["v100"] + x[2]["k80"] == pytest.approx(1.0)


def test_rounds_follow_the_allocation_per_type():
    """Two GPUs of two types, the job that gains most from v100 runs there every round."""
    pol = make_policy("gavel-het")
    capacity = {"v100": 1, "k80": 1}
    jobs = (typed(0, v100=10.0, k80=1.0), typed(1, v100=2.0, k80=2.0))
    for r in range(6):
        view = ClusterView(now=120.0 * r, round_index=r, round_length=120.0, num_gpus=2, jobs=jobs,
                           last_round_run_time={0: 120.0, 1: 120.0} if r else {}, capacity=capacity)
        d = pol.decide(view)
        assert d.placement == {0: {"v100": 1}, 1: {"k80": 1}}
    state = pol.state_dict()
    again = make_policy("max_min_fairness_het")
    again.load_state_dict(state)
    assert again.state_dict() == state
