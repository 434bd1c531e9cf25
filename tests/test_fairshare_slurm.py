"""Fairness between users and accounts on a real Slurm cluster with accounting (issue 24), on every version.

Two accounts at RawShares 3:1 (sacctmgr): teama holds sw-ann, who submits 1 large job (3 GPUs), and sw-carl, who
submits 10 small jobs (1 GPU each); teamb holds sw-bob with 10 small jobs. One node with 8 GPUs; the controller runs
in authoritative mode with the default policy, its budgets read from sshare each round. Entitled: teama 6 GPUs
(split 3:3 between its two users, whatever their number of jobs), teamb 2. Measured from sacct (each run's start and
end, times its GPUs) over a window in which every user has work waiting (carl and bob have pending jobs, ann's job
has work left), after the controller's first rounds:

* account GPU-time teama : teamb within 10% of 3:1;
* carl (10 small jobs) against ann (1 large job) in the same account: within 5% (splitting buys nothing).

Jobs are sleep loops (no CPU); every wait is a poll with a generous timeout, nothing asserts a duration.
"""
from __future__ import annotations

import calendar
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.share_fixtures import sbatch_as, workdir
from tests.slurm_fixtures import cluster_up, keep_root, make_root, version_test_versions, wait_for

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parent.parent
ACCOUNTS = {"teama": 3, "teamb": 1}
USERS = {"sw-ann": "teama", "sw-carl": "teama", "sw-bob": "teamb"}
ROUND_S = 2.0
#: seconds measured, inside the no-starvation guard's 40 rounds (SHOCKWAVE_FAIR_WINDOW_S: a longer run, e.g. one
#: that sees Slurm's usage ticks, every PriorityCalcPeriod = 60 s here)
WINDOW_S = float(os.environ.get("SHOCKWAVE_FAIR_WINDOW_S", "20"))
JOB_S = int(WINDOW_S) + 120     # every job runs longer than the whole test: no job ends in the window
SCRIPT = """#!/bin/sh
trap 'echo checkpoint-signal' USR1
i=0
while [ $i -lt {seconds} ]; do sleep 1; i=$((i+1)); done
"""


@pytest.fixture(scope="module", params=version_test_versions(), ids=lambda v: f"slurm{v}")
def cluster(request):
    yield from cluster_up("shockwave-fair-", version=request.param, nodes=1, gpus_per_node=8, cpus_per_node=24,
                          accounts=ACCOUNTS, users=USERS)


def controller_config(c, root: Path) -> str:
    return ("[controller]\n"
            f'round_seconds = {ROUND_S}\nmode = "authoritative"\ngrace_seconds = 1\npartition = "{c.partition}"\n'
            f'state_dir = "{root}/state"\nevent_store = "{root}/events"\n'
            + (f'[slurm]\nbin_dir = "{c.bin_dir}"\n' if c.bin_dir else "")
            + f'[slurm.env]\nSLURM_CONF = "{c.env["SLURM_CONF"]}"\n')


def rounds_done(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2)
        try:
            return con.execute("SELECT COUNT(*) FROM rounds WHERE status='done'").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def _utc(stamp: str) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None          # Unknown / None: not started, or still running


def gpu_seconds(c, job_ids, t0: float, t1: float) -> dict:
    """{(account, user): GPU-seconds held in [t0, t1]} from sacct (every run of every job: -D)."""
    r = c.run(["sacct", "-X", "-D", "-n", "-P", "-o", "JobIDRaw,User,Account,AllocTRES,Start,End",
               "-j", ",".join(map(str, job_ids))], env={**c.full_env(), "TZ": "UTC"})
    assert r.returncode == 0, r.stderr
    held: dict = {}
    for line in r.stdout.splitlines():
        _jid, user, account, tres, start, end = line.split("|")
        gpus = re.search(r"gres/gpu=(\d+)", tres)
        a, b = _utc(start), _utc(end)
        if gpus is None or a is None:
            continue
        b = t1 if b is None else b
        held[(account, user)] = held.get((account, user), 0.0) + max(0.0, min(b, t1) - max(a, t0)) * int(gpus[1])
    return held


