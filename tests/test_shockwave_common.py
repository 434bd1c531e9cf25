"""What both Shockwave policies share: capacity, the per-job plan records, work conservation, the re-solve cadence."""
import random

import pytest

from solver.policies.shockwave_edf import ShockwaveEDF
from solver.policies.shockwave_paper import ShockwavePaper
from solver.types import RULES
from tests.helpers import mkjob, view

POLICIES = [pytest.param(ShockwaveEDF, id="shockwave-edf"), pytest.param(ShockwavePaper, id="shockwave-paper")]


@pytest.mark.parametrize("policy", POLICIES)
def test_decide_respects_capacity_and_info(policy):
    rng = random.Random(1)
    jobs = [mkjob(i, g=rng.choice([1, 2, 4]), done=rng.randint(0, 10), total=20, d=rng.uniform(50, 300))
            for i in range(12)]
    d = policy().decide(view(jobs, G=8))
    assert sum(mkj.num_gpus for mkj in jobs if mkj.job_id in d.run) <= 8
    assert d.path == "solved" and d.solve_time_s >= 0
    for i in range(12):
        m = d.plans[i]
        assert m.rounds_planned is not None and m.predicted_remaining_s > 0 and m.rho_hat is not None
        assert m.weight > 0
        assert (m.next_offset == 0) == (i in d.run) == (m.rule in RULES)


@pytest.mark.parametrize("policy", POLICIES)
def test_work_conserving_and_never_runs_oversized_jobs(policy):
    jobs = [mkjob(0, g=8), mkjob(1, g=1), mkjob(2, g=2)]
    d = policy().decide(view(jobs, G=4))
    assert set(d.run) == {1, 2}


@pytest.mark.parametrize("policy", POLICIES)
def test_resolve_cadence_and_cached_plan(policy):
    jobs = [mkjob(i, total=200) for i in range(6)]
    pol = policy({"reopt_rounds": 3})
    paths = []
    for r in range(8):
        js = jobs if r < 5 else jobs[1:]           # a completion at round 5
        if r >= 6:
            js = js + [mkjob(99, total=5, arrival=700.0)]   # an arrival at round 6
        paths.append(pol.decide(view(js, r=r, G=2)).path)
    assert paths == ["solved", "cached", "cached", "solved", "cached", "solved", "solved", "cached"]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_job_planned_now_that_its_type_has_no_room_for_is_off_until_its_next_planned_round(policy):
    """The plan counts GPUs; the round places them by type.  A job the plan lists this round whose type has no room
    left does not run, and its record says when it is planned next (the gate reads that as its time off), not 0, "this
    round" (the typed replay of 2026-12-07 11:37 read three such jobs as "not planned in the window")."""
    from dataclasses import replace

    from solver.types import ClusterView
    jobs = [replace(mkjob(i, g=2, total=200), gpu_type="v100") for i in range(3)]
    d = policy().decide(ClusterView(now=0.0, round_index=0, round_length=120.0, num_gpus=8, jobs=tuple(jobs),
                                    capacity={"v100": 4, "k80": 4}))
    assert len(d.run) == 2
    (left,) = {0, 1, 2} - set(d.run)
    assert d.plans[left].rule == "" and d.plans[left].next_offset is not None and d.plans[left].next_offset >= 1
