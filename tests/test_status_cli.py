"""status / explain / events and the Prometheus endpoint, on the state of a real short controller run
(a local Slurm cluster, managed jobs that report epochs to the event store)."""
from __future__ import annotations

import json
import socket
import urllib.request

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from slurm_shockwave.cli.main import cli
from slurm_shockwave.controller.config import config_from_dict
from slurm_shockwave.controller.daemon import Controller
from slurm_shockwave.controller.metrics_server import ControllerMetrics
from slurm_shockwave.events.writer import EventWriter
from shockwave_lab.localcluster import LocalCluster, SlurmUnavailable
from tests.slurm_fixtures import make_root

pytestmark = pytest.mark.slurm


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def run_state():
    root = make_root("shockwave-status-")
    c = LocalCluster(root=root / "slurm", nodes=1, gpus_per_node=2)
    try:
        c.ensure_installed()
        c.up()
    except SlurmUnavailable as e:
        pytest.skip(str(e))
    server = None
    try:
        script = root / "job.sh"
        script.write_text("#!/bin/sh\nsleep 300\n")
        ids = [c.cli.sbatch(str(script), ["--gres=gpu:1", "--requeue", "--output=/dev/null", "-p", c.partition,
                                          "--comment=shockwave epochs=20 bs=32 max_bs=128 samples=5000",
                                          f"--job-name=j{i}"]) for i in range(4)]
        store = root / "events"
        store.mkdir()
        paths = {}
        for n, jid in enumerate(ids[:2]):
            w = EventWriter.for_job(store, str(jid))
            paths[jid] = w.path
            w.emit("start", batch_size=32, total_epochs=20, samples_per_epoch=5000, gpus=1)
            for e in range(3 + n):
                w.emit("epoch_end", epoch=e, batch_size=32 if e < 2 else 64, samples=5000,
                       duration_s=30.0 if e < 2 else 20.0)
        with open(paths[ids[0]], "ab") as f:
            f.write(b'{"v": 1, "kind": "teleport", "job": "%d", "ts": 1}\n' % ids[0])
            f.write(b"this is not json\n")
        port = free_port()
        cfg = config_from_dict({"controller": {"round_seconds": 0.5, "mode": "advisory", "partition": c.partition,
                                               "state_dir": str(root / "state"), "event_store": str(store),
                                               "metrics_port": port},
                                "policy": {"name": "shockwave", "config": "tacc_32gpus.json"},
                                "weights": {"users": {"root": 2.0}}}, "test")
        cfg.slurm.env = dict(c.env)
        metrics = ControllerMetrics()
        server = metrics.serve(port)
        ctl = Controller(cfg, metrics=metrics)
        try:
            ctl.run(max_rounds=3)
        finally:
            ctl.close()
        yield {"root": root, "ids": ids, "state_dir": str(root / "state"), "store": str(store), "port": port}
    finally:
        if server is not None:
            metrics.shutdown()
        try:
            c.cli.cancel(ids)
        except Exception:  # noqa: BLE001
            pass
        c.down()


