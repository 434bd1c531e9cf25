"""`shockwave replay` on a real local Slurm cluster: a small generated trace (12 jobs on 8 GPUs, 2 nodes, 3 users)
at a high time scale, the default policy under the real controller, emulated jobs under the real wrapper.
Every job completes, every epoch is reported exactly once (the replay itself fails otherwise), no daemon is
left, and the real figures agree with the simulated ones within a loose bound (the 5% targets are measured on
the 120-job trace by bench/replay.py, docs/replay.md)."""
import json
import os

import pytest
from click.testing import CliRunner

from slurm_shockwave.cli.main import cli
from shockwave_lab.data_files import experiment_paths
from shockwave_lab.workload.generate import GeneratorOptions, generate, trace_text
from shockwave_lab.workload.throughputs import ThroughputTable

pytestmark = pytest.mark.slurm

#: the CI trace: 12 jobs of 1-4 GPUs, 0.1-0.5 h each, a job every 2 minutes (trace time); 3 contention-heavy users
CI_TRACE = GeneratorOptions(jobs=12, seed=5, interarrival=120, min_hours=0.1, max_hours=0.5,
                            gpu_mix=(0.5, 0.35, 0.15, 0.0), max_gpus=4)


def _daemons(root: str) -> set:
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0].decode(errors="replace")) in ("slurmctld", "slurmd", "munged", "slurmstepd") \
                and any(root.encode() in a for a in argv):
            out.add(int(pid))
    return out


def test_emulated_job_resumes_mid_epoch_without_losing_or_repeating_work(tmp_path):
    """No Slurm: the emulated program under the Training API, stopped by the checkpoint request mid-epoch and
    run again as the next restart, reports every epoch once, at the schedule's batch sizes."""
    import subprocess
    import sys
    import time
    spec = {"name": "x", "epochs": 3, "schedule": [32, 64, 64], "epoch_s": {"32": 40.0, "64": 30.0},
            "samples": 1000, "time_scale": 20.0, "min_bs": 32, "max_bs": 64}     # epochs of 2 s, 1.5 s, 1.5 s
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "store").mkdir()
    env = {**os.environ, "SLURM_JOB_ID": "77", "SHOCKWAVE_STORE": str(tmp_path / "store"),
           "SHOCKWAVE_REQUEUE_ON_SIGNAL": "0"}
    argv = [sys.executable, "-m", "slurm_shockwave.wrapper.cli", "--", sys.executable, "-m",
            "shockwave_lab.replay.emujob", "--spec", "spec.json", "--timeline", "tl.jsonl"]
    first = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (tmp_path / "tl.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)                                   # inside the first epoch (2 s)
    first.send_signal(__import__("signal").SIGUSR1)
    first.wait(30)
    subprocess.run(argv, cwd=tmp_path, env={**env, "SLURM_RESTART_COUNT": "1"}, check=True, timeout=60,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from slurm_shockwave.events.reader import EventReader
    events = EventReader(tmp_path / "store").read_job("77").events
    epochs = [(e.epoch, e.batch_size, e.restart) for e in events if e.kind == "epoch_end"]
    assert sorted(e for e, _b, _r in epochs) == list(range(3))     # each epoch once, none lost
    assert [b for _e, b, _r in sorted(epochs)] == spec["schedule"]
    runs = [json.loads(line) for line in (tmp_path / "tl.jsonl").read_text().splitlines()]
    resumed = [r for r in runs if r["ev"] == "work_start" and r["run"] == 1][0]
    stopped = [r for r in runs if r["ev"] == "work_end" and r["run"] == 0][0]
    assert stopped["why"] == "checkpoint" and resumed["epoch"] == stopped["epoch"]
    assert resumed["in_epoch_s"] == pytest.approx(stopped["in_epoch_s"]) and resumed["in_epoch_s"] > 0


def test_small_replay_completes_and_agrees_with_its_simulation(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the replay needs root to start Slurm")
    paths = experiment_paths("tacc_32gpus")
    trace = tmp_path / "ci.trace"
    trace.write_text(trace_text(generate(CI_TRACE, ThroughputTable.load(paths["throughputs"]))))
    r = CliRunner().invoke(cli, ["replay", "--trace", str(trace), "--throughputs", str(paths["throughputs"]),
                                 "--gpus", "8", "--nodes", "2", "--users", "3", "--time-scale", "60", "--json"])
    assert r.exit_code == 0, r.output[-3000:]
    res = json.loads(r.output[r.output.index("{\n"):])
    real, sim = res["real"], res["simulated"]
    assert res["jobs"] == real["jobs"] == sim["jobs"] == 12
    assert set(real["per_job"]) == set(sim["per_job"])
    assert real["restarts"] > 0 and real["restart_cost_n"] > 0 and res["restart_cost_s"] > 0
    from shockwave_lab.replay.api import load
    jobs, _specs, _table = load(trace, paths["throughputs"], 8, 3)
    assert real["epochs"] == sum(j.epochs for j in jobs)                   # every epoch once (and checked)
    assert set(real["user_share"]) == set(sim["user_share"]) == {"swreplay-u1", "swreplay-u2", "swreplay-u3"}
    for key in ("makespan_s", "avg_jct_s", "worst_rho", "unfair_fraction", "ftf_dynamic_worst", "restarts"):
        assert key in real and key in sim
    # a gross disagreement only (a unit or time-scale slip is off by 60x): how close the two are depends on the
    # machine's load and is measured by bench/replay.py into docs/replay.md, never asserted here
    assert abs(res["deviation"]["makespan_s"]) < 0.5, res["deviation"]
    assert abs(res["deviation"]["avg_jct_s"]) < 0.5, res["deviation"]
    assert _daemons(res["root"]) == set(), "the replay left Slurm daemons running"
