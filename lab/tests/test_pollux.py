"""Pollux's allocation (solver/policies/pollux.py) and the elastic GPU counts it needs (placement, simulator)."""
import dataclasses
import itertools
import json
import math
import random

import numpy as np
import pytest

from slurm_shockwave.backends.base import check_decision
from slurm_shockwave.controller.loop import RoundLoop
from shockwave_lab.sim.cluster import SimulatedCluster
from solver.placement import PlacementError, check_placement
from solver.policies import make_policy
from solver.types import ClusterView, JobView, Policy, RoundDecision
from tests.helpers import job, table


def jv(i, counts, gpus=1, arrival=0.0, ran=False):
    return JobView(job_id=i, arrival_time=arrival, num_gpus=gpus, batch_size=32, epochs_done=0, total_epochs=10,
                   samples_per_epoch=1000, steps_done=0, total_steps=1000, throughput=counts.get(gpus, 1.0),
                   ran_last_round=ran, throughput_by_gpus=counts)


def fitness(view, alloc):
    """The artifact's fitness, written from its formula (docstring of pollux.py): power mean, p = -1."""
    J = len(view.jobs)
    n_fair = math.ceil(view.num_gpus / J)
    terms = []
    for j in view.jobs:
        n = alloc[j.job_id]
        pts = dict(j.throughput_by_gpus)
        c = sorted(pts)
        base = pts[c[0]] * n_fair / c[0] if n_fair <= c[0] else pts[c[-1]] if n_fair >= c[-1] else \
            np.interp(n_fair, c, [pts[x] for x in c])
        age = view.now - j.arrival_time
        restart = 1.0 if (j.ran_last_round and n == j.num_gpus) else max(age, 0.0) / (age + 30.0)
        s = pts[n] / base / 4 * restart if n else 0.0
        terms.append((s + 1e-3) ** -1)
    return (sum(terms) / J) ** -1


def brute_force(view):
    choices = [[0, *sorted(j.throughput_by_gpus)] for j in view.jobs]
    best = -1.0
    for combo in itertools.product(*choices):
        if sum(combo) <= view.num_gpus:
            best = max(best, fitness(view, {j.job_id: n for j, n in zip(view.jobs, combo)}))
    return best


def random_view(rng, n_jobs, G):
    jobs = []
    for i in range(n_jobs):
        counts = [1, 2, 4] if rng.random() < 0.5 else [1, 2, 4, 8]
        thr, x = {}, rng.uniform(1, 10)
        for c in counts:
            thr[c] = x
            x *= rng.uniform(1.0, 2.0)                  # anything from flat to linear scaling
        gpus = rng.choice(counts[:3])
        jobs.append(jv(i, thr, gpus=gpus, arrival=rng.uniform(0, 600), ran=rng.random() < 0.4))
    return ClusterView(now=600.0, round_index=5, round_length=120.0, num_gpus=G, jobs=tuple(jobs))


@pytest.mark.parametrize("seed", range(12))
def test_the_choice_is_the_brute_force_optimum(seed):
    rng = random.Random(seed)
    view = random_view(rng, rng.choice([2, 3, 4, 5]), rng.choice([3, 4, 6, 8]))
    d = make_policy("pollux").decide(view)
    alloc = {j.job_id: sum(d.placement.get(j.job_id, {}).values()) for j in view.jobs}
    assert fitness(view, alloc) == pytest.approx(brute_force(view), rel=1e-12)
    check_decision(view, d)                              # within capacity, counts the jobs were profiled at


def test_speedups_are_relative_to_the_fair_share():
    # 2 jobs on 4 GPUs: the fair share is 2 GPUs each; A scales linearly, B not at all beyond 2 GPUs.  Each on 2
    # (speedups 1, 1) beats A on 4 and B on none (B's zero dominates the p = -1 mean) and A 3 is not profiled.
    a, b = jv("a", {1: 1.0, 2: 2.0, 4: 4.0}, arrival=-1e6), jv("b", {1: 1.0, 2: 1.5, 4: 1.5}, arrival=-1e6)
    view = ClusterView(now=0.0, round_index=0, round_length=120.0, num_gpus=4, jobs=(a, b))
    d = make_policy("pollux").decide(view)
    assert d.placement == {"a": {"gpu": 2}, "b": {"gpu": 2}}


def test_the_restart_factor_keeps_a_young_job_where_it_is():
    # a job running on 1 GPU, 20 s old: moving it to 2 GPUs doubles its throughput but multiplies its speedup by
    # (20 - 0) / (20 + 30) = 0.4, and 2 x 0.4 < 1: it stays; 10 hours old (factor ~1), it moves
    young = jv("y", {1: 1.0, 2: 2.0}, arrival=-20.0, ran=True)
    d = make_policy("pollux").decide(ClusterView(0.0, 0, 120.0, 2, (young,)))
    assert d.placement == {"y": {"gpu": 1}}
    old = dataclasses.replace(young, arrival_time=-36000.0)
    d = make_policy("pollux").decide(ClusterView(0.0, 0, 120.0, 2, (old,)))
    assert d.placement == {"y": {"gpu": 2}}


