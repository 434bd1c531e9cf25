"""Controller config validation (pydantic, strict): every bad value is one line naming the key and the value,
all of them in one run, exit 2 from `controller run` and `controller check`; the state store survives reopening."""
import math

import pytest
from click.testing import CliRunner

from slurm_shockwave.cli.main import cli
from slurm_shockwave.controller.config import ConfigError, config_from_dict, load_config
from slurm_shockwave.validation import show
from slurm_shockwave.journal.store import StateStore

NAN, INF = float("nan"), float("inf")


def problems_of(data):
    with pytest.raises(ConfigError) as e:
        config_from_dict(data, "c.toml")
    problems = e.value.problems
    assert all("\n" not in p and p.startswith("c.toml: ") for p in problems), problems
    return problems


def test_defaults_and_weights(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[controller]\nround_seconds = 20\nmode = "authoritative"\n[policy]\nname = "shockwave"\n'
                 'config = "tacc_32gpus.json"\n[weights]\nusers = { alice = 2.0 }\naccounts = { lab = 1.5 }\n'
                 '[slurm]\nbin_dir = "/usr/bin"\nenv = { SLURM_CONF = "/etc/slurm/slurm.conf" }\n')
    cfg = load_config(p)
    assert cfg.round_seconds == 20 and cfg.mode == "authoritative"
    assert cfg.weight("alice", "lab") == 3.0 and cfg.weight("bob", "x") == 1.0
    assert cfg.slurm.bin_dir == "/usr/bin" and cfg.slurm.env == {"SLURM_CONF": "/etc/slurm/slurm.conf"}
    assert cfg.metrics_address == "127.0.0.1" and cfg.preempt_signal == "USR1"
    assert cfg.state_path.name == "state.sqlite"


def test_every_problem_is_reported_on_its_own_line():
    problems = problems_of({"controller": {"round_seconds": -1, "mode": "bossy", "colour": "red", "grace_seconds": "x"},
                            "policy": {"name": "nope"}, "weights": {"users": {"a": -2}}, "extra": {}})
    assert len(problems) == 7
    joined = "\n".join(problems)
    for needle in ("controller.round_seconds = -1", "controller.mode = 'bossy'", "controller.colour",
                   "controller.grace_seconds = 'x'", "policy.name = 'nope'", "weights.users.a = -2", "[extra]"):
        assert needle in joined


# every bad value the issue lists, plus the neighbouring ones: (section, key, value, text in the message)
BAD_VALUES = [
    ("controller", "round_seconds", NAN, "finite"),
    ("controller", "round_seconds", INF, "finite"),
    ("controller", "round_seconds", 0, "> 0"),
    ("controller", "round_seconds", "120", "number"),
    ("controller", "round_seconds", True, "number"),
    ("controller", "grace_seconds", NAN, "finite"),
    ("controller", "grace_seconds", -1, ">= 0"),
    ("controller", "min_run_seconds", NAN, "finite"),
    ("controller", "min_run_seconds", -5, ">= 0"),
    ("controller", "slurm_timeout", 0, "> 0"),
    ("controller", "slurm_timeout", -1, "> 0"),
    ("controller", "slurm_timeout", NAN, "finite"),
    ("controller", "slurm_timeout", INF, "finite"),
    ("controller", "preempt_signal", "USR9", "signal"),
    ("controller", "preempt_signal", "KILL", "checkpoint"),
    ("controller", "preempt_signal", 10, "string"),
    ("controller", "state_dir", "", "empty"),
    ("controller", "state_dir", "   ", "empty"),
    ("controller", "event_store", "", "empty"),
    ("controller", "site_factor", 1.5, "integer"),
    ("controller", "site_factor", 0, ">= 1"),
    ("controller", "site_factor", 2**40, "<= 2147483645"),
    ("controller", "metrics_port", 70000, "<= 65535"),
    ("controller", "metrics_port", "9108", "integer"),
    ("controller", "metrics_address", "not an address", "IP address"),
    ("controller", "dry_run", "yes", "true or false"),
    ("controller", "dry_run", 1, "true or false"),
    ("controller", "mode", 3, "one of"),
    ("controller", "marker", "", "empty"),
    ("controller", "partition", "", "empty"),
    ("controller", "partition", "gpu;rm", "plain name"),
    ("weights", "users", {"alice": INF}, "finite"),
    ("weights", "users", {"alice": NAN}, "finite"),
    ("weights", "accounts", {"lab": 0}, "> 0"),
    ("weights", "accounts", {"lab": "2"}, "number"),
    ("weights", "users", ["alice"], "table"),
    ("slurm", "env", {"SLURM_CONF": 5}, "string"),
    ("slurm", "bin_dir", "", "empty"),
    ("policy", "name", 5, "string"),
]


