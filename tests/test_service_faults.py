"""Faults of the controller's own machine (issue 10 item 8): each is one line naming the cause and what to do,
a non-zero exit, no traceback; a full disk keeps the controller alive and NOT enacting until writes succeed
again, then it resumes by itself (real tmpfs, real ENOSPC, real local Slurm cluster)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurm_shockwave.controller.config import config_from_dict
from slurm_shockwave.controller.daemon import Controller
from slurm_shockwave.controller.metrics_server import ControllerMetrics
from slurm_shockwave.journal.store import StateStore
from slurm_shockwave.slurm import SlurmCLI
from tests.slurm_fixtures import wait_for

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def shockwave(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "slurm_shockwave", *args], env=ENV, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def write_config(path: Path, state_dir: Path, **extra) -> Path:
    lines = ["[controller]", f'state_dir = "{state_dir}"', f'event_store = "{path.parent}/events"',
             "round_seconds = 1", *(f"{k} = {v!r}".replace("'", '"') for k, v in extra.items()),
             "[policy]", 'name = "fifo"', "[slurm.env]", 'SLURM_CONF = "/nonexistent/slurm.conf"']
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_one_line(res, *needles):
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in res.stderr + res.stdout
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def tmpfs(tmp_path):
    """mount(tmpfs) helper: mounts under tmp_path, unmounts everything at the end (needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def mount(name: str, size: str = "4m", ro: bool = False) -> Path:
        d = tmp_path / name
        d.mkdir(exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}" + (",ro" if ro else ""), "tmpfs", str(d)],
                       check=True, capture_output=True)
        mounted.append(d)
        return d
    yield mount
    for d in reversed(mounted):
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def test_metrics_port_in_use_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = write_config(tmp_path / "c.toml", tmp_path / "state", metrics_port=port)
        res = shockwave("controller", "run", "--config", str(cfg))
    line = assert_one_line(res, f"127.0.0.1:{port}", "in use", "metrics_port")
    assert "Address already in use" in line


def test_corrupt_state_db_is_one_line(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.sqlite").write_bytes(b"this is not an SQLite database, it is garbage" * 200)
    cfg = write_config(tmp_path / "c.toml", state)
    assert_one_line(shockwave("controller", "run", "--config", str(cfg)), "state.sqlite", "corrupt", "mv ")
    # `check` finds it too (next to the Slurm problem of this config), one line each
    res = shockwave("controller", "check", "--config", str(cfg))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert any("state.sqlite" in ln and "corrupt" in ln for ln in res.stderr.splitlines())


def test_read_only_state_dir_is_one_line(tmp_path, tmpfs):
    state = tmpfs("state")
    StateStore(state / "state.sqlite").close()             # an existing state, then the filesystem goes read-only
    subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True, capture_output=True)
    cfg = write_config(tmp_path / "c.toml", state)
    assert_one_line(shockwave("controller", "run", "--config", str(cfg)), str(state), "Read-only file system",
                    "read-write")
    res = shockwave("controller", "check", "--config", str(cfg))
    assert res.returncode == 1
    assert any("state_dir" in ln and "not writable" in ln for ln in res.stderr.splitlines()), res.stderr


def test_second_instance_is_one_line(tmp_path):
    state = tmp_path / "state"
    cfg = config_from_dict({"controller": {"state_dir": str(state), "event_store": str(tmp_path / "ev")},
                            "policy": {"name": "fifo"}})
    first = Controller(cfg, cli=SlurmCLI(runner=lambda *a, **k: None))
    try:
        res = shockwave("controller", "run", "--config", str(write_config(tmp_path / "c.toml", state)))
        assert_one_line(res, "another controller", str(os.getpid()))
    finally:
        first.close()


# ---------------------------------------------------------------------- disk full, on a real cluster
class Recorder:
    """subprocess.run for SlurmCLI that remembers every command changing Slurm (and when)."""

    def __init__(self):
        self.changes: list[tuple[float, list[str]]] = []

    def __call__(self, argv, **kw):
        cmd = os.path.basename(argv[0])          # a bin_dir gives full paths
        if cmd in ("scancel", "sbatch") or (cmd == "scontrol" and argv[1] not in ("show", "ping")):
            self.changes.append((time.time(), list(argv)))
        return subprocess.run(argv, **kw)


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    for _ in range(64):                        # the last partial blocks too
        try:
            with open(filler, "ab") as f:
                f.write(b"\0" * 512)
        except OSError:
            break
    return filler


