"""Only finite numbers (issue 22 item 3), no Slurm: a number from a user is validated finite and in range where it
enters (hints: `epoch_s=1e-320` is positive but makes the throughput infinite), and every JSON the project writes
(the state database, `--json` outputs, JSON logs) is strict JSON, as jq or JavaScript's JSON.parse read it."""
from __future__ import annotations

import json
import logging
import sqlite3

import pytest
from click.testing import CliRunner

from slurm_shockwave.cli.main import cli
from slurm_shockwave.controller.daemon import JsonFormatter
from slurm_shockwave.journal import StateStore
from slurm_shockwave.slurm.hints import HintError, parse_hints


def strict(text: str):
    """json.loads that rejects NaN, Infinity and -Infinity, as strict parsers do."""
    def bad(name):
        raise ValueError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=bad)


@pytest.mark.parametrize("value", ["1e-320", "5e-324", "0.0000001"])
def test_a_hint_that_would_make_the_throughput_infinite_is_rejected(value):
    with pytest.raises(HintError, match="epoch_s"):
        parse_hints(f"shockwave epochs=10 bs=32 samples=4096 epoch_s={value}", "shockwave")
    assert parse_hints("shockwave epoch_s=0.001", "shockwave").epoch_s == 0.001


def test_the_state_database_holds_strict_json_only(tmp_path):
    st = StateStore(tmp_path / "state.sqlite")
    inf = float("inf")
    st.put("x", {"rho_hat": inf, "nested": [float("nan"), 1.5]})
    st.upsert_jobs([{"job_id": "1", "user": "u", "account": "a", "gpus": 1, "state": "RUNNING", "submit_time": 1.0,
                     "restarts": 0, "view": {"epochs_done": 3, "throughput": inf}}], 100.0)
    st.finish_jobs({"1": ("COMPLETED", {"epochs_done": inf, "total_epochs": 10})}, 200.0)
    st.intend_many(0, [1], "site_factor", inf, {})
    st.close()
    db = sqlite3.connect(tmp_path / "state.sqlite")
    texts = [r[0] for r in db.execute("SELECT value FROM kv")] + [r[0] for r in db.execute("SELECT view FROM jobs")]
    texts += [r[0] for r in db.execute("SELECT value FROM actions")]
    db.close()
    for text in texts:
        strict(text)
    assert strict(texts[0]) == {"rho_hat": None, "nested": [None, 1.5]}


def test_status_json_is_strict_json(tmp_path):
    st = StateStore(tmp_path / "state.sqlite")
    st.upsert_jobs([{"job_id": "7", "user": "u", "account": "a", "gpus": 1, "state": "RUNNING", "submit_time": 1.0,
                     "restarts": 0, "view": {}}], 100.0)
    st.finish_jobs({"7": ("COMPLETED", {"epochs_done": float("inf"), "total_epochs": 10})}, 200.0)
    st.close()
    res = CliRunner().invoke(cli, ["status", "--state-dir", str(tmp_path), "--all", "--json"])
    assert res.exit_code == 0, res.output
    out = strict(res.output)
    assert [j["epochs_done"] for j in out["jobs"]] == [None]


def test_json_logs_are_strict_json():
    rec = logging.LogRecord("x", logging.INFO, __file__, 1, "rho %s", (float("inf"),), None)
    assert strict(JsonFormatter().format(rec))["msg"] == "rho inf"
    rec.created = float("nan")
    assert strict(JsonFormatter().format(rec))["ts"] is None