@pytest.mark.parametrize("section,key,value,why", BAD_VALUES, ids=[f"{s}.{k}={v!r}" for s, k, v, _ in BAD_VALUES])
def test_bad_value_is_one_line_naming_key_and_value(section, key, value, why):
    problems = problems_of({section: {key: value}})
    assert len(problems) == 1, problems
    line = problems[0]
    assert f"{section}.{key}" in line
    shown = str(value) if isinstance(value, float) and not math.isfinite(value) else None
    if shown is not None or not isinstance(value, (dict, list)):
        assert (shown or repr(value)) in line, line
    assert why in line, line


@pytest.mark.parametrize("section", ["controller", "policy", "weights", "slurm"])
@pytest.mark.parametrize("value", [5, "text", [1, 2], True])
def test_wrong_type_of_a_whole_section_is_one_line(section, value):
    problems = problems_of({section: value})
    assert problems == [f"c.toml: [{section}]: must be a table, got {value!r}"]


def test_problems_of_every_section_come_in_one_run():
    problems = problems_of({"controller": {"round_seconds": INF, "slurm_timeout": -1, "preempt_signal": "NOPE"},
                            "weights": {"users": {"a": NAN}}, "slurm": 3,
                            "policy": {"name": "shockwave", "shockwave": {"k": -1}}})
    assert len(problems) == 6
    assert any(p.startswith("c.toml: policy.shockwave.k = -1") for p in problems)


def test_inline_shockwave_table_every_typo_and_bad_value():
    problems = problems_of({"policy": {"name": "shockwave",
                                       "shockwave": {"lamda": 3, "k": NAN, "future_rounds": 0, "lambda": 12}}})
    assert len(problems) == 3
    assert problems[0].startswith("c.toml: policy.shockwave.lamda: unknown setting")
    assert "policy.shockwave.k = nan" in problems[1] and "policy.shockwave.future_rounds = 0" in problems[2]


def test_signal_names_are_normalised():
    for given in ("USR2", "sigusr2", "SIGUSR2", " usr2 "):
        assert config_from_dict({"controller": {"preempt_signal": given}}).preempt_signal == "USR2"


def test_policy_hyperparameters_of_a_non_shockwave_policy_are_refused():
    problems = problems_of({"policy": {"name": "fifo", "config": "tacc_32gpus.json"}})
    assert len(problems) == 1 and "policy.config" in problems[0]


def test_missing_shockwave_config_file_is_one_line(tmp_path):
    problems = problems_of({"policy": {"config": str(tmp_path / "nope.json")}})
    assert len(problems) == 1 and "nope.json" in problems[0]