@pytest.mark.slurm
def test_disk_full_keeps_running_enacts_nothing_then_resumes(slurm_cluster, tmpfs):
    c = slurm_cluster
    root = Path(c.root) / "diskfull"             # under the cluster dir: visible inside a chroot'ed Slurm too
    root.mkdir()
    (root / "events").mkdir()
    script = root / "job.sh"
    script.write_text("#!/bin/sh\nsleep 300\n")
    state = tmpfs("state", size="2m")
    ids = []
    # an unmanaged job takes every GPU, so a managed job stays pending and the plan defers it (advisory: hold)
    ids.append(c.cli.sbatch(str(script), ["-N", str(len(c.node_names)), "--gres=gpu:4", f"--chdir={root}",
                                          f"--output={root}/blk.out", "-p", c.partition]))
    wait_for(lambda: c.cli.squeue_jobs(job_ids=[ids[0]])[0].running, timeout=30, what="blocker running")
    cfg = config_from_dict({"controller": {"round_seconds": 0.5, "mode": "advisory", "partition": c.partition,
                                           "state_dir": str(state), "event_store": str(root / "events")},
                            "policy": {"name": "fifo"}, "slurm": {"env": dict(c.env)}}, "test")
    rec, metrics, box = Recorder(), ControllerMetrics(), {}

    def run():
        box["ctl"] = Controller(cfg, cli=SlurmCLI(env=c.env, runner=rec), metrics=metrics)
        try:
            box["rounds"] = box["ctl"].run()
        finally:
            box["ctl"].close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    filler = None
    try:
        rounds = lambda: metrics.rounds.labels("done")._value.get()
        failures = lambda: metrics.state_write_failures._value.get()
        wait_for(lambda: rounds() >= 2, timeout=30, what="two rounds")
        filler = fill(state)
        full_at = time.time()
        m = c.cli.sbatch(str(script), ["--gres=gpu:1", "--comment=shockwave epochs=5", f"--chdir={root}",
                                       f"--output={root}/m.out", "-p", c.partition])
        ids.append(m)
        wait_for(lambda: failures() >= 4, timeout=60, what="rounds failing on the full disk")
        assert t.is_alive(), "the controller died on a full disk"
        assert metrics.up._value.get() == 0 and metrics.enacting._value.get() == 0
        job = c.cli.squeue_jobs(job_ids=[m])[0]
        assert job.pending and not job.held, "a decision was enacted without a journal entry"
        assert [a for ts, a in rec.changes if ts >= full_at] == [], "Slurm was changed while the disk was full"
        done_while_full = rounds()
        filler.unlink()
        filler = None
        freed_at = time.time()
        wait_for(lambda: c.cli.squeue_jobs(job_ids=[m])[0].held, timeout=60, what="the deferred job held after recovery")
        assert rounds() > done_while_full and metrics.up._value.get() == 1
        assert any(str(m) in " ".join(a) for ts, a in rec.changes if ts >= freed_at)
        store = StateStore(state / "state.sqlite", readonly=True)
        assert any(a["job_id"] == str(m) and a["status"] == "done" for a in store.actions())
        store.close()
    finally:
        if filler is not None:
            filler.unlink()
        if "ctl" in box:
            box["ctl"].backend.stop_event.set()
        t.join(60)
        c.cli.cancel(ids)
    assert not t.is_alive()


def test_state_db_corrupt_inside_is_refused_at_start(tmp_path):
    """A database whose header is fine but whose pages are damaged: found by SQLite's quick check at start."""
    state = tmp_path / "state"
    s = StateStore(state / "state.sqlite")
    s.upsert_jobs([{"job_id": str(i), "user": "u", "account": "a", "gpus": 1, "state": "PENDING", "submit_time": 0,
                    "restarts": 0, "view": {"pad": "x" * 500}} for i in range(200)], 0.0)
    s.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    db = state / "state.sqlite"
    data = bytearray(db.read_bytes())
    page = 4096
    for off in range(3 * page, len(data) - page, 7 * page):      # scribble over some pages past the header
        data[off + 8:off + 200] = b"\xff" * 192
    db.write_bytes(bytes(data))
    res = shockwave("controller", "run", "--config", str(write_config(tmp_path / "c.toml", state)))
    assert_one_line(res, "state.sqlite", "corrupt", "mv ")


def test_start_on_a_full_disk_is_one_line(tmp_path, tmpfs):
    state = tmpfs("state", size="1m")
    StateStore(state / "state.sqlite").close()
    fill(state)
    res = shockwave("controller", "run", "--config", str(write_config(tmp_path / "c.toml", state)))
    assert_one_line(res, "state", "free space")
