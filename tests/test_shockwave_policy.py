import json
import logging
import random
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from slurm_shockwave.policy_settings import from_file as settings_from_file
from slurm_shockwave.validation import describe
from solver.market.backends import BackendResult, HighsBackend
from solver.policies.shockwave import ShockwaveConfig, ShockwavePolicy
from solver.types import RULES, ClusterView, JobView

CONFIGS = Path("/work/shared/reference-data/shockwave/scheduler/configurations")
if not CONFIGS.exists():
    CONFIGS = Path(__file__).resolve().parents[2] / "shared/reference-data/shockwave/scheduler/configurations"


def mkjob(i, g=1, done=0, total=20, d=100.0, bs=32, arrival=0.0, weight=1.0, run_time=0.0):
    return JobView(job_id=i, arrival_time=arrival, num_gpus=g, batch_size=bs, epochs_done=done, total_epochs=total,
                   samples_per_epoch=1000, steps_done=done * 1000 / bs, total_steps=total * 1000 / bs,
                   throughput=1000 / bs / d, epoch_duration_by_bs={bs: d}, bs_history=(bs,) * done,
                   weight=weight, run_time=run_time)


def view(jobs, r=0, G=4, now=None):
    return ClusterView(now=r * 120.0 if now is None else now, round_index=r, round_length=120.0, num_gpus=G,
                       jobs=tuple(jobs))


class FailingBackend:
    name = "failing"

    def __init__(self, mode="raise"):
        self.mode = mode
        self.calls = 0

    def solve(self, *a, **kw):
        self.calls += 1
        if self.mode == "raise":
            raise RuntimeError("solver crashed")
        return BackendResult(None, "time_limit", "no incumbent")


class SwitchBackend:
    """HiGHS until told to fail."""

    def __init__(self):
        self.fail = False
        self.inner = HighsBackend()

    def solve(self, *a, **kw):
        if self.fail:
            raise RuntimeError("boom")
        return self.inner.solve(*a, **kw)


# ---------------------------------------------------------------- config
@pytest.mark.parametrize("name", ["tacc_32gpus", "scale_64gpus", "scale_128gpus", "scale_256gpus",
                                  "shockwave_example_config"])
def test_reference_configs_load(name):
    path = CONFIGS / f"{name}.json"
    if not path.exists():
        pytest.skip("reference data not available")
    cfg = settings_from_file("shockwave", path)
    raw = json.loads(path.read_text())
    assert cfg.k == raw["k"] and cfg.lambda_ == raw["lambda"] and cfg.future_rounds == raw["future_rounds"]
    assert cfg.solver_timeout == raw["solver_timeout"] and cfg.solver_rel_gap == raw["solver_rel_gap"]
    assert cfg.reopt_rounds == 8 and cfg.solver == "highs"


@pytest.mark.parametrize("key,val", [("k", -1), ("lambda", "x"), ("future_rounds", 0), ("future_rounds", 2.5),
                                     ("rhomax", 0), ("reopt_rounds", 0), ("solver", "cplex"),
                                     ("solver_timeout", 0), ("solver_rel_gap", -0.1), ("k", float("nan")),
                                     ("log_bases", [0.2, 1.0])])
def test_bad_config_values(key, val):
    with pytest.raises(ValidationError) as exc:          # worded by the caller, one line per problem
        ShockwaveConfig.from_dict({key: val})
    lines = describe(exc.value)
    assert lines and all(key in ln and "\n" not in ln for ln in lines)


def test_config_from_json_errors_and_unknown_keys(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"k": 0.5, "lambda": 3, "gpu_ram": 16, "whatever": [1]}')
    cfg = settings_from_file("shockwave", p)
    assert cfg.k == 0.5 and cfg.lambda_ == 3
    assert ShockwaveConfig.from_dict(cfg.to_dict()) == cfg
    p.write_text("{not json")
    with pytest.raises(ValueError):
        settings_from_file("shockwave", p)
    with pytest.raises(ValueError):
        settings_from_file("shockwave", tmp_path / "missing.json")


