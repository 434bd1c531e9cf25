"""Job side on a real local Slurm cluster (issue 10 items 3 and 5).

* slurmctld stopped while a job checkpoints on the preemption signal: the wrapper's `scontrol requeue`
  fails while it is down and is retried with back-off; once slurmctld is back the job is requeued, resumes
  from its checkpoint and finishes every epoch exactly once (never recorded COMPLETED with work left).
* two real users and a store laid out as docs/event-schema.md says: user A cannot create any path user B's
  next job needs; B's job reports normally and the controller's reader accepts B's events under B's uid.

One cluster for the module, with the prolog/epilog hook installed (it creates users/<uid> as root).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_shockwave.events import EventReader, summarize
from shockwave_lab.localcluster import LocalCluster, SlurmUnavailable
from shockwave_lab.localcluster import daemons as d
from shockwave_lab.localcluster import statefile
from tests.slurm_fixtures import ensure_user, make_root, wait_for

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[1]
USER_A, USER_B = "swjobuser", "swjobuser2"

TRAIN = """
import os, sys, time
from slurm_shockwave.wrapper import Training

class Model:
    def __init__(self):
        self.seen = []
    def state_dict(self):
        if run.should_checkpoint():
            time.sleep(float(os.environ.get("SLOW_SAVE", "0")))   # a slow checkpoint write
        return {"seen": list(self.seen)}
    def load_state_dict(self, state):
        self.seen = state["seen"]

m = Model()
run = None
run = Training(m, total_epochs=int(sys.argv[1]), samples_per_epoch=100, batch_size=16)
print("resume", run.start_epoch, "restart", os.environ.get("SLURM_RESTART_COUNT"), flush=True)
for epoch in run.epochs():
    time.sleep(float(sys.argv[2]))
    m.seen.append(epoch)
