"""Controller config validation: one line per problem; the state store survives reopening."""
import pytest

from slurm_shockwave.controller.config import ConfigError, config_from_dict, load_config
from slurm_shockwave.controller.state import StateStore


def test_defaults_and_weights(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[controller]\nround_seconds = 20\nmode = "authoritative"\n[policy]\nname = "shockwave"\n'
                 'config = "tacc_32gpus.json"\n[weights]\nusers = { alice = 2.0 }\naccounts = { lab = 1.5 }\n')
    cfg = load_config(p)
    assert cfg.round_seconds == 20 and cfg.mode == "authoritative"
    assert cfg.weight("alice", "lab") == 3.0 and cfg.weight("bob", "x") == 1.0


def test_every_problem_is_reported_on_its_own_line():
    with pytest.raises(ConfigError) as e:
        config_from_dict({"controller": {"round_seconds": -1, "mode": "bossy", "colour": "red", "grace_seconds": "x"},
                          "policy": {"name": "nope"}, "weights": {"users": {"a": -2}}, "extra": {}}, "c.toml")
    problems = e.value.problems
    assert len(problems) == 7
    assert all("\n" not in p and p.startswith("c.toml: ") for p in problems)
    joined = "\n".join(problems)
    for needle in ("round_seconds", "controller.mode", "controller.colour", "grace_seconds", "policy.name",
                   "weights.users.a", "[extra]"):
        assert needle in joined


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "none.toml")


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
    ro = StateStore(tmp_path / "state.sqlite", readonly=True)
    assert ro.get("policy_state") == {"x": 1}
