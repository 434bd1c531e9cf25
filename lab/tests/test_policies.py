"""Every policy, on random workloads: never over capacity, never a partial gang (an elastic job: a profiled
count), deterministic."""
import pytest

from solver.policies import make_policy, policy_names
from slurm_shockwave.controller.loop import RoundLoop
from shockwave_lab.sim.cluster import SimulatedCluster
from shockwave_lab.simulate import run_simulation
from tests.helpers import random_workload, reference_table

TABLE = reference_table()


@pytest.mark.parametrize("policy", policy_names())
@pytest.mark.parametrize("seed,gpus", [(1, 4), (2, 8)])
def test_capacity_and_gangs(policy, seed, gpus):
    jobs = random_workload(seed, 14, gpus, TABLE)
    cluster = SimulatedCluster(jobs, TABLE, gpus)
    seen, off_gang = [], []

    def check(record):
        view = record.view
        sizes = {j.job_id: j.num_gpus for j in view.jobs}
        assert set(record.run) <= set(sizes), "a decision names an inactive job"
        placed = {j: sum(record.decision.placement[j].values()) for j in record.run}
        for j, n in placed.items():
            assert n == sizes[j] or n in view.job(j).throughput_by_gpus, "a partial gang"
            off_gang.append(n != sizes[j])
        assert sum(placed.values()) <= gpus, "over capacity"
        seen.append(sum(placed.values()))

    loop = RoundLoop(cluster, make_policy(policy), on_round=check)
    loop.run(max_rounds=5000)
    assert cluster.done(), "every job completes"
    assert len(cluster.finished) == len(jobs)
    assert loop.fallbacks == 0 and loop.rounds > 0, "the policy itself decided every round"
    if not any(off_gang):     # every dispatched job held its whole gang: busy GPU-seconds are gangs x run time
        assert cluster.busy_gpu_seconds == pytest.approx(sum(r.run_time * r.num_gpus for r in cluster.finished))
    assert max(seen) > 0


@pytest.mark.parametrize("policy", policy_names())
def test_same_input_same_output(policy):
    jobs = random_workload(7, 12, 4, TABLE)
    a = run_simulation(jobs, TABLE, 4, policy).to_json()
    b = run_simulation(jobs, TABLE, 4, policy).to_json()
    for d in (a, b):
        d.pop("wall_seconds"), d.pop("decide_seconds")
    assert a == b


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        make_policy("nope")