print("seen", m.seen, flush=True)
"""


class Site:
    def __init__(self, root: Path):
        self.root = root
        self.store, self.work, self.hooks = root / "store", root / "work", root / "hooks"
        for p in (self.store, self.work, self.hooks):
            p.mkdir()
        os.chmod(self.store, 0o755)
        (self.store / "_system").mkdir(mode=0o755)
        (self.store / "users").mkdir(mode=0o755)
        os.chmod(self.work, 0o1777)
        for name in ("shockwave-hook.sh", "shockwave_hook.py"):
            shutil.copy2(REPO / "prolog_epilog" / name, self.hooks / name)
        shutil.copy2(REPO / "slurm_shockwave" / "slurm" / "hints.py", self.hooks / "shockwave_hints.py")
        shutil.copy2(REPO / "slurm_shockwave" / "events" / "layout.py", self.hooks / "shockwave_layout.py")
        (self.hooks / "shockwave-hook.conf").write_text(
            f"SHOCKWAVE_STORE={self.store}\nSHOCKWAVE_HOOK_LOG={self.hooks / 'hook.log'}\n")
        (self.work / "train.py").write_text(TRAIN)
        os.chmod(self.work / "train.py", 0o644)
        hook = self.hooks / "shockwave-hook.sh"
        self.conf = [f"Prolog={hook}", f"Epilog={hook}", "PrologFlags=Alloc"]
        self.cluster: LocalCluster | None = None

    def script(self, epochs: int, epoch_s: float, extra_env: str = "") -> Path:
        p = self.work / f"job-{epochs}-{epoch_s}.sh"
        p.write_text("#!/bin/sh\n"
                     f"export PYTHONPATH={REPO} SHOCKWAVE_STORE={self.store} {extra_env}\n"
                     f"export SHOCKWAVE_CHECKPOINT_DIR={self.work}/ck-$SLURM_JOB_ID\n"
                     f"exec {sys.executable} -m slurm_shockwave.wrapper.cli -- {sys.executable} "
                     f"{self.work / 'train.py'} {epochs} {epoch_s}\n")
        p.chmod(0o755)
        return p

    def sbatch(self, script: Path, *args: str, user: str | None = None) -> str:
        argv = ["sbatch", "--parsable", "-D", str(self.work), "-o", str(self.work / "out.%j"),
                "--comment=shockwave epochs=12", "--requeue", "--gres=gpu:1", "--open-mode=append", *args,
                str(script)]
        r = subprocess.run(argv, env=self.cluster.full_env(), capture_output=True, text=True, timeout=60,
                           user=user, cwd=str(self.work), stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip().split(";")[0]

    def events(self, job: str, uid: int):
        return EventReader(self.store, system_uids=(0,)).read_job(job, expected_uid=uid)

    def out(self, job: str) -> str:
        p = self.work / f"out.{job}"
        return p.read_text() if p.exists() else "(no output)"

    def state(self, job: str) -> str:
        r = self.cluster.run(["scontrol", "-o", "show", "job", job])
        return next((w.split("=", 1)[1] for w in r.stdout.split() if w.startswith("JobState=")), "?")

    # slurmctld stop/start, as tests/safety_lab.py does (by the pid in the cluster's state file)
    def stop_slurmctld(self) -> None:
        pid = statefile.read(self.cluster.paths)["daemons"]["slurmctld"]["pid"]
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or
                 Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", timeout=30, what="slurmctld stopped")

    def start_slurmctld(self) -> None:
        state = statefile.read(self.cluster.paths)
        env = self.cluster.full_env()
        proc = d.start_slurmctld(self.cluster.paths, env, bin_dir=self.cluster.bin_dir)
        procs = dict(state["daemons"])
        procs["slurmctld"] = proc
        statefile.write(self.cluster.paths, self.cluster.root, statefile.settings_from(state), procs, "up")
        d.wait_ctld_ready(env, 30, bin_dir=self.cluster.bin_dir)


@pytest.fixture(scope="module")
def site():
    root = make_root("shockwave-jobside-")
    s = Site(root)
    s.cluster = LocalCluster(root=root / "cluster", nodes=2, gpus_per_node=4, extra_conf=s.conf)
    try:
        try:
            s.cluster.ensure_installed()
            s.cluster.up(timeout=60)
        except SlurmUnavailable as exc:
            pytest.skip(str(exc))
        yield s
    finally:
        s.cluster.down()
        shutil.rmtree(root, ignore_errors=True)


def _kick(site: Site, job: str) -> None:
    """Skip the requeue start delay of a pending job (a no-op for a running one)."""
    if site.state(job) == "PENDING":
        site.cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now"])


def test_requeue_survives_slurmctld_down_during_the_checkpoint(site):
    job = site.sbatch(site.script(12, 1.0, "SLOW_SAVE=6 SHOCKWAVE_REQUEUE_RETRY_S=600"))
    wait_for(lambda: any(e.kind == "epoch_end" and e.epoch >= 1 for e in site.events(job, 0).events),
             timeout=90, interval=0.3, what="two epochs of the first run")
    r = site.cluster.run(["scancel", "--batch", "--signal=USR1", job])   # the preemption signal
    assert r.returncode == 0, r.stderr
    wait_for(lambda: any(e.kind == "signal" for e in site.events(job, 0).events), timeout=30, interval=0.1,
             what="the signal to reach the wrapper")
    site.stop_slurmctld()                          # down while the job checkpoints (6 s) and asks for its requeue
    try:
        wait_for(lambda: "retry" in site.out(job), timeout=120, interval=0.5,
                 what=f"the wrapper retrying scontrol requeue\n{site.out(job)}\n{site.events(job, 0).events}")
        time.sleep(5)
    finally:
        site.start_slurmctld()
    wait_for(lambda: any(e.kind == "start" and e.restart == 1 for e in site.events(job, 0).events)
             or (_kick(site, job) and False), timeout=180, interval=2, what="the requeued run to start")
    wait_for(lambda: summarize(site.events(job, 0).events).finished, timeout=120, interval=1,
             what=f"job {job} to finish\n{site.out(job)}")
    evs = site.events(job, 0).events
    epochs = [e.epoch for e in evs if e.kind == "epoch_end"]
    assert epochs == list(range(12)), (epochs, site.out(job))      # none lost, none repeated
    exits = [e for e in evs if e.kind == "exit"]
    assert exits[0].restart == 0 and exits[0].reason.endswith("; requeued") and exits[0].exit_code == 0
    assert exits[-1].restart == 1 and exits[-1].exit_code == 0
    out = site.out(job)
    first_done = len([e for e in evs if e.kind == "epoch_end" and e.restart == 0])
    assert out.index("resume 0 restart") < out.index("scontrol requeue failed") < out.index(
        f"resume {first_done} restart 1"), out                       # resumed where the checkpoint was
    assert "seen [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]" in out
    assert "could not be requeued" not in out


def test_requeue_that_never_succeeds_fails_the_job_instead_of_completing_it(site):
    """--no-requeue: `scontrol requeue` is refused for good; the wrapper exits 1 with one clear line and the
    exit event says "ended early" (Slurm records FAILED, not COMPLETED with work left)."""
    job = site.sbatch(site.script(12, 1.0, "SHOCKWAVE_REQUEUE_RETRY_S=30"), "--no-requeue")
    wait_for(lambda: any(e.kind == "epoch_end" for e in site.events(job, 0).events), timeout=90,
             interval=0.3, what="an epoch")
    assert site.cluster.run(["scancel", "--batch", "--signal=USR1", job]).returncode == 0
    wait_for(lambda: any(e.kind == "exit" for e in site.events(job, 0).events), timeout=60, what="exit")
    p = summarize(site.events(job, 0).events)
    assert p.ended_early and p.exit_code == 1 and p.exit_reason.startswith(f"ended early: {p.epochs_done}/12")
    assert "could not be requeued" in site.out(job)
    wait_for(lambda: site.state(job) == "FAILED", timeout=30, what="FAILED in Slurm")


def test_no_user_can_claim_a_path_of_another_users_job(site):
    a, b = ensure_user(USER_A), ensure_user(USER_B)
    last = int(site.sbatch(site.script(1, 0.1)))
    nxt = str(last + 1)
    # user A tries every path B's next job could need
    claims = [site.store / nxt, site.store / "users" / str(b.pw_uid), site.store / "users" / str(b.pw_uid) / nxt,
              site.store / "users" / str(a.pw_uid)]
    for path in claims:
        r = subprocess.run([sys.executable, "-c", f"import os; os.makedirs({str(path)!r})"], user=USER_A,
                           capture_output=True, text=True, timeout=30, cwd="/")
        assert r.returncode != 0 and "Permission denied" in r.stderr, (path, r.stderr)
    job_b = site.sbatch(site.script(2, 0.1), user=USER_B)
    job_a = site.sbatch(site.script(2, 0.1), user=USER_A)
    for job, pw in ((job_b, b), (job_a, a)):
        wait_for(lambda: summarize(site.events(job, pw.pw_uid).events).finished, timeout=90, interval=0.5,
                 what=f"job {job} of {pw.pw_name}\n{site.out(job)}")
        udir = site.store / "users" / str(pw.pw_uid)
        assert udir.stat().st_uid == pw.pw_uid and (udir.stat().st_mode & 0o777) == 0o755
    # the controller reads each job's file with Slurm's uid for the job: all accepted, nothing rejected
    reader = EventReader(site.store, system_uids=(0,))
    got = reader.poll({job_b: b.pw_uid, job_a: a.pw_uid})
    assert [e.epoch for e in got[job_b] if e.kind == "epoch_end"] == [0, 1]
    assert [e.epoch for e in got[job_a] if e.kind == "epoch_end"] == [0, 1]
    assert not reader.rejected, reader.rejected
    # A cannot write into B's directory either, nor make B's job read A's file
    r = subprocess.run([sys.executable, "-c", f"open({str(site.store / 'users' / str(b.pw_uid) / 'x')!r}, 'w')"],
                       user=USER_A, capture_output=True, text=True, timeout=30, cwd="/")
    assert r.returncode != 0 and "Permission denied" in r.stderr
    assert [e for e in reader.read_job(job_b, expected_uid=a.pw_uid).events if e.origin == "job"] == []