# ---------------------------------------------------------------- decisions
def test_decide_respects_capacity_and_info():
    rng = random.Random(1)
    jobs = [mkjob(i, g=rng.choice([1, 2, 4]), done=rng.randint(0, 10), total=20, d=rng.uniform(50, 300))
            for i in range(12)]
    pol = ShockwavePolicy({"k": 1e-3, "lambda": 12})
    d = pol.decide(view(jobs, G=8))
    assert sum(mkj.num_gpus for mkj in jobs if mkj.job_id in d.run) <= 8
    assert d.path == "solved" and d.solve_time_s >= 0
    for i in range(12):
        m = d.plans[i]
        assert m.rounds_planned is not None and m.predicted_remaining_s > 0 and m.rho_hat is not None
        assert m.weight > 0
        assert (m.next_offset == 0) == (i in d.run) == (m.rule in RULES)


def test_work_conserving_and_never_runs_oversized_jobs():
    jobs = [mkjob(0, g=8), mkjob(1, g=1), mkjob(2, g=2)]
    d = ShockwavePolicy().decide(view(jobs, G=4))
    assert set(d.run) == {1, 2}


def test_resolve_cadence_and_cached_plan():
    jobs = [mkjob(i, total=200) for i in range(6)]
    pol = ShockwavePolicy({"reopt_rounds": 3})
    paths = []
    for r in range(8):
        js = jobs if r < 5 else jobs[1:]           # a completion at round 5
        if r >= 6:
            js = js + [mkjob(99, total=5, arrival=700.0)]   # an arrival at round 6
        paths.append(pol.decide(view(js, r=r, G=2)).path)
    assert paths == ["solved", "cached", "cached", "solved", "cached", "solved", "solved", "cached"]


def test_equal_jobs_run_without_time_slicing():
    # four equal jobs on 2 GPUs: the two with the earliest fair-finish deadline (ties: job id) run in every
    # round until they finish instead of the four taking turns (every turn costs a restart)
    jobs = [mkjob(i, total=500, d=200.0) for i in range(4)]
    pol = ShockwavePolicy({"future_rounds": 8, "reopt_rounds": 100})
    runs = [set(pol.decide(view(jobs, r=r, G=2)).run) for r in range(8)]
    assert runs == [{0, 1}] * 8


def test_earliest_fair_finish_deadline_runs_first():
    # same work; the job that arrived first has the earlier fair-finish deadline and runs; the critical path
    # (the job with far more work than the rest) runs too
    jobs = [mkjob(0, total=10, arrival=600.0), mkjob(1, total=10, arrival=0.0), mkjob(2, total=10, arrival=300.0),
            mkjob(3, total=400, arrival=600.0)]
    d = ShockwavePolicy().decide(view(jobs, r=10, G=2, now=1200.0))
    assert set(d.run) == {1, 3}
    meta = d.plans
    assert meta[3].critical_path and not meta[1].critical_path
    assert meta[3].rule == "critical_path" and meta[1].rule == "deadline"
    assert meta[1].fair_finish_in_s < meta[2].fair_finish_in_s < meta[0].fair_finish_in_s


def test_double_weight_gets_at_least_as_much():
    base = [mkjob(i, total=400, d=150.0 + 10 * i) for i in range(5)]
    heavy = list(base)
    heavy[2] = mkjob(2, total=400, d=170.0, weight=2.0)
    n0 = ShockwavePolicy({"k": 0.0}).decide(view(base, G=2)).plans[2].rounds_planned
    n1 = ShockwavePolicy({"k": 0.0}).decide(view(heavy, G=2)).plans[2].rounds_planned
    assert n1 >= n0


@pytest.mark.parametrize("mode", ["raise", "none"])
def test_fallback_on_solver_failure(mode, caplog):
    jobs = [mkjob(0, g=2, run_time=500.0), mkjob(1, g=1, run_time=10.0), mkjob(2, g=2, run_time=50.0),
            mkjob(3, g=1, run_time=0.0)]
    pol = ShockwavePolicy(backend=FailingBackend(mode))
    with caplog.at_level(logging.WARNING, logger="solver.market"):
        d = pol.decide(view(jobs, G=4))
    assert d.path == "fallback" and all(d.plans[j].rule == "fallback" for j in d.run)
    assert d.run == (3, 1, 2)               # least attained run time first, while it fits
    assert any("fallback" in rec.getMessage() for rec in caplog.records)


