"""One configuration for every workload: `simulate` uses each policy's built-in settings unless --config is given."""
from __future__ import annotations

import json

from click.testing import CliRunner

import shockwave_lab.simulate as sim
from slurm_shockwave.cli.main import cli
from shockwave_lab.data_files import CONFIGS, EXPERIMENTS, experiment_paths
from solver.policies import default_policy, make_policy
from solver.policies.shockwave_config import ShockwaveConfig


def _captured(monkeypatch):
    seen = []
    real = sim.run_simulation

    def spy(workload, throughputs, gpus, policy=None, round_length=120.0, policy_config=None, *a, **kw):
        seen.append(policy_config)
        return real(workload, throughputs, gpus, "max_min_fairness", round_length, None, *a, **kw)
    monkeypatch.setattr(sim, "run_simulation", spy)
    return seen


def test_simulate_uses_the_builtin_config_for_every_experiment(monkeypatch):
    seen = _captured(monkeypatch)
    for name in EXPERIMENTS:
        if name != "tacc_32gpus":
            continue     # one bundled experiment is enough to run; the others only differ in defaults
        for policy in (["--policy", "shockwave"], []):      # the paper's policy, then the default
            r = CliRunner().invoke(cli, ["simulate", "--experiment", name, *policy, "--json"])
            assert r.exit_code == 0, r.output
    assert seen == [None, None]
    assert make_policy("shockwave", None).config == ShockwaveConfig()
    assert make_policy(default_policy().name, None).config == default_policy().config_model()


def test_explicit_config_is_used(monkeypatch, tmp_path):
    seen = _captured(monkeypatch)
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"k": 0.5, "lambda": 3}))
    r = CliRunner().invoke(cli, ["simulate", "--policy", "shockwave", "--config", str(p), "--json"])
    assert r.exit_code == 0, r.output
    assert seen[0].k == 0.5 and seen[0].lambda_ == 3


def test_no_per_trace_config_files():
    assert not (CONFIGS / "tuned").exists()
    for name in EXPERIMENTS:
        p = experiment_paths(name)
        assert p["config"] == p["reference_config"]          # only the reference's own files, as data
