"""ShockwaveConfig: pydantic v2, strict, no NaN/inf, bounds, errors worded one line each by the caller;
from_dict/to_dict, and its files read by slurm_shockwave (policy_settings.from_file)."""
import json
import math

import pytest
from pydantic import ValidationError

from slurm_shockwave.loader import InputFileError
from slurm_shockwave.policy_settings import from_file
from slurm_shockwave.validation import describe
from solver.policies.shockwave_config import ShockwaveConfig


@pytest.mark.parametrize("key,val", [
    ("future_rounds", 0), ("future_rounds", 2.5), ("future_rounds", True), ("future_rounds", "20"),
    ("k", -1.0), ("k", math.nan), ("k", math.inf), ("k_norm", -0.1), ("lambda", "12"), ("lambda", math.nan),
    ("rhomax", 0.0), ("reopt_rounds", 0), ("starvation_rounds", 0), ("solver", "cplex"), ("solver", 3),
    ("solver_timeout", 0.0), ("solver_rel_gap", 2.0), ("solver_num_threads", 0), ("log_bases", [0.0, 0.5]),
    ("log_bases", [0.0, 0.5, 0.5, 1.0]), ("log_bases", "0,1"),
])
def test_bad_values_one_line_error(key, val):
    with pytest.raises(ValidationError) as exc:
        ShockwaveConfig.from_dict({key: val})
    lines = describe(exc.value, prefix=("shockwave",))
    assert lines and all("\n" not in ln and ln.startswith(f"shockwave.{key} = ") for ln in lines), lines


def test_assignment_is_validated_too():
    c = ShockwaveConfig()
    with pytest.raises(ValueError):
        c.lambda_ = -1.0
    c.lambda_ = 5
    assert c.lambda_ == 5.0


def test_roundtrip_and_unknown_keys(tmp_path):
    c = ShockwaveConfig.from_dict({"lambda": 7, "k_norm": 12.5, "gpu_ram": 16, "_comment": "x",
                                   "log_bases": [0, 0.5, 1], "solver": "HiGHS"})
    assert c.lambda_ == 7.0 and c.k_norm == 12.5 and c.log_bases == (0.0, 0.5, 1.0) and c.solver == "highs"
    d = c.to_dict()
    assert d["lambda"] == 7.0 and "lambda_" not in d and d["log_bases"] == [0.0, 0.5, 1.0]
    assert ShockwaveConfig.from_dict(d) == c
    p = tmp_path / "c.json"
    p.write_text(json.dumps(d))
    assert from_file("shockwave", p) == c
    t = tmp_path / "c.toml"
    t.write_text("[shockwave]\nlambda = 7.0\nk_norm = 12.5\nlog_bases = [0, 0.5, 1]\n")
    assert from_file("shockwave", t) == c


def test_absolute_k_given_means_no_normalised_k():
    assert ShockwaveConfig().k_norm is not None
    assert ShockwaveConfig.from_dict({"k": 1e-3}).k_norm is None
    assert ShockwaveConfig.from_dict({"k": 1e-3, "k_norm": 4.0}).k_norm == 4.0


def test_starvation_bound_defaults_to_twice_the_window():
    assert ShockwaveConfig(future_rounds=10).starvation_bound_rounds == 20
    assert ShockwaveConfig(starvation_rounds=3).starvation_bound_rounds == 3


def test_not_a_mapping_and_unreadable_file(tmp_path):
    with pytest.raises(ValueError, match="JSON object"):
        ShockwaveConfig.from_dict([1, 2])
    with pytest.raises(InputFileError, match="missing.json: file not found"):
        from_file("shockwave", tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(InputFileError, match="bad.json:1: bad JSON"):
        from_file("shockwave", bad)