def test_failure_keeps_last_plan_restricted_to_active_jobs():
    backend = SwitchBackend()
    pol = ShockwavePolicy({"future_rounds": 10}, backend=backend)
    jobs = [mkjob(i, total=300) for i in range(5)]
    d0 = pol.decide(view(jobs, r=0, G=2))
    assert d0.path == "solved"
    backend.fail = True
    planned = pol.plan[1]
    gone = planned[0]
    d1 = pol.decide(view([j for j in jobs if j.job_id != gone], r=1, G=2))
    assert d1.path == "cached"
    assert gone not in d1.run and len(d1.run) == 2
    # past the end of the window there is no plan left: max-min fallback
    d2 = pol.decide(view([j for j in jobs if j.job_id != gone], r=40, G=2))
    assert d2.path == "fallback" and len(d2.run) == 2


def test_decide_never_raises_on_garbage():
    bad = JobView(job_id="x", arrival_time=0.0, num_gpus=1, batch_size=0, epochs_done=5, total_epochs=0,
                  samples_per_epoch=0, steps_done=0, total_steps=0, throughput=0.0)
    d = ShockwavePolicy().decide(view([bad, mkjob(1)], G=1))
    assert len(d.run) <= 1


def test_empty_cluster():
    d = ShockwavePolicy().decide(view([], G=4))
    assert d.run == ()


def test_state_dict_roundtrip_continues_identically():
    rng = random.Random(3)
    jobs = [mkjob(i, g=rng.choice([1, 2]), total=rng.randint(20, 80), d=rng.uniform(50, 200),
                  arrival=0.0) for i in range(7)]
    a = ShockwavePolicy({"reopt_rounds": 4})
    for r in range(3):
        a.decide(view(jobs, r=r, G=4))
    state = json.loads(json.dumps(a.state_dict()))
    b = ShockwavePolicy({"reopt_rounds": 4})
    b.load_state_dict(state)
    for r in range(3, 7):
        da, db = a.decide(view(jobs, r=r, G=4)), b.decide(view(jobs, r=r, G=4))
        assert da.run == db.run and da.path == db.path and da.plans == db.plans


def test_unfair_job_gets_priority():
    # job 0 arrived long ago and has made no progress: rho-hat > 1 -> weighted higher and planned first
    jobs = [mkjob(0, total=50, d=100.0, arrival=0.0)] + [mkjob(i, total=50, d=100.0, arrival=5000.0)
                                                          for i in range(1, 6)]
    pol = ShockwavePolicy()
    d = pol.decide(view(jobs, r=50, G=2, now=6000.0))
    m = d.plans[0]
    assert m.rho_hat > 1.0 and m.weight > 1.0
    assert 0 in d.run


def test_config_from_toml(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[shockwave]\nk = 0.01\nlambda = 5.0\nfuture_rounds = 10\n')
    cfg = settings_from_file("shockwave", p)
    assert (cfg.k, cfg.lambda_, cfg.future_rounds) == (0.01, 5.0, 10)
    p.write_text('k = "a"\n')
    with pytest.raises(ValidationError) as exc:
        settings_from_file("shockwave", p)
    assert describe(exc.value) == ["k = 'a': must be a number"]


def test_declaring_a_huge_job_cannot_buy_the_cluster_through_the_critical_path():
    # mallory declares 10^6 epochs for each of her 4 jobs: all four are on the critical path, but it takes at
    # most her equal share (2 of 4 GPUs with two users); alice's jobs, due much earlier, get the other two
    jobs = ([replace(mkjob(f"m{i}", total=10 ** 6), user="mallory") for i in range(4)]
            + [replace(mkjob(f"a{i}", total=10), user="alice") for i in range(4)])
    d = ShockwavePolicy().decide(view(jobs, r=0, G=4))
    assert sorted(i[0] for i in d.run) == ["a", "a", "m", "m"]
    assert sum(d.plans[f"m{i}"].critical_path for i in range(4)) == 2
    # one user alone: the critical path is not capped
    d = ShockwavePolicy().decide(view([replace(j, user="alice") for j in jobs], r=0, G=4))
    assert sorted(d.run) == ["m0", "m1", "m2", "m3"]
