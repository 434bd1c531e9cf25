"""A researcher's first job (issue 22 item 4), without Slurm: the wrapper and the templates find the site's
event store from the site's configuration before any private default and say so in one line; a template that
cannot be submitted says why on the submit host's terminal; `events` finds its config as `status` does; user and
path text is never eaten as markup; tables are never cut in a log.  (The prolog and `controller check`:
tests/test_service_check.py; the templates on a real cluster: tests/test_templates_slurm.py.)"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_shockwave import site
from slurm_shockwave.cli.main import cli
from slurm_shockwave.events.layout import encode_line
from slurm_shockwave.journal import StateStore
from slurm_shockwave.journal.record import RoundRecord
from slurm_shockwave.wrapper.context import find_store
from solver.types import ClusterView, JobPlan, JobView, RoundDecision
from tests.slurm_fixtures import JOB_USER, ensure_user, make_root

REPO = Path(__file__).resolve().parents[1]


def site_config(tmp_path: Path, store: Path) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[controller]\nstate_dir = "{tmp_path / "state"}"\nevent_store = "{store}"\n')
    return cfg


def test_the_store_comes_from_the_site_config_before_any_private_default(tmp_path):
    cfg = site_config(tmp_path, tmp_path / "site-store")
    env = {site.ENV_CONFIG: str(cfg), "HOME": str(tmp_path / "home")}
    assert find_store(env) == (tmp_path / "site-store", f"the site's config {cfg}")
    assert find_store({**env, "SHOCKWAVE_STORE": "/x"})[0] == Path("/x")            # the user's own choice wins
    assert find_store(env, "/y") == (Path("/y"), "--store")
    (tmp_path / "bare.toml").write_text("[controller]\n")                            # the controller's default
    assert find_store({site.ENV_CONFIG: str(tmp_path / "bare.toml")})[0] == Path(site.DEFAULT_EVENT_STORE)
    if not site.SITE_CONFIG.exists():
        root, why = find_store({"HOME": str(tmp_path / "home")})
        assert root == tmp_path / "home" / ".local" / "state" / "shockwave" / "events"
        assert "no controller sees this job's reports" in why


def test_the_wrapper_says_in_one_line_where_the_job_reports(tmp_path):
    store = tmp_path / "store"
    cfg = site_config(tmp_path, store)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOCKWAVE_")}
    env.update({site.ENV_CONFIG: str(cfg), "SLURM_JOB_ID": "4242", "PYTHONPATH": str(REPO)})
    r = subprocess.run([sys.executable, "-m", "slurm_shockwave.wrapper.cli", "--", sys.executable, "-c", "pass"],
                       env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [f"shockwave: reporting to {store} (from the site's config {cfg})"]
    assert list(store.glob("users/*/4242/events.jsonl"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a second user")
def test_a_template_that_cannot_be_submitted_says_why_on_the_terminal():
    """`job_templates/gns.sbatch` run by a user inside a root-owned checkout: Slurm could not create the job's
    output file there (the job would fail with exit 0:53, no output, no message); the template says so and
    submits nothing."""
    ensure_user()
    checkout = make_root("shockwave-checkout-")                      # root-owned 0755, like /opt/slurm-shockwave
    env = {"PATH": "/usr/bin:/bin", "SHOCKWAVE_PYTHON": sys.executable, "HOME": "/tmp"}
    r = subprocess.run(["bash", str(REPO / "job_templates" / "gns.sbatch")], env=env, capture_output=True,
                       text=True, timeout=120, cwd=checkout, user=JOB_USER)
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"shockwave: error: cannot submit from {checkout}"), lines
    assert "cd to a directory of yours" in lines[0]


def test_events_finds_its_config_as_status_does(tmp_path):
    store = tmp_path / "store"
    job_dir = store / "users" / str(os.geteuid()) / "77"
    job_dir.mkdir(parents=True)
    (job_dir / "events.jsonl").write_bytes(encode_line({"v": 1, "kind": "start", "job": "77", "ts": time.time(),
                                                         "restart": 0}))
    env = {site.ENV_CONFIG: str(site_config(tmp_path, store))}
    res = CliRunner().invoke(cli, ["events", "77", "--json"], env=env)
    assert res.exit_code == 0, res.output
    assert '"kind": "start"' in res.output


def _state_with_a_round(tmp_path: Path, reason: str) -> None:
    view = ClusterView(now=time.time(), round_index=4, round_length=60.0, num_gpus=2, jobs=(JobView(
        job_id=11, arrival_time=0.0, num_gpus=1, batch_size=32, epochs_done=1, total_epochs=9, samples_per_epoch=320,
        steps_done=10.0, total_steps=90.0, throughput=1.0, user="[bold]ana[/bold]"),))
    decision = RoundDecision(run=(), plans={11: JobPlan(11, reason=reason)}, path="solved")
    st = StateStore(tmp_path / "state.sqlite")
    st.begin_round(4, time.time())
    st.record_round(RoundRecord(view, decision, policy="shockwave", context={"mode": "authoritative"}), 0)
    st.finish_round(4)
    st.close()


def test_brackets_are_text_and_wide_tables_are_not_cut_in_a_log(tmp_path):
    reason = "deferred [see /var/log/x.log] " + "because " * 40 + "the end"
    _state_with_a_round(tmp_path, reason)
    res = CliRunner().invoke(cli, ["status", "--state-dir", str(tmp_path)])      # not a terminal: plain output
    assert res.exit_code == 0, res.output
    assert "[solved]" in res.output                                              # the solver path, not markup
    assert "[bold]ana[/bold]" in res.output
    assert reason in res.output and "…" not in res.output                        # one line, whole
    res = CliRunner().invoke(cli, ["explain", "11", "--state-dir", str(tmp_path)])
    assert res.exit_code == 0 and "[bold]ana[/bold]" in res.output and "[see /var/log/x.log]" in res.output
