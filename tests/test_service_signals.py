"""Signals and the systemd unit (issue 10 item 10), on a real local cluster with a real controller process:
SIGHUP reloads a valid config, keeps the running one (and says why) for an invalid one, never exits;
SIGTERM finishes the round and exits 0; the unit restarts on failure but not on a bad config (exit 2)."""
from __future__ import annotations

import configparser
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import dispositions
from tests.slurm_fixtures import make_root, wait_for
from tests.test_service_metrics import free_port

REPO = Path(__file__).resolve().parent.parent


def metrics(port: int) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def config_text(cluster, root: Path, port: int, **ctl) -> str:
    base = {"round_seconds": 1, "mode": "advisory", "partition": cluster.partition, "state_dir": str(root / "state"),
            "event_store": str(root / "events"), "metrics_port": port, **ctl}
    lines = ["[controller]"] + [f"{k} = {json.dumps(v) if not isinstance(v, float) else v}" for k, v in base.items()]
    lines += ["[policy]", 'name = "fifo"', "[slurm.env]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in cluster.env.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.slurm
def test_sighup_reloads_or_keeps_and_sigterm_exits_cleanly(slurm_cluster):
    root = make_root("shockwave-hup-")
    (root / "events").mkdir()
    port = free_port()
    cfg = root / "config.toml"
    cfg.write_text(config_text(slurm_cluster, root, port))
    log_path = root / "controller.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "slurm_shockwave", "controller", "run", "--config", str(cfg)],
                                env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=dispositions())
    logged = log_path.read_text

    def rounds():
        try:
            return metrics(port).get(("shockwave_rounds_total", (("status", "done"),)), 0)
        except OSError:
            return 0
    try:
        wait_for(lambda: rounds() >= 2, timeout=30, what="two rounds")
        # a valid change: applied at the next round boundary
        cfg.write_text(config_text(slurm_cluster, root, port, round_seconds=2, site_factor=5000))
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "SIGHUP: reloaded" in logged(), timeout=30, what="reload logged")
        assert "round_seconds" in logged() and "site_factor" in logged()
        m = metrics(port)
        assert m[("shockwave_round_length_seconds", ())] == 2
        assert m[("shockwave_config_reloads_total", (("result", "ok"),))] == 1
        # an invalid file: every problem logged on one line, the running config kept, the controller alive
        cfg.write_text(config_text(slurm_cluster, root, port, round_seconds=float("nan"), preempt_signal="NOPE"))
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "keeping the running config" in logged(), timeout=30, what="rejection logged")
        line = next(ln for ln in logged().splitlines() if "keeping the running config" in ln)
        assert "controller.round_seconds = nan" in line and "controller.preempt_signal = 'NOPE'" in line
        before = rounds()
        wait_for(lambda: rounds() >= before + 2, timeout=30, what="rounds go on after a rejected reload")
        assert proc.poll() is None
        m = metrics(port)
        assert m[("shockwave_round_length_seconds", ())] == 2
        assert m[("shockwave_config_reloads_total", (("result", "rejected"),))] == 1
        # a key that needs a restart: kept, and said so
        cfg.write_text(config_text(slurm_cluster, root, port, round_seconds=1, state_dir=str(root / "elsewhere")))
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "needs a restart, running value kept: state_dir" in logged(), timeout=30, what="restart-only")
        assert not (root / "elsewhere").exists()
        # SIGTERM: finishes the round, exits 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = logged()
    shutil.rmtree(root, ignore_errors=True)
    assert "Traceback" not in text
    assert "signal SIGTERM: finishing the round" in text and "controller stopped after" in text


def test_sigterm_while_starting_is_a_clean_stop(tmp_path):
    """A controller signalled while still starting (here: blocked reading its config, a FIFO the test writes
    only after the signal) stops cleanly before its first round and exits 0 (it used to die of the signal)."""
    cfg = tmp_path / "c.fifo"
    os.mkfifo(cfg)
    (tmp_path / "bin").mkdir()                    # no Slurm commands there: the stop must need none
    text = (f'[controller]\nstate_dir = "{tmp_path / "state"}"\nevent_store = "{tmp_path}"\n'
            f'[slurm]\nbin_dir = "{tmp_path / "bin"}"\n')
    proc = subprocess.Popen([sys.executable, "-m", "slurm_shockwave", "controller", "run", "--config", str(cfg)],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, preexec_fn=dispositions())
    try:
        with open(cfg, "w") as fifo:              # returns once the controller opened its config: it is starting
            proc.send_signal(signal.SIGTERM)
            fifo.write(text)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out
    assert "signal SIGTERM: finishing the round" in out and "controller stopped after 0 round(s)" in out, out


def test_a_signal_ignored_when_started_stays_ignored(tmp_path):
    """Started the way a non-interactive shell starts `... &` (SIGINT ignored) under `nohup` (SIGHUP ignored), the
    controller leaves both ignored, while starting and once running: neither stops nor reloads it; SIGTERM does."""
    cfg = tmp_path / "c.fifo"
    os.mkfifo(cfg)
    (tmp_path / "bin").mkdir()                    # no Slurm commands: the controller retries its first round
    text = (f'[controller]\nstate_dir = "{tmp_path / "state"}"\nevent_store = "{tmp_path}"\n'
            f'[slurm]\nbin_dir = "{tmp_path / "bin"}"\n')
    log_path = tmp_path / "controller.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "slurm_shockwave", "controller", "run", "--config", str(cfg)],
                                env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=dispositions(signal.SIGINT, signal.SIGHUP))
    logged = log_path.read_text
    try:
        with open(cfg, "w") as fifo:              # the controller is starting: a SIGINT now would be remembered
            proc.send_signal(signal.SIGINT)
            fifo.write(text)
        wait_for(lambda: "Slurm unavailable" in logged(), timeout=60, what="the round loop")
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGHUP)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, logged()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    out = logged()
    assert "SIGINT was ignored when the controller started: left ignored" in out, out
    assert "SIGHUP was ignored when the controller started: left ignored" in out, out
    assert "signal SIGTERM: finishing the round" in out and "signal SIGINT" not in out and "reloading" not in out, out
    assert "controller stopped after 0 round(s)" in out and "Traceback" not in out, out


def test_bad_config_at_start_exits_2(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[controller]\nround_seconds = inf\n")
    res = subprocess.run([sys.executable, "-m", "slurm_shockwave", "controller", "run", "--config", str(cfg)],
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip() == f"Error: {cfg}: controller.round_seconds = inf: must be a finite number (not nan or inf)"


def test_unit_restarts_on_failure_not_on_bad_config_and_reloads_with_sighup():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(REPO / "docs" / "shockwave-controller.service")
    svc = unit["Service"]
    assert svc["Restart"] == "on-failure"
    assert svc["RestartPreventExitStatus"].split() == ["2"]
    assert svc["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert svc["KillSignal"] == "SIGTERM"
    assert "controller run --config" in svc["ExecStart"]
