"""shockwave-paper: the paper's market decides (its settings, its solve cadence, its weights, the fallback)."""
import json
import logging
import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from slurm_shockwave.policy_settings import from_file as settings_from_file
from slurm_shockwave.validation import describe
from solver.market.backends import BackendResult, HighsBackend
from solver.policies import policy_class
from slurm_shockwave.controller.loop import RoundLoop
from solver.policies.shockwave_base import PlanUnavailable
from solver.policies.shockwave_config import ShockwaveConfig
from solver.policies.shockwave_paper import ShockwavePaper
from solver.types import JobView
from tests.helpers import mkjob, view

CONFIGS = Path("/work/shared/reference-data/shockwave/scheduler/configurations")
if not CONFIGS.exists():
    CONFIGS = Path(__file__).resolve().parents[2] / "shared/reference-data/shockwave/scheduler/configurations"


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
def test_double_weight_gets_at_least_as_much():
    base = [mkjob(i, total=400, d=150.0 + 10 * i) for i in range(5)]
    heavy = list(base)
    heavy[2] = mkjob(2, total=400, d=170.0, weight=2.0)
    n0 = ShockwavePaper({"k": 0.0}).decide(view(base, G=2)).plans[2].rounds_planned
    n1 = ShockwavePaper({"k": 0.0}).decide(view(heavy, G=2)).plans[2].rounds_planned
    assert n1 >= n0


@pytest.mark.parametrize("mode", ["raise", "none"])
def test_a_solver_failure_reaches_the_loop_which_runs_the_one_fallback(mode, caplog):
    jobs = [mkjob(0, g=2, run_time=500.0), mkjob(1, g=1, run_time=10.0), mkjob(2, g=2, run_time=50.0),
            mkjob(3, g=1, run_time=0.0)]
    with pytest.raises(PlanUnavailable, match="no earlier plan covers it"):
        ShockwavePaper(backend=FailingBackend(mode)).decide(view(jobs, G=4))
    loop = RoundLoop(backend=None, policy=ShockwavePaper(backend=FailingBackend(mode)))
    with caplog.at_level(logging.ERROR, logger="slurm_shockwave.loop"):
        d, fell_back = loop.decide(view(jobs, G=4))
    assert fell_back and d.path == "fallback" and all(d.plans[j].rule == "fallback" for j in d.run)
    assert d.run == (3, 1, 2)               # least attained run time first, while it fits
    assert "policy raised PlanUnavailable" in d.fallback_reason
    assert any("using the fallback" in rec.getMessage() for rec in caplog.records)


def test_failure_keeps_last_plan_restricted_to_active_jobs():
    backend = SwitchBackend()
    pol = ShockwavePaper({"future_rounds": 10}, backend=backend)
    jobs = [mkjob(i, total=300) for i in range(5)]
    d0 = pol.decide(view(jobs, r=0, G=2))
    assert d0.path == "solved"
    backend.fail = True
    planned = pol.plan[1]
    gone = planned[0]
    d1 = pol.decide(view([j for j in jobs if j.job_id != gone], r=1, G=2))
    assert d1.path == "cached"
    assert gone not in d1.run and len(d1.run) == 2
    # past the end of the window there is no plan left: the caller's fallback decides
    with pytest.raises(PlanUnavailable):
        pol.decide(view([j for j in jobs if j.job_id != gone], r=40, G=2))


def test_decide_never_raises_on_garbage():
    bad = JobView(job_id="x", arrival_time=0.0, num_gpus=1, batch_size=0, epochs_done=5, total_epochs=0,
                  samples_per_epoch=0, steps_done=0, total_steps=0, throughput=0.0)
    d = ShockwavePaper().decide(view([bad, mkjob(1)], G=1))
    assert len(d.run) <= 1


def test_empty_cluster():
    d = ShockwavePaper().decide(view([], G=4))
    assert d.run == ()


def test_state_dict_roundtrip_continues_identically():
    rng = random.Random(3)
    jobs = [mkjob(i, g=rng.choice([1, 2]), total=rng.randint(20, 80), d=rng.uniform(50, 200),
                  arrival=0.0) for i in range(7)]
    a = ShockwavePaper({"reopt_rounds": 4})
    for r in range(3):
        a.decide(view(jobs, r=r, G=4))
    state = json.loads(json.dumps(a.state_dict()))
    b = ShockwavePaper({"reopt_rounds": 4})
    b.load_state_dict(state)
    for r in range(3, 7):
        da, db = a.decide(view(jobs, r=r, G=4)), b.decide(view(jobs, r=r, G=4))
        assert da.run == db.run and da.path == db.path and da.plans == db.plans


def test_unfair_job_gets_priority():
    # job 0 arrived long ago and has made no progress: rho-hat > 1 -> weighted higher and planned first
    jobs = [mkjob(0, total=50, d=100.0, arrival=0.0)] + [mkjob(i, total=50, d=100.0, arrival=5000.0)
                                                          for i in range(1, 6)]
    pol = ShockwavePaper()
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




def test_the_market_decides_a_contested_round():
    # 12 jobs with different amounts of work on 4 GPUs, nothing finishing: every job that runs was placed by the
    # market's plan (the paper pins nothing else); the shockwave alias names this policy
    rng = random.Random(7)
    jobs = [mkjob(i, total=rng.randint(10, 60), d=rng.uniform(60, 200)) for i in range(12)]
    d = ShockwavePaper().decide(view(jobs, G=4))
    assert d.path == "solved" and d.run
    assert {d.plans[j].rule for j in d.run} == {"market"}
    assert policy_class("shockwave") is ShockwavePaper


def test_a_finishing_job_keeps_its_gpus():
    jobs = [mkjob(i, total=50) for i in range(6)] + [mkjob("fin", done=20, total=20)]
    d = ShockwavePaper().decide(view(jobs, G=2))
    assert "fin" in d.run and d.plans["fin"].rule == "finishing"