def test_missing_file_and_toml_syntax(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "none.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[controller\nround_seconds = 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    assert len(e.value.problems) == 1 and "bad.toml" in e.value.problems[0]


@pytest.mark.parametrize("command", [["controller", "check", "--syntax-only"], ["controller", "run", "--max-rounds", "1"],
                                     ["controller", "check"]])
def test_cli_exits_2_with_every_problem_and_no_traceback(tmp_path, command):
    p = tmp_path / "c.toml"
    p.write_text('[controller]\nround_seconds = inf\nslurm_timeout = -1\npreempt_signal = "NOPE"\nstate_dir = ""\n'
                 '[weights]\nusers = { a = nan }\n')
    res = CliRunner().invoke(cli, [*command, "--config", str(p)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 5 and all(ln.startswith("Error: ") for ln in lines), res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "state").exists()


def test_check_json_prints_config_problems(tmp_path):
    import json
    p = tmp_path / "c.toml"
    p.write_text('[controller]\nround_seconds = nan\n')
    res = CliRunner().invoke(cli, ["controller", "check", "--json", "--config", str(p)])
    assert res.exit_code == 2
    out = json.loads(res.output)
    assert out["ok"] is False and len(out["problems"]) == 1 and "round_seconds = nan" in out["problems"][0]


def test_state_store_journal_and_reopen(tmp_path):
    s = StateStore(tmp_path / "state.sqlite")
    a = s.intend(0, 5, "requeue_hold", None, 0)
    s.settle([a], "done")
    b = s.intend(0, 6, "hold", None, 0)
    s.put("policy_state", {"x": 1})
    s.close()
    s = StateStore(tmp_path / "state.sqlite")
    assert s.requeued_at(5, 0) and not s.requeued_at(5, 1)
    assert [r["status"] for r in s.actions(job_id=6)] == ["intent"]
    assert s.get("policy_state") == {"x": 1}
    s.settle([b], "done")
    assert s.held_by_us() == {"5", "6"}          # a requeue-hold is our hold too
    s.settle([s.intend(1, 5, "release", None, 1)], "done")
    assert s.held_by_us() == {"6"}
    s.intend(2, 9, "requeue_hold", None, 0)      # a crash during the call: held maybe, maybe unmarked (enact.py)
    assert s.held_by_us() == {"6", "9"}
    ids = s.intend_many(2, (7, 8), "hold", "shockwave:held x", {8: 3})      # one transaction per action
    s.close()
    s = StateStore(tmp_path / "state.sqlite")
    rows = {r["job_id"]: r for r in s.actions(verb="hold", status="intent")}
    assert set(rows) == {"7", "8"} and sorted(r["id"] for r in rows.values()) == sorted(ids)
    assert rows["8"]["restart_count"] == 3 and rows["7"]["restart_count"] == 0
    ro = StateStore(tmp_path / "state.sqlite", readonly=True)
    assert ro.get("policy_state") == {"x": 1}


def test_the_documented_example_is_generated_from_the_models_and_loads_to_the_defaults():
    import re
    from pathlib import Path

    from slurm_shockwave.controller.config import ControllerConfig
    from slurm_shockwave.controller.config_example import example_toml
    from solver.policies import default_policy
    path = Path(__file__).resolve().parent.parent / "docs" / "config.example.toml"
    assert path.read_text() == example_toml(), "regenerate: shockwave controller example-config > " + str(path)
    res = CliRunner().invoke(cli, ["controller", "example-config"])
    assert res.exit_code == 0 and res.output == example_toml()
    cfg = load_config(path)
    assert cfg.model_dump() == ControllerConfig().model_dump()
    assert cfg.metrics_address == "127.0.0.1" and cfg.slurm.bin_dir is None and cfg.source == str(path)
    own = default_policy().config_model
    assert cfg.policy.name == default_policy().name and cfg.policy.settings == own()   # the built-in defaults
    from slurm_shockwave.controller.config import SECTIONS
    for name in SECTIONS:                                                          # every table and setting
        model = ControllerConfig if name == "controller" else ControllerConfig.model_fields[name].annotation
        assert f"\n[{name}]\n" in example_toml()
        for key in model.model_fields:
            assert key in SECTIONS or re.search(rf"^(# )?{key} = ", example_toml(), re.M), key
    for key in own.model_fields:
        assert re.search(rf"^# {key.rstrip('_')}( = |: not set)", example_toml(), re.M), key


def test_a_commented_out_setting_of_the_example_is_valid_when_uncommented():
    import re

    from slurm_shockwave.controller.config_example import example_toml
    text = re.sub(r"^# ((?:min_run|poll|min_round)_seconds|bin_dir) = ", r"\1 = ", example_toml(), flags=re.M)
    cfg = config_from_dict(__import__("tomllib").loads(text), "c.toml")
    assert cfg.min_run_seconds == 240 and cfg.poll_seconds == 5 and cfg.slurm.bin_dir == "/usr/bin"
    cfg = config_from_dict({"policy": {"name": "shockwave", "config": "tacc_32gpus.json"}}, "c.toml")
    assert cfg.policy.settings.k_norm is None and cfg.policy.settings.k == 1e-3           # the reference's k


def test_every_policy_with_settings_takes_a_table_named_after_it():
    cfg = config_from_dict({"policy": {"name": "shockwave", "shockwave": {"lambda": 12, "future_rounds": 5}}})
    assert cfg.policy.settings.lambda_ == 12 and cfg.policy.settings.future_rounds == 5
    problems = problems_of({"policy": {"name": "fifo", "fifo": {"x": 1}}})
    assert problems == ["c.toml: policy.fifo = {'x': 1}: the fifo policy has no settings"]
    problems = problems_of({"policy": {"name": "fifo", "shockwave": {"k": 1}}})
    assert len(problems) == 1 and "policy.shockwave" in problems[0] and "another policy" in problems[0]
    problems = problems_of({"policy": {"name": "shockwave", "config": "tacc_32gpus.json", "shockwave": {"k": 1}}})
    assert len(problems) == 1 and "policy.config" in problems[0] and "not both" in problems[0]
    assert problems_of({"policy": {"name": "shockwave", "shockwave": 3}}) == [
        "c.toml: policy.shockwave = 3: must be a table"]
    cfg = config_from_dict({"policy": {"shockwave-edf": {"critical_margin": 0.3}}})          # the default's table
    assert cfg.policy.settings.critical_margin == 0.3


def test_problems_inside_a_settings_file_name_the_file_and_the_key(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text("[shockwave]\nk = -1\nlambda = \"x\"\n")
    problems = problems_of({"policy": {"name": "shockwave", "config": str(p)}})
    # the path as every problem shows a value: whole up to 80 characters, else its start and its end (the file name)
    # around "..." (a runner's temporary path varies in length: pytest-9 or pytest-103)
    assert len(problems) == 2 and all(f"policy.config = {show(str(p))}: " in x and "s.toml" in x for x in problems)
    assert "k = -1: must be >= 0" in problems[0] and "lambda = 'x': must be a number" in problems[1]
    p.write_text("[shockwave\n")
    problems = problems_of({"policy": {"name": "shockwave", "config": str(p)}})
    assert len(problems) == 1 and f"{p}:1: bad TOML" in problems[0]


def test_sighup_update_in_place_keeps_the_restart_only_settings():
    from slurm_shockwave.controller.config import RESTART_ONLY
    cfg = config_from_dict({"controller": {"state_dir": "/a", "round_seconds": 10}}, "old.toml")
    new = config_from_dict({"controller": {"state_dir": "/b", "round_seconds": 20}, "weights": {"users": {"a": 2.0}},
                            "policy": {"name": "fifo"}}, "new.toml")
    assert set(RESTART_ONLY) == {"backend", "state_dir", "event_store", "metrics_port", "metrics_address"}
    assert cfg.update_from(new, keep=RESTART_ONLY) == ["round_seconds", "policy", "weights"]
    assert cfg.state_dir == "/a" and cfg.round_seconds == 20 and cfg.weight("a", "x") == 2.0
    assert cfg.policy.name == "fifo" and cfg.policy.settings is None and cfg.source == "new.toml"
    with pytest.raises(ValueError):
        cfg.round_seconds = INF                          # an assignment is validated too
    cfg.dry_run = True
    assert cfg.dry_run is True


def test_round_timing_knobs():
    cfg = config_from_dict({"controller": {"poll_seconds": 2, "min_round_seconds": 3.5}})
    assert cfg.poll_seconds == 2 and cfg.min_round_seconds == 3.5
    assert config_from_dict({}).poll_seconds is None
    assert len(problems_of({"controller": {"poll_seconds": 0, "min_round_seconds": NAN}})) == 2
