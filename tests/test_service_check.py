"""`shockwave controller check` checks the world on real local clusters (issue 10 item 7): partition, GPUs,
PriorityType, JobRequeue, preempt_send_user_signal, event store, state dir, SLURM_CONF, Slurm reachable;
one line per problem, `--json` lists them, non-zero exit.  At run time a partition without GPUs is a warning
every N rounds, not silence."""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_shockwave.controller import daemon
from slurm_shockwave.controller.config import config_from_dict
from shockwave_lab.localcluster import SlurmUnavailable
from tests.slurm_fixtures import make_cluster, make_root, slurm_test_versions

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parent.parent


def check(cfg_path: Path, *extra):
    return subprocess.run([sys.executable, "-m", "slurm_shockwave", "controller", "check", "--config", str(cfg_path),
                           *extra], env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)


def write(path: Path, cluster, **ctl) -> Path:
    lines = ["[controller]"] + [f"{k} = {json.dumps(v)}" for k, v in ctl.items()]
    lines += ["[policy]", 'name = "fifo"', "[slurm]"]
    if getattr(cluster, "bin_dir", None):
        lines.append(f"bin_dir = {json.dumps(str(cluster.bin_dir))}")
    lines += ["[slurm.env]"] + [f"{k} = {json.dumps(v)}" for k, v in cluster.env.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def store(path: Path, user_folder: bool = True) -> Path:
    """An event store laid out as docs/event-schema.md says (root-owned 0755, with _system/ and users/), with a
    user's folder made by hand (these clusters run no prolog hook) unless `user_folder` is false."""
    (path / "_system").mkdir(parents=True, mode=0o755)
    (path / "users").mkdir(mode=0o755)
    if user_folder:
        (path / "users" / "1000").mkdir(mode=0o755)
    os.chmod(path, 0o755)
    return path


def errors(res) -> list[str]:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert all(ln.startswith("Error: ") for ln in lines), res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    return lines


@pytest.fixture(scope="module", params=slurm_test_versions(), ids=lambda v: f"slurm{v}")
def bad_cluster(request):
    """A cluster set up the wrong way for Shockwave: no GPUs, basic priority, no requeue, no user signal."""
    root = make_root("shockwave-badworld-")
    conf = ["PriorityType=priority/basic", "JobRequeue=0", "SlurmctldParameters=enable_configless"]
    if request.param != "22.05":               # newer Slurm spells the user signal PreemptParameters=send_user_signal
        conf.append("PreemptParameters=strict_order")
    c = make_cluster(root, request.param, nodes=1, gpus_per_node=0, extra_conf=conf)
    try:
        try:
            c.ensure_installed()
            c.up(timeout=60)
        except SlurmUnavailable as exc:
            pytest.skip(str(exc))
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def test_a_ready_cluster_passes(slurm_cluster, tmp_path):
    store(tmp_path / "events")
    cfg = write(tmp_path / "c.toml", slurm_cluster, mode="authoritative", partition=slurm_cluster.partition,
                state_dir=str(tmp_path / "state"), event_store=str(tmp_path / "events"))
    res = check(cfg)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("config and cluster OK")
    out = json.loads(check(cfg, "--json").stdout)
    assert out["ok"] is True and out["problems"] == []


def test_a_store_no_job_can_write_to_is_a_problem(slurm_cluster, tmp_path):
    """No prolog hook and no user folder: every job would run unreported; check said OK (issue 22)."""
    store(tmp_path / "events", user_folder=False)
    cfg = write(tmp_path / "c.toml", slurm_cluster, mode="authoritative", partition=slurm_cluster.partition,
                state_dir=str(tmp_path / "state"), event_store=str(tmp_path / "events"))
    res = check(cfg)
    assert res.returncode == 1
    lines = errors(res)
    assert len(lines) == 1 and "Prolog = (null)" in lines[0] and "no job can report" in lines[0], lines
    (tmp_path / "events" / "users" / "1000").mkdir(mode=0o755)     # made by hand: jobs of that user can report
    res = check(cfg)
    assert res.returncode == 0, res.stderr
    assert "prolog=not the shockwave hook ((null)); 1 user folder(s)" in res.stdout, res.stdout
    assert json.loads(check(cfg, "--json").stdout)["prolog"].startswith("not the shockwave hook")


def test_missing_partition_store_and_unwritable_state_one_line_each(slurm_cluster, tmp_path):
    (tmp_path / "not-a-dir").write_text("x")
    cfg = write(tmp_path / "c.toml", slurm_cluster, partition="nosuchpart", state_dir=str(tmp_path / "not-a-dir"),
                event_store=str(tmp_path / "no-events"))
    res = check(cfg)
    assert res.returncode == 1
    lines = errors(res)
    assert len(lines) == 3, lines
    assert any("controller.partition = 'nosuchpart'" in ln and "no such partition" in ln for ln in lines)
    assert any("controller.state_dir" in ln and "not a directory" in ln for ln in lines)
    assert any("controller.event_store" in ln and "does not exist" in ln for ln in lines)
    js = check(cfg, "--json")
    assert js.returncode == 1
    out = json.loads(js.stdout)
    assert out["ok"] is False and sorted(out["problems"]) == sorted(ln[len("Error: "):] for ln in lines)


def test_gpu_type_speeds_must_name_every_type_of_the_partition(slurm_cluster, tmp_path):
    """The speeds are used only when every GPU type has one: on this untyped partition none is (one line)."""
    from slurm_shockwave.slurm.preflight import check_speeds
    store(tmp_path / "events")
    cfg = write(tmp_path / "c.toml", slurm_cluster, partition=slurm_cluster.partition, state_dir=str(tmp_path / "s"),
                event_store=str(tmp_path / "events"))
    cfg.write_text(cfg.read_text().replace("[policy]", "gpu_type_speeds = {v100 = 1.0, k80 = 0.25}\n[policy]"))
    res = check(cfg)
    lines = errors(res)
    assert res.returncode == 1 and len(lines) == 1, lines
    assert "controller.gpu_type_speeds" in lines[0] and "none (untyped gres gpu:N)" in lines[0]
    assert check_speeds({"v100": 1.0}, {"v100", "k80"})[0].endswith(
        "without a speed: k80; the speeds are used only when every type has one (or leave it empty)")
    assert check_speeds({"v100": 1.0, "k80": 0.2, "a100": 3.0}, {"v100", "k80"}) == check_speeds({}, {"v100"}) == []


def test_event_store_that_is_a_file(slurm_cluster, tmp_path):
    (tmp_path / "events").write_text("x")
    cfg = write(tmp_path / "c.toml", slurm_cluster, partition=slurm_cluster.partition,
                state_dir=str(tmp_path / "state"), event_store=str(tmp_path / "events"))
    lines = errors(check(cfg))
    assert len(lines) == 1 and "not a directory" in lines[0] and "event_store" in lines[0]


def test_event_store_writable_by_everyone_is_a_problem(slurm_cluster, tmp_path):
    os.chmod(store(tmp_path / "events"), 0o1777)
    cfg = write(tmp_path / "c.toml", slurm_cluster, partition=slurm_cluster.partition,
                state_dir=str(tmp_path / "state"), event_store=str(tmp_path / "events"))
    lines = errors(check(cfg))
    assert len(lines) == 1 and "event_store" in lines[0] and "1777" in lines[0]


def test_missing_slurm_conf(slurm_cluster, tmp_path):
    store(tmp_path / "events")
    cfg = write(tmp_path / "c.toml", slurm_cluster, partition=slurm_cluster.partition,
                state_dir=str(tmp_path / "state"), event_store=str(tmp_path / "events"))
    cfg.write_text(cfg.read_text().replace(slurm_cluster.env["SLURM_CONF"], str(tmp_path / "gone.conf")))
    res = check(cfg)
    assert res.returncode == 1
    lines = errors(res)
    assert len(lines) == 1 and "SLURM_CONF" in lines[0] and "gone.conf" in lines[0] and "no such file" in lines[0]


def test_a_cluster_set_up_wrong_is_told_line_by_line(bad_cluster, tmp_path):
    store(tmp_path / "events")
    cfg = write(tmp_path / "c.toml", bad_cluster, mode="authoritative", partition=bad_cluster.partition,
                state_dir=str(tmp_path / "state"), event_store=str(tmp_path / "events"))
    res = check(cfg)
    assert res.returncode == 1
    lines = errors(res)
    assert len(lines) == 4, lines
    assert any("PriorityType = priority/basic" in ln for ln in lines)
    assert any("JobRequeue = 0" in ln for ln in lines)
    assert any("preempt_send_user_signal" in ln for ln in lines)
    assert any("no GPUs" in ln for ln in lines)
    # advisory mode does not need the user signal
    write(cfg, bad_cluster, mode="advisory", partition=bad_cluster.partition, state_dir=str(tmp_path / "state"),
          event_store=str(tmp_path / "events"))
    assert len(errors(check(cfg))) == 3


@pytest.mark.parametrize("version", slurm_test_versions())
def test_run_time_partition_without_gpus_is_warned_every_n_rounds(version, tmp_path, caplog):
    root = make_root("shockwave-nogpu-")
    c = make_cluster(root, version, nodes=1, gpus_per_node=0)
    try:
        try:
            c.ensure_installed()
            c.up(timeout=60)
        except SlurmUnavailable as exc:
            pytest.skip(str(exc))
        cfg = config_from_dict({"controller": {"round_seconds": 0.01, "partition": c.partition,
                                               "state_dir": str(tmp_path / "state"), "event_store": str(tmp_path / "ev"),
                                               "dry_run": True},
                                "policy": {"name": "fifo"}, "slurm": {"env": dict(c.env)}}, "test")
        ctl = daemon.Controller(cfg)
        n = 2 * daemon.PARTITION_WARN_EVERY + 1
        try:
            with caplog.at_level(logging.WARNING, logger="slurm_shockwave.controller"):
                assert ctl.run(max_rounds=n) == n
        finally:
            ctl.close()
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)
    warned = [r for r in caplog.records if "no GPUs" in r.getMessage()]
    assert len(warned) == 3                        # rounds 0, N and 2N
    assert c.partition in warned[0].getMessage()