def invoke(*args):
    r = CliRunner().invoke(cli, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_status_json(run_state):
    out = invoke("status", "--state-dir", run_state["state_dir"], "--json")
    cl = out["cluster"]
    assert cl["gpus"] == 2 and cl["round"] == 2 and cl["mode"] == "advisory" and cl["policy"] == "shockwave-paper"
    assert cl["gpus_planned"] <= 2 and cl["solver_path"] in ("solved", "cached")
    rows = {int(r["job_id"]): r for r in out["jobs"]}
    assert set(rows) == set(run_state["ids"])
    first = rows[run_state["ids"][0]]
    assert first["epochs_done"] == 3 and first["total_epochs"] == 20 and first["batch_size"] == 64
    assert first["weight"] == 2.0 and first["predicted_remaining_s"] > 0
    assert sum(r["planned_now"] for r in rows.values()) >= 1
    for r in rows.values():
        assert r["reason"]
        if r["state"] == "HELD":
            assert r["reason"].startswith(("deferred", "planned in round"))
    only_running = invoke("status", "--state-dir", run_state["state_dir"], "--state", "RUNNING", "--json")
    assert all(r["state"] == "RUNNING" for r in only_running["jobs"])
    assert invoke("status", "--state-dir", run_state["state_dir"], "--user", "nobody", "--json")["jobs"] == []


def test_status_table_renders(run_state):
    r = CliRunner().invoke(cli, ["status", "--state-dir", run_state["state_dir"]])
    assert r.exit_code == 0 and "round 2" in r.output and str(run_state["ids"][0]) in r.output


def test_explain_json(run_state):
    jid = run_state["ids"][1]
    out = invoke("explain", str(jid), "--state-dir", run_state["state_dir"], "--json")
    assert out["epochs_done"] == 4 and out["bs_history"] == [32, 32, 64, 64]
    regimes = {int(k): v for k, v in out["posterior"]["regimes"].items()}
    assert 32 in regimes and 64 in regimes and 14 <= sum(regimes.values()) <= 16   # 16 epochs left
    assert out["predicted_remaining_s"] > 0 and out["plan"]["path"] in ("solved", "cached")
    assert out["weight"] == 2.0


def test_explain_says_what_holds_a_waiting_job_back_and_until_when(run_state):
    """4 one-GPU jobs on 2 GPUs: a job not running is held back by the jobs whose fair-finish deadline (the
    default's latest fair start) comes first; explain counts them, says how many arrived after it and when it
    is expected to start."""
    rows = invoke("status", "--state-dir", run_state["state_dir"], "--json")["jobs"]
    waiting = [r for r in rows if r["state"] != "RUNNING"]
    assert waiting
    for r in waiting:
        out = invoke("explain", r["job_id"], "--state-dir", run_state["state_dir"], "--json")
        held, mine = out["contention"], out["plan"]["fair_finish_in_s"]
        assert held["gpus_asked"] == 4 and held["gpus"] == 2
        deadlines = [invoke("explain", o["job_id"], "--state-dir", run_state["state_dir"], "--json")["plan"]
                     ["fair_finish_in_s"] for o in rows if o["job_id"] != r["job_id"]]
        assert held["ahead"] == sum(d is not None and mine is not None and d < mine for d in deadlines)
        assert 0 <= held["ahead_arrived_later"] <= held["ahead"]
        text = CliRunner().invoke(cli, ["explain", r["job_id"], "--state-dir", run_state["state_dir"]]).output
        assert f"held back: 4 GPUs asked of 2; {held['ahead']} jobs come first" in text
        assert "expected start" in text


def test_explain_unknown_job_is_one_line():
    r = CliRunner().invoke(cli, ["explain", "999999", "--state-dir", "/nonexistent"])
    assert r.exit_code == 2 and r.output.count("\n") == 1


def test_events_json_lists_rejected_lines(run_state):
    jid = run_state["ids"][0]
    out = invoke("events", str(jid), "--store", run_state["store"], "--json")
    assert [e["kind"] for e in out["events"]][:2] == ["start", "epoch_end"] and len(out["events"]) == 4
    reasons = {r["reason"] for r in out["rejected"]}
    assert len(out["rejected"]) == 2 and reasons


def test_metrics_endpoint_parses(run_state):
    text = urllib.request.urlopen(f"http://127.0.0.1:{run_state['port']}/metrics", timeout=10).read().decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    rounds = {s.labels.get("status"): s.value for s in fams["shockwave_rounds"].samples if s.name.endswith("_total")}
    assert rounds["done"] == 3
    assert fams["shockwave_gpus_capacity"].samples[0].value == 2
    solve = {s.name: s.value for s in fams["shockwave_solve_seconds"].samples}
    assert solve["shockwave_solve_seconds_count"] == 3
    acts = {s.labels["verb"]: s.value for s in fams["shockwave_enact_actions"].samples if s.name.endswith("_total")}
    assert acts.get("hold", 0) + acts.get("site_factor", 0) >= 1
    assert "shockwave_slurm_read_seconds" in fams and "shockwave_event_lines_rejected" in fams
    rejected = {s.labels["reason"]: s.value for s in fams["shockwave_event_lines_rejected"].samples}
    assert sum(rejected.values()) == 2