def test_restarts_lower_the_factor_and_are_counted():
    pol = make_policy("pollux")
    j = jv("j", {1: 1.0, 2: 2.0}, arrival=-36000.0)
    pol.decide(ClusterView(0.0, 0, 120.0, 2, (j,)))                     # first allocation: 0 restarts
    assert pol.state_dict()["restarts"] == [["j", 0]]
    ran = dataclasses.replace(j, ran_last_round=True)
    pol.decide(ClusterView(120.0, 1, 120.0, 1, (ran,)))                 # cluster shrank: 2 -> 1 GPU
    assert pol.state_dict()["restarts"] == [["j", 1]]
    again = make_policy("pollux")                                       # the state is plain JSON
    again.load_state_dict(json.loads(json.dumps(pol.state_dict())))
    assert again.state_dict() == pol.state_dict() == {"alloc": [["j", ["gpu", 1]]], "restarts": [["j", 1]]}


def test_a_job_without_throughputs_per_count_is_placed_on_its_gang_or_not_at_all():
    rigid = dataclasses.replace(jv("r", {}, gpus=2), throughput=5.0)
    d = make_policy("pollux").decide(ClusterView(0.0, 0, 120.0, 8, (rigid,)))
    assert d.placement == {"r": {"gpu": 2}}


# ---------------------------------------------------------------- the placement check
def test_the_check_refuses_an_unprofiled_count_and_any_other_count_of_a_rigid_job():
    elastic = jv("e", {1: 1.0, 2: 1.8, 4: 3.0}, gpus=2)
    rigid = dataclasses.replace(jv("r", {}, gpus=2), throughput=1.0)
    view = ClusterView(0.0, 0, 120.0, 8, (elastic, rigid))
    check_placement(view, RoundDecision(run=("e", "r"), placement={"e": {"gpu": 4}, "r": {"gpu": 2}}))
    with pytest.raises(PlacementError, match="elastic"):
        check_placement(view, RoundDecision(run=("e",), placement={"e": {"gpu": 3}}))
    with pytest.raises(PlacementError, match="its gang is 2"):
        check_placement(view, RoundDecision(run=("r",), placement={"r": {"gpu": 1}}))
    with pytest.raises(ValueError, match="uses 9 GPUs"):           # the loop counts the placed GPUs
        check_decision(view, RoundDecision(run=("e", "r"), placement={"e": {"gpu": 4}, "r": {"gpu": 5}}))


# ---------------------------------------------------------------- the simulator runs an elastic job at its count
class Counts(Policy):
    """Place job 0 on the next GPU count of a script each round."""
    name = "counts"

    def __init__(self, script):
        super().__init__()
        self.script = list(script)

    def decide(self, view):
        n = self.script.pop(0) if self.script else self.last
        self.last = n
        return RoundDecision(run=(0,), placement={0: {"gpu": n}})


def test_an_elastic_job_runs_at_its_placed_count_and_a_change_is_a_restart():
    thr = table({("ResNet-18", 32, 1): 10.0, ("ResNet-18", 32, 2): 18.0})
    spec = job(0, 100000, isolated_runtime=10000)
    c = SimulatedCluster([spec], thr, 2)
    assert c.observe().jobs[0].throughput_by_gpus == {1: 10.0, 2: 18.0}
    loop = RoundLoop(c, Counts([2, 2, 1]))
    loop.run(max_rounds=3)
    sim = c.active[0]
    # 2160 steps at 18 it/s | 2160 | a change of count: a restart, 100 s of the round at 10 it/s
    assert sim.steps_run == 2160 + 2160 + int(1200 * 100 / 120)
    assert sim.restarts == 1
    assert c.busy_gpu_seconds == pytest.approx(120 * 2 + 120 * 2 + 100 * 1)
    assert sim.run_time == pytest.approx(340.0)
    # the deadline guard counts run time at the gang's (1 GPU's) pace: 2 x 120 s on 2 GPUs = 432 s of it
    assert sim.nominal_run_time == pytest.approx(120 * 1.8 * 2 + 100)


def test_the_simulator_refuses_a_count_the_table_has_no_throughput_for():
    thr = table({("ResNet-18", 32, 1): 10.0, ("ResNet-18", 32, 2): 18.0})
    c = SimulatedCluster([job(0, 1000, isolated_runtime=100)], thr, 4)
    assert set(c.observe().jobs[0].throughput_by_gpus) == {1, 2}
    with pytest.raises(PlacementError):
        c.apply(RoundDecision(run=(0,), placement={0: {"gpu": 4}}))
