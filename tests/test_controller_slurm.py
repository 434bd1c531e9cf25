"""The controller on a real local Slurm cluster: holds, releases and (authoritative) requeues exactly as
the plan says; jobs outside the managed set are never touched; kill -9 mid-round and a restart leave
every job in the planned state, none held forever, none requeued twice."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from solver.types import Policy, RoundDecision
from slurm_shockwave.controller.config import config_from_dict, load_config
from slurm_shockwave.controller.daemon import Controller
from slurm_shockwave.journal.store import StateStore
from shockwave_lab.localcluster.chroot import host_version
from tests.slurm_fixtures import cluster_up, make_root, version_test_versions, wait_for
from tests.test_service_signals import config_text

pytestmark = pytest.mark.slurm

LOOP_SCRIPT = """#!/bin/sh
trap 'echo checkpoint-signal' USR1
i=0
while [ $i -lt {seconds} ]; do sleep 1; i=$((i+1)); done
"""


@pytest.fixture(scope="module")
def cluster():
    yield from cluster_up("shockwave-ctl-", nodes=1, gpus_per_node=2)


def submit(c, root: Path, name, seconds=600, gpus=1, comment="shockwave epochs=10 bs=32 epoch_s=30", hold=False,
           requeue=True):
    script = root / f"{name}.sh"
    script.write_text(LOOP_SCRIPT.format(seconds=seconds))
    args = [f"--job-name={name}", f"--gres=gpu:{gpus}", "--requeue" if requeue else "--no-requeue",
            f"--output={root}/{name}-%j.out",
            f"--chdir={root}", "-p", c.partition]
    if comment:
        args.append(f"--comment={comment}")
    if hold:
        args.append("--hold")
    return c.cli.sbatch(str(script), args)


def config(c, root: Path, mode: str, **extra):
    ctl = {"round_seconds": 1, "mode": mode, "partition": c.partition, "state_dir": str(root / "state"),
           "event_store": str(root / "events"), "grace_seconds": 1, "rounds_per_restart": 0, **extra}
    cfg = config_from_dict({"controller": ctl, "policy": {"name": "fifo"}}, "test")
    cfg.slurm.env = dict(c.env)
    return cfg


class Scripted(Policy):
    """Runs exactly the jobs the test says."""
    name = "scripted"

    def __init__(self):
        self.plan = set()

    def decide(self, view):
        return RoundDecision(run=tuple(j.job_id for j in view.jobs if j.job_id in self.plan))


def jobs_by_id(c, ids):
    return {j.job_id: j for j in c.cli.squeue_jobs() if j.job_id in ids}


def cancel(c, ids):
    c.cli.cancel(ids)
    wait_for(lambda: not any(j.state in ("RUNNING", "PENDING") for j in jobs_by_id(c, ids).values()),
             timeout=30, what="jobs cancelled")


def test_authoritative_plan_is_enacted_and_unmanaged_jobs_are_untouched(cluster, tmp_path_factory):
    root = make_root("shockwave-ctl-a-")
    a, b = submit(cluster, root, "a"), submit(cluster, root, "b")
    wait_for(lambda: all(j.state == "RUNNING" for j in jobs_by_id(cluster, {a, b}).values()), what="a, b running")
    c_, d = submit(cluster, root, "c"), submit(cluster, root, "d")
    other = submit(cluster, root, "other", comment="not-managed")            # waits: no GPU free
    ids = {a, b, c_, d, other}
    ctl = Controller(config(cluster, root, "authoritative"))
    pol = Scripted()
    ctl.loop.policy = pol
    try:
        # round 0: a and c planned; b loses its round (signalled), d is deferred (held, SiteFactor 0)
        pol.plan = {a, c_}
        ctl.run(max_rounds=1)
        js = jobs_by_id(cluster, ids)
        assert js[d].held and js[d].state_reason == "JobHeldAdmin"
        assert not js[c_].held and js[a].state == "RUNNING" and js[b].state == "RUNNING"
        # next rounds: after the grace period b is requeued held; c gets its GPU
        wait_for(lambda: ctl.run(max_rounds=1) is not None and jobs_by_id(cluster, {c_})[c_].state == "RUNNING",
                 timeout=40, interval=0.1, what="c running after b's requeue")
        js = jobs_by_id(cluster, ids)
        assert js[b].state == "PENDING" and js[b].held and js[b].state_reason == "JobHeldAdmin"
        assert js[b].restart_count == 1
        assert js[d].held
        # idempotent: once Slurm is in the planned state (b, now pending, gets SiteFactor 0 one round
        # after its requeue), another round issues nothing
        ctl.run(max_rounds=1)
        before = len(ctl.state.actions())
        ctl.run(max_rounds=1)
        assert len(ctl.state.actions()) == before
        # the plan changes: b planned again (released, starts at once), c loses its round
        pol.plan = {a, b}
        wait_for(lambda: ctl.run(max_rounds=1) is not None and jobs_by_id(cluster, {b})[b].state == "RUNNING",
                 timeout=40, interval=0.1, what="b running again")
        js = jobs_by_id(cluster, ids)
        assert js[c_].held and js[c_].restart_count == 1
        # every requeue happened once per restart count, and never to the unmanaged job
        acts = ctl.state.actions(status="done")
        requeues = [(r["job_id"], r["restart_count"]) for r in acts if r["verb"] == "requeue_hold"]
        assert len(requeues) == len(set(requeues)) == 2
        assert all(r["job_id"] != str(other) for r in ctl.state.actions())
        assert jobs_by_id(cluster, {other})[other].state == "PENDING"
        assert not jobs_by_id(cluster, {other})[other].held
    finally:
        ctl.close()
        cancel(cluster, list(ids))


@pytest.fixture(scope="module", params=[v for v in version_test_versions() if v != (host_version() or "22.05")],
                ids=lambda v: f"slurm{v}")
def other_version(request):
    """A 1-node, 2-GPU cluster of another Slurm version (a Debian root) writing under a lab directory bound rw."""
    lab = make_root("shockwave-ctl-v-lab-")
    gen = cluster_up("shockwave-ctl-v-", version=request.param, nodes=1, gpus_per_node=2, rw_binds=[lab])
    try:
        yield next(gen), lab
    finally:
        gen.close()                                   # stopped by pid, its mounts unmounted


def test_a_job_submitted_with_no_requeue_runs_on_whatever_the_policy_decides(cluster):
    """--no-requeue: no checkpoint and requeue can stop it and bring it back, so the round keeps it running (rule
    "pinned", solver/pinned.py) while the policy drops it: never signalled, never requeued; the job that may be
    preempted beside it is, and the waiting job gets that GPU only."""
    no_requeue_job_runs_on(cluster, make_root("shockwave-ctl-p-"))


def test_no_requeue_on_every_other_slurm_version(other_version):
    """The same on 24.11 and 26.05 (squeue's `requeue` read by each version's shape)."""
    cluster, lab = other_version
    root = Path(tempfile.mkdtemp(prefix="p-", dir=lab))
    os.chmod(root, 0o755)                           # a Debian root's cluster sees only the directory bound into it
    no_requeue_job_runs_on(cluster, root)


def no_requeue_job_runs_on(cluster, root: Path) -> None:
    a, b = submit(cluster, root, "a", requeue=False), submit(cluster, root, "b")
    wait_for(lambda: all(j.state == "RUNNING" for j in jobs_by_id(cluster, {a, b}).values()), what="a, b running")
    c_ = submit(cluster, root, "c")
    ctl = Controller(config(cluster, root, "authoritative"))
    pol = Scripted()
    ctl.loop.policy = pol
    try:
        pol.plan = {c_}                                         # the policy wants both running jobs off
        wait_for(lambda: ctl.run(max_rounds=1) is not None and jobs_by_id(cluster, {c_})[c_].state == "RUNNING",
                 timeout=40, interval=0.1, what="c running after b's requeue")
        for _ in range(3):
            ctl.run(max_rounds=1)
        js = jobs_by_id(cluster, {a, b, c_})
        assert js[a].state == "RUNNING" and js[a].restart_count == 0 and not js[a].held
        assert js[b].state == "PENDING" and js[b].held and js[b].restart_count == 1
        assert "checkpoint-signal" not in (root / f"a-{a}.out").read_text()
        acted = {(r["verb"], r["job_id"]) for r in ctl.state.actions()}
        assert ("signal", str(a)) not in acted and ("requeue_hold", str(a)) not in acted
        assert ("requeue_hold", str(b)) in acted
        assert ctl.loop.decided_by()["all"].get("pinned", 0) > 0
    finally:
        ctl.close()
        cancel(cluster, [a, b, c_])


def test_a_site_that_leaves_no_requeue_jobs_to_slurm(cluster):
    """`controller.no_requeue = "leave"`: a --no-requeue job, running or pending, is quarantined with its reason
    (not planned, never held, signalled or requeued: Slurm schedules it), while the policy drops every job; the
    requeueable job beside it is preempted as before.  Switched on by a reload, it releases the pending job the
    controller had held under "schedule"."""
    root = make_root("shockwave-ctl-l-")
    a, b = submit(cluster, root, "a", requeue=False), submit(cluster, root, "b")
    wait_for(lambda: all(j.state == "RUNNING" for j in jobs_by_id(cluster, {a, b}).values()), what="a, b running")
    c_ = submit(cluster, root, "c", requeue=False)
    plain = submit(cluster, root, "plain", requeue=False, comment=None, hold=True)  # not marked: not ours at all
    path = root / "config.toml"

    def write(no_requeue):                                      # metrics off (port 0)
        path.write_text(config_text(cluster, root, 0, mode="authoritative", grace_seconds=1, rounds_per_restart=0,
                                    no_requeue=no_requeue))

    write("schedule")
    ctl = Controller(load_config(path))
    ctl.loop.policy = Scripted()                                # plans nothing
    try:
        wait_for(lambda: ctl.run(max_rounds=1) is not None and jobs_by_id(cluster, {c_})[c_].held,
                 timeout=40, interval=0.1, what="c held (schedule: a deferred job like any other)")
        assert not ctl.backend.quarantined
        write("leave")
        ctl.reload()
        wait_for(lambda: ctl.run(max_rounds=1) is not None and jobs_by_id(cluster, {b})[b].state == "PENDING",
                 timeout=40, interval=0.1, what="b requeued held")
        wait_for(lambda: jobs_by_id(cluster, {c_})[c_].state == "RUNNING", timeout=30, what="c released, Slurm starts it")
        ctl.run(max_rounds=1)
        js = jobs_by_id(cluster, {a, c_})
        assert all(j.state == "RUNNING" and not j.held and j.restart_count == 0 for j in js.values())
        reasons = ctl.backend.quarantined
        assert set(reasons) == {a, c_}, reasons                    # not `plain`: unmanaged, not quarantined
        for j in (a, c_):
            assert reasons[j].startswith("submitted with --no-requeue: this site leaves such jobs to Slurm")
            row = ctl.state.db.execute("SELECT state, view FROM jobs WHERE job_id=?", (str(j),)).fetchone()
            assert row["state"] == "QUARANTINED" and json.loads(row["view"])["quarantined"] == reasons[j]
        verbs = {}
        for r in reversed(ctl.state.actions()):                    # oldest first
            verbs.setdefault(str(r["job_id"]), []).append(r["verb"])
        assert str(a) not in verbs and str(plain) not in verbs and "requeue_hold" in verbs[str(b)], verbs
        assert verbs[str(c_)] == ["hold", "release"], verbs           # held under "schedule", released by "leave"
    finally:
        ctl.close()
        cancel(cluster, [a, b, c_, plain])


def test_advisory_holds_deferred_and_never_preempts(cluster):
    root = make_root("shockwave-ctl-b-")
    a, b = submit(cluster, root, "a"), submit(cluster, root, "b")
    wait_for(lambda: all(j.state == "RUNNING" for j in jobs_by_id(cluster, {a, b}).values()), what="running")
    c_ = submit(cluster, root, "c")
    user_held = submit(cluster, root, "uh", hold=True)                      # a user's own hold stays
    ctl = Controller(config(cluster, root, "advisory"))
    pol = Scripted()
    ctl.loop.policy = pol
    try:
        pol.plan = {a, user_held}
        for _ in range(3):
            ctl.run(max_rounds=1)
        js = jobs_by_id(cluster, {a, b, c_, user_held})
        assert js[b].state == "RUNNING" and js[b].restart_count == 0          # advisory: never preempted
        assert js[c_].held and js[c_].state_reason == "JobHeldAdmin"
        assert js[user_held].held and js[user_held].state_reason == "JobHeldUser"
        pol.plan = {a, c_}                      # b is not planned but, advisory, keeps running
        ctl.run(max_rounds=1)
        assert not jobs_by_id(cluster, {c_})[c_].held                         # released when planned
        assert jobs_by_id(cluster, {b})[b].state == "RUNNING"
    finally:
        ctl.close()
        cancel(cluster, [a, b, c_, user_held])


SELF_REQUEUE_SCRIPT = """#!/bin/sh
trap 'echo checkpoint-signal; sleep {checkpoint_s}; scontrol requeue $SLURM_JOB_ID; exit 0' USR1
i=0
while [ $i -lt 600 ]; do sleep 1; i=$((i+1)); done
"""


def test_a_signalled_job_planned_again_stays_held_until_its_own_requeue(cluster):
    """The kill -9 test's one failure (22.05): a job signalled by one round and planned again by the next while it
    still checkpointed was released while it ran; its own `scontrol requeue` came in the same second and Slurm killed
    the restart (the job ended FAILED with its work left).  Now it stays held until it is back in the queue, is
    released there (the restart gap) and runs again."""
    root = make_root("shockwave-ctl-r-")
    script = root / "r.sh"
    script.write_text(SELF_REQUEUE_SCRIPT.format(checkpoint_s=4))
    r = cluster.cli.sbatch(str(script), ["--job-name=r", "--gres=gpu:1", "--requeue", f"--output={root}/r-%j.out",
                                         f"--chdir={root}", "-p", cluster.partition,
                                         "--comment=shockwave epochs=10 bs=32 epoch_s=30"])
    wait_for(lambda: jobs_by_id(cluster, {r})[r].state == "RUNNING", what="r running")
    time.sleep(2)                                               # past min_run (one round): it may be preempted
    ctl = Controller(config(cluster, root, "authoritative", grace_seconds=30))
    pol = Scripted()
    ctl.loop.policy = pol
    try:
        ctl.run(max_rounds=1)                                   # loses its round: held, then signalled
        verbs = [a["verb"] for a in ctl.state.actions() if a["job_id"] == str(r)]
        assert "signal" in verbs and "release" not in verbs
        pol.plan = {r}
        ctl.run(max_rounds=1)                                   # planned again, still checkpointing (4 s)
        js = jobs_by_id(cluster, {r})
        assert js[r].state == "RUNNING" and js[r].restart_count == 0
        assert "release" not in [a["verb"] for a in ctl.state.actions() if a["job_id"] == str(r)]
        wait_for(lambda: ctl.run(max_rounds=1) is not None and jobs_by_id(cluster, {r})[r].state == "RUNNING"
                 and jobs_by_id(cluster, {r})[r].restart_count == 1, timeout=60, interval=0.2,
                 what="r requeued by itself, released, running again")
        assert "release" in [a["verb"] for a in ctl.state.actions() if a["job_id"] == str(r)]
    finally:
        ctl.close()
        cancel(cluster, [r])


def rounds_recorded(db) -> int:
    """Rounds the controller has recorded so far; 0 while the file or its tables are still being created (the
    controller creates the file first and its schema right after: a reader in between sees no tables)."""
    try:
        store = StateStore(db, readonly=True)
    except (FileNotFoundError, PermissionError, sqlite3.Error):
        return 0
    try:
        return store.next_round()
    except sqlite3.Error:
        return 0
    finally:
        store.close()


def test_kill_9_mid_round_then_restart(cluster):
    """A real controller process (Shockwave policy, authoritative) is killed -9 and restarted."""
    root = make_root("shockwave-ctl-k-")
    cfg_path = root / "config.toml"
    cfg_path.write_text(
        "[controller]\nround_seconds = 2\nmode = \"authoritative\"\ngrace_seconds = 1\nrounds_per_restart = 0\n"
        f"partition = \"{cluster.partition}\"\nstate_dir = \"{root}/state\"\nevent_store = \"{root}/events\"\n"
        "[policy]\nname = \"shockwave\"\n[policy.shockwave]\nfuture_rounds = 5\nreopt_rounds = 2\n"
        f"[slurm.env]\nSLURM_CONF = \"{cluster.env['SLURM_CONF']}\"\n")
    ids = [submit(cluster, root, f"k{i}", seconds=12, comment=f"shockwave epochs={4 + i} bs=32 epoch_s=3")
           for i in range(4)]
    cmd = [sys.executable, "-m", "slurm_shockwave", "controller", "run", "--config", str(cfg_path)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    log = open(root / "controller.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        db = root / "state" / "state.sqlite"
        wait_for(lambda: rounds_recorded(db) >= 2, timeout=30,
                 what="two controller rounds")
        time.sleep(0.9)                            # inside a 2 s round
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(lambda: not jobs_by_id(cluster, set(ids)) or all(
            j.state not in ("RUNNING", "PENDING") for j in jobs_by_id(cluster, set(ids)).values()),
            timeout=150, interval=1, what="all jobs completed (none held forever)")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0                  # SIGTERM: finishes the round, exits cleanly
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
    final = jobs_by_id(cluster, set(ids))
    assert all(j.state == "COMPLETED" for j in final.values()), {j.job_id: j.state for j in final.values()}
    store = StateStore(root / "state" / "state.sqlite", readonly=True)
    requeues = [(r["job_id"], r["restart_count"]) for r in store.actions(verb="requeue_hold")
                if r["status"] in ("intent", "done")]
    assert len(requeues) == len(set(requeues)), "a job was requeued twice at the same restart count"
    assert store.next_round() >= 5, "the controller ran rounds before and after the kill"
    for j in final.values():
        assert j.restart_count <= sum(1 for jid, _ in requeues if jid == str(j.job_id))
    store.close()