def test_run_warns_about_slurm_conf_at_start(bad_cluster, tmp_path):
    """`controller run` on the badly set-up cluster: the missing settings are logged at start, then it keeps
    retrying (sprio refuses priority/basic) until SIGTERM, which still exits cleanly."""
    import signal

    from tests.slurm_fixtures import wait_for
    store(tmp_path / "events")
    cfg = write(tmp_path / "c.toml", bad_cluster, mode="authoritative", partition=bad_cluster.partition,
                round_seconds=1, state_dir=str(tmp_path / "state"), event_store=str(tmp_path / "events"))
    log_path = tmp_path / "run.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "slurm_shockwave", "controller", "run", "--config", str(cfg)],
                                env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: "Slurm unavailable" in log_path.read_text(), timeout=60, what="the first round attempt")
        text = log_path.read_text()
        assert "PriorityType = priority/basic" in text and "JobRequeue = 0" in text
        assert "preempt_send_user_signal" in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "Traceback" not in log_path.read_text()


def test_slurm_not_reachable(bad_cluster, tmp_path):
    """Last in the module: stops the cluster."""
    store(tmp_path / "events")
    cfg = write(tmp_path / "c.toml", bad_cluster, partition=bad_cluster.partition, state_dir=str(tmp_path / "state"),
                event_store=str(tmp_path / "events"))
    bad_cluster.down()
    lines = errors(check(cfg))
    assert len(lines) == 1 and "Slurm is not reachable" in lines[0]