def test_account_shares_three_to_one_and_splitting_buys_nothing(cluster):
    root = make_root("shockwave-fair-run-")        # the controller's state and event store
    work = workdir(cluster.root)                     # job scripts and outputs: inside a Debian root's bind mount too
    (root / "events").mkdir(mode=0o755)
    script = work / "job.sh"
    script.write_text(SCRIPT.format(seconds=JOB_S))
    script.chmod(0o755)
    hints = f"--comment=shockwave epochs=10 bs=32 epoch_s={JOB_S // 10}"

    def submit(user, gpus):
        return sbatch_as(cluster, user, work, f"--gres=gpu:{gpus}", "--requeue", "--signal=B:USR1@1", hints,
                         "-p", cluster.partition, str(script))
    # the order Slurm starts them in fills the 8 GPUs as entitled (ann 3, carl 3, bob 2); then the queue
    jobs = {"sw-ann": [submit("sw-ann", 3)], "sw-carl": [], "sw-bob": []}
    for k in range(10):
        for user in (["sw-carl"] if k < 3 else []) + (["sw-bob"] if k < 2 else []):
            jobs[user].append(submit(user, 1))
    for k in range(10):
        for user in ("sw-carl", "sw-bob"):
            if len(jobs[user]) < 10:
                jobs[user].append(submit(user, 1))
    ids = [j for js in jobs.values() for j in js]
    cfg = root / "controller.toml"
    cfg.write_text(controller_config(cluster, root))
    log = open(root / "controller.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "slurm_shockwave", "controller", "run", "--config", str(cfg)],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    failed = True
    try:
        db = root / "state" / "state.sqlite"
        wait_for(lambda: rounds_done(db) >= 3 or proc.poll() is not None, timeout=90, interval=0.5,
                 what="three controller rounds")
        assert proc.poll() is None, (root / "controller.log").read_text()[-2000:]
        t0 = time.time()
        time.sleep(WINDOW_S)
        t1 = time.time()
        live = {j.job_id: j for j in cluster.cli.squeue_jobs(job_ids=ids)}
        # every user still has work waiting: pending jobs of carl and bob, ann's job not done
        assert any(live[j].state == "PENDING" for j in jobs["sw-carl"]), "carl ran out of waiting work"
        assert any(live[j].state == "PENDING" for j in jobs["sw-bob"]), "bob ran out of waiting work"
        assert live[jobs["sw-ann"][0]].state in ("RUNNING", "PENDING")
        held = gpu_seconds(cluster, ids, t0, t1)
        status = subprocess.run([sys.executable, "-m", "slurm_shockwave", "status", "--config", str(cfg)],
                                env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "160"}, capture_output=True,
                                text=True, timeout=120)
        failed = False
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        if failed:
            print(keep_root(root))
    ann, carl, bob = held.get(("teama", "sw-ann"), 0), held.get(("teama", "sw-carl"), 0), held.get(("teamb", "sw-bob"), 0)
    figures = (f"Slurm {cluster.slurm_version}: GPU-seconds in {t1 - t0:.0f} s: sw-ann (1 job) {ann:.0f}, sw-carl "
               f"(10 jobs) {carl:.0f}, sw-bob (10 jobs) {bob:.0f}; teama:teamb = {(ann + carl) / max(bob, 1):.2f}, "
               f"carl/ann = {carl / max(ann, 1):.3f}")
    print(figures)
    print(status.stdout)
    assert (ann + carl) / bob == pytest.approx(3.0, rel=0.10), figures
    assert carl / ann == pytest.approx(1.0, rel=0.05), figures
    assert status.returncode == 0, status.stderr
    assert "budgets from Slurm's shares and decayed usage" in status.stdout, status.stdout
    for name in ("teama", "teamb", "sw-ann", "sw-carl", "sw-bob"):
        assert name in status.stdout


def test_down_stops_the_database_and_slurmdbd_by_pid(cluster):
    """MariaDB and slurmdbd belong to the cluster: data in its directory, MariaDB on 127.0.0.1 only, both recorded by
    pid (and start time) and stopped with the other daemons."""
    import json

    from shockwave_lab.localcluster.daemons import ProcId

    state = json.loads((cluster.root / "cluster.json").read_text())
    procs = {name: ProcId.from_json(v) for name, v in state["daemons"].items()}
    assert {"mariadbd", "slurmdbd", "slurmctld", "munged", "slurmd.node1"} == set(procs)
    assert all(p.alive() for p in procs.values())
    argv = Path(f"/proc/{procs['mariadbd'].pid}/cmdline").read_bytes().split(b"\0")
    assert f"--datadir={cluster.root}/db".encode() in argv and b"--bind-address=127.0.0.1" in argv
    assert cluster.down() == []
    assert not [name for name, p in procs.items() if p.alive()]
