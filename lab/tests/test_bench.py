"""The study and the benchmarks are modules of the lab (shockwave_lab.bench), and the checkout's bench/ scripts run
them: each script answers --help; a study run's key follows exactly the code it ran (the policy's own modules and
the ones they import, in the product or the lab); the study lists its traces."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shockwave_lab.bench import ROOT, study
from shockwave_lab.bench.study_cli import main as study_main

SCRIPTS = sorted((ROOT / "bench").glob("*.py"))


def test_the_checkout_is_the_labs_root():
    assert (ROOT / "lab" / "shockwave_lab" / "bench" / "__init__.py").is_file() and (ROOT / "bench").is_dir()


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_every_bench_script_runs_its_module(script):
    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage:"), r.stdout[:200]


def _names(files) -> set[str]:
    return {Path(f).name for f in files}


def test_a_runs_key_follows_the_modules_its_policy_imports():
    assert {"slurm_preempt.py", "slurm_multifactor.py", "slurm_backfill.py"} <= _names(study.policy_files("slurm-preempt"))
    assert "slurm_preempt.py" not in _names(study.policy_files("slurm-multifactor"))
    edf = _names(study.policy_files("shockwave-edf"))
    assert {"shockwave_edf.py", "shockwave_base.py", "base.py"} <= edf and "time_fraction.py" not in edf
    assert {"finish_time_fairness.py", "center.py", "time_fraction.py"} <= _names(study.policy_files("themis"))
    assert all(Path(f).is_file() for f in study.COMMON)
    keys = {p: study.run_key(p) for p in ("shockwave-edf", "shockwave-paper", "pollux")}
    assert len(set(keys.values())) == 3 and all(key.startswith(f"{p}-") for p, key in keys.items())


def test_the_study_runs_ours_as_the_controller_does_and_the_baselines_as_published():
    """Issue 36: the default's and shockwave-paper's runs have the controller's early rounds, preemption gate and
    restart bound; the baselines the reference's semantics; Slurm's own models, simulated as the controller runs
    a policy, get the early rounds and never the gate.  The semantics is part of each run's key."""
    from shockwave_lab.simulate import semantics_settings
    assert [study.study_semantics(p) for p in ("shockwave-edf", "shockwave-paper", "gandiva_fair", "fifo")] == [
        "controller", "controller", "reference", "reference"]
    assert study.run_key("shockwave-edf").endswith("-controller") and study.run_key("pollux").endswith("-reference")
    ours, slurm = semantics_settings("controller", 120.0, "shockwave-edf"), semantics_settings("controller", 120.0,
                                                                                               "slurm-preempt")
    assert ours == {"early_rounds": (5.0, 5.0), "preemption_cost_s": 30.0, "mode": "authoritative",
                    "rounds_per_restart": 10}
    assert slurm["early_rounds"] == (5.0, 5.0) and slurm["preemption_cost_s"] is None
    assert semantics_settings("reference", 120.0, "shockwave-edf")["early_rounds"] is None


def test_the_study_lists_its_traces(capsys):
    study_main(["list"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 20 and all('"load": ' in line for line in lines)
