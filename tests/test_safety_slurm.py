"""Issue 10 items 1, 2 and the signalled map, reproduced on a real local Slurm cluster.

* a user's comment (`--comment="shockwave epochs=²"`) cannot crash the controller: the job is quarantined
  (left to Slurm untouched, reason in the state) and the other managed jobs are still scheduled;
* a crash (or a failed `hold`) between `requeuehold` and `hold` does not leave the job held forever: the
  AdminComment mark says the hold is ours, the next controller releases it when planned;
* `controller uninstall` releases every marked job from Slurm's records (state directory lost), resets
  SiteFactor on running jobs too, clears the marks, refuses while a controller holds the lock;
* the `signalled` map is saved right after the signal, before the round's next Slurm call;
* a running job is never pinned (a resize in place: Slurm then refuses its updates until it is requeued), and one
  resized in place is still requeued when it loses its round.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from slurm_shockwave.controller.config import config_from_dict
from slurm_shockwave.controller.daemon import Controller
from slurm_shockwave.journal.store import StateStore
from slurm_shockwave.slurm import SlurmCLI
from slurm_shockwave.slurm.enact import PIN_VERB, Action, Enactor
from slurm_shockwave.slurm.uninstall import ControllerRunning, uninstall
from solver.types import Policy, RoundDecision
from tests.slurm_fixtures import cluster_up, make_root, wait_for

pytestmark = pytest.mark.slurm

LOOP = "#!/bin/sh\ntrap 'echo checkpoint-signal' USR1\ni=0\nwhile [ $i -lt 600 ]; do sleep 1; i=$((i+1)); done\n"


@pytest.fixture(scope="module")
def cluster():
    yield from cluster_up("shockwave-safety-", nodes=1, gpus_per_node=2)


class Scripted(Policy):
    name = "scripted"

    def __init__(self, plan=()):
        self.plan = set(plan)
        self.seen: list = []

    def decide(self, view):
        self.seen.append({j.job_id for j in view.jobs})
        return RoundDecision(run=tuple(j.job_id for j in view.jobs if j.job_id in self.plan))


def submit(c, root: Path, name: str, comment: str | None = "shockwave epochs=10 bs=32 epoch_s=30", gpus=1):
    script = root / "loop.sh"
    script.write_text(LOOP)
    args = [f"--job-name={name}", f"--gres=gpu:{gpus}", "--requeue", f"--output={root}/{name}-%j.out",
            f"--chdir={root}", "-p", c.partition]
    if comment is not None:
        args.append(f"--comment={comment}")
    return c.cli.sbatch(str(script), args)


def config(c, root: Path, mode="authoritative", **extra):
    ctl = {"round_seconds": 1, "mode": mode, "partition": c.partition, "state_dir": str(root / "state"),
           "event_store": str(root / "events"), "grace_seconds": 1, "rounds_per_restart": 0, **extra}
    (root / "events").mkdir(exist_ok=True)
    cfg = config_from_dict({"controller": ctl, "policy": {"name": "fifo"}}, "test")
    cfg.slurm.env = dict(c.env)
    return cfg


def raw_jobs(c) -> dict:
    """{job_id: squeue --json record} (admin_comment read from Slurm's own JSON)."""
    return {r["job_id"]: r for r in json.loads(c.cli.run(["squeue", "--json"]).stdout)["jobs"]}


def state_of(c, ids):
    raw = raw_jobs(c)
    return {j: (raw[j]["job_state"], raw[j]["state_reason"], raw[j]["priority"], raw[j].get("admin_comment", ""))
            for j in ids if j in raw}


def cancel(c, ids):
    c.cli.cancel(list(ids))
    wait_for(lambda: not any(s[0] in ("RUNNING", "PENDING") for s in state_of(c, ids).values()),
             timeout=30, what="jobs cancelled")


@contextlib.contextmanager
def planned_again(c, cfg, a):
    """A new controller (a restart) whose policy plans job `a`: it must release it and see it running; then the
    controller is closed and the job cancelled."""
    ctl = Controller(cfg)
    ctl.loop.policy = Scripted(plan={a})
    try:
        wait_for(lambda: ctl.run(max_rounds=1) is not None and state_of(c, {a})[a][0] == "RUNNING",
                 timeout=40, interval=0.3, what="a released and running again")
        yield ctl
    finally:
        ctl.close()
        cancel(c, {a})


class FailingHold(SlurmCLI):
    """`scontrol hold` fails right after a `requeuehold` (what a kill -9 between the two leaves behind)."""

    def hold(self, job_ids):
        raise OSError("simulated crash between requeuehold and hold")


def test_crash_between_requeuehold_and_hold_does_not_hold_forever(cluster):
    """Reproduction of item 2: after `requeuehold` 22.05 shows JobHeldUser, which the old reconcile did not
    count as its own hold; the next controller planned the job every round and never released it."""
    root = make_root("shockwave-safety-h-")
    a = submit(cluster, root, "a")
    wait_for(lambda: state_of(cluster, {a})[a][0] == "RUNNING", what="a running")
    cfg = config(cluster, root)
    ctl = Controller(cfg, cli=FailingHold(env=cfg.slurm.env, timeout=30))
    ctl.loop.policy = Scripted(plan=())                     # a loses its round: signal, then requeuehold
    try:
        wait_for(lambda: ctl.run(max_rounds=1) is not None and state_of(cluster, {a})[a][0] == "PENDING",
                 timeout=30, interval=0.3, what="a requeued")
        wait_for(lambda: state_of(cluster, {a})[a][1] == "JobHeldUser", timeout=10, what="the user hold")
        marked_before = state_of(cluster, {a})[a][3]
    finally:
        ctl.close()
    # a new controller (a restart) with the job planned again: it must be released and run
    with planned_again(cluster, cfg, a) as ctl:
        assert marked_before.startswith("shockwave:held")                      # marked before acting
        assert state_of(cluster, {a})[a][3] == ""                              # mark cleared
        assert not any(r["verb"] == "requeue_hold" and r["restart_count"] == 1 for r in ctl.state.actions())


def test_crash_between_requeuehold_and_hold_deferred_job_stays_ours(cluster):
    """Same crash, the job still deferred: the user hold is turned into an admin hold (its owner cannot
    release it behind the plan) and it stays marked."""
    root = make_root("shockwave-safety-d-")
    a = submit(cluster, root, "a")
    wait_for(lambda: state_of(cluster, {a})[a][0] == "RUNNING", what="a running")
    cfg = config(cluster, root)
    ctl = Controller(cfg, cli=FailingHold(env=cfg.slurm.env, timeout=30))
    ctl.loop.policy = Scripted(plan=())
    try:
        wait_for(lambda: ctl.run(max_rounds=1) is not None and state_of(cluster, {a})[a][1] == "JobHeldUser",
                 timeout=30, interval=0.3, what="a requeued with a user hold")
    finally:
        ctl.close()
    ctl = Controller(cfg)
    ctl.loop.policy = Scripted(plan=())
    try:
        ctl.run(max_rounds=2)
        st = state_of(cluster, {a})[a]
        assert st[0] == "PENDING" and st[1] == "JobHeldAdmin" and st[3].startswith("shockwave:held")
    finally:
        ctl.close()
        cancel(cluster, {a})


def test_uninstall_from_slurm_marks_and_lock(cluster):
    """Item 2 uninstall: the state directory is lost (journal gone); uninstall still releases every job the
    controller held (read from Slurm), resets SiteFactor on running jobs too, clears marks; refuses while
    a live controller holds the lock."""
    root = make_root("shockwave-safety-u-")
    run1, run2 = submit(cluster, root, "r1"), submit(cluster, root, "r2")
    wait_for(lambda: all(s[0] == "RUNNING" for s in state_of(cluster, {run1, run2}).values()), what="running")
    d1, d2 = submit(cluster, root, "d1"), submit(cluster, root, "d2")
    user = submit(cluster, root, "user-held")
    cluster.cli.hold([user])                          # an admin's own hold, not ours: stays
    cluster.cli.scontrol_update([run1], SiteFactor=777)
    ids = {run1, run2, d1, d2, user}
    cfg = config(cluster, root, mode="advisory")
    try:
        _uninstall_scenario(cluster, root, cfg, ids, run1, run2, d1, d2, user)
    finally:
        cancel(cluster, ids)


def _uninstall_scenario(cluster, root, cfg, ids, run1, run2, d1, d2, user):
    ctl = Controller(cfg)
    ctl.loop.policy = Scripted(plan={run1, run2})
    try:
        ctl.run(max_rounds=2)
        st = state_of(cluster, ids)
        assert st[d1][1] == "JobHeldAdmin" and st[d1][3].startswith("shockwave:held")
        with pytest.raises(ControllerRunning):
            uninstall(cfg)                                    # the lock is held by the live controller
        assert state_of(cluster, {d1})[d1][1] == "JobHeldAdmin"
    finally:
        ctl.close()
    shutil.rmtree(root / "state")                             # the journal is gone
    (root / "state").mkdir()
    done = uninstall(cfg)
    st = state_of(cluster, ids)
    assert sorted(done["released"]) == sorted([str(d1), str(d2)])
    assert st[d1][1] != "JobHeldAdmin" and st[d2][1] != "JobHeldAdmin" and st[d1][3] == st[d2][3] == ""
    assert st[user][1] == "JobHeldAdmin"                      # not ours: untouched
    assert str(run1) in done["site_factor_reset"] and str(run2) in done["site_factor_reset"]   # running too


def test_signalled_is_saved_right_after_the_signal(cluster):
    """Item 10: the signalled map was written only at round end; a crash right after the signal re-sent it."""
    root = make_root("shockwave-safety-s-")
    a, b = submit(cluster, root, "a"), submit(cluster, root, "b")
    wait_for(lambda: all(s[0] == "RUNNING" for s in state_of(cluster, {a, b}).values()), what="running")
    c_ = submit(cluster, root, "c")                   # pending: the round also holds it (a call after the signal)
    cfg = config(cluster, root, grace_seconds=600, min_run_seconds=0)
    db = Path(cfg.state_path)
    seen = []

    def runner(argv, **kw):
        import subprocess
        if seen and seen[-1][0] == "scancel" and db.exists():
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            row = con.execute("SELECT value FROM kv WHERE key='signalled'").fetchone()
            con.close()
            seen.append(("after-scancel", json.loads(row[0]) if row else {}))
        seen.append((os.path.basename(argv[0]), None))
        return subprocess.run(argv, **kw)

    ctl = Controller(cfg, cli=SlurmCLI(env=cfg.slurm.env, timeout=30, runner=runner))
    ctl.loop.policy = Scripted(plan={a, c_})
    try:
        ctl.run(max_rounds=1)
        snaps = [s for name, s in seen if name == "after-scancel"]
        assert snaps and str(b) in snaps[0], seen          # saved before the next Slurm call
    finally:
        ctl.close()
        cancel(cluster, {a, b, c_})


def test_a_live_lock_is_flock(tmp_path):
    """The uninstall refusal reads the same flock the controller takes (no Slurm needed)."""
    (tmp_path / "controller.lock").write_text("4242")
    fd = os.open(tmp_path / "controller.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    cfg = type("C", (), {"state_dir": str(tmp_path)})()
    try:
        with pytest.raises(ControllerRunning, match="pid 4242"):
            uninstall(cfg, cli=object())
    finally:
        os.close(fd)


def test_a_job_started_since_the_round_read_the_queue_is_not_pinned(cluster):
    """A running job's `NodeList=` update is a resize in place, after which Slurm (without slurmdbd) refuses every
    update of the job, each after 5 s of retries, until it is requeued.  A pin whose job Slurm started since the
    round read the queue is not sent: the pinned jobs are read again right before the call."""
    root = make_root("shockwave-safety-p-")
    a = submit(cluster, root, "a")
    wait_for(lambda: state_of(cluster, {a})[a][0] == "RUNNING", what="a running")
    state = StateStore(root / "state.db")
    try:
        res = Enactor(cluster.cli, state).execute(1, [Action(PIN_VERB, (a,), raw_jobs(cluster)[a]["nodes"])], {a: 0})
        assert [r for _a, r in res] == ["failed"] and "no longer pending" in state.actions(job_id=a)[0]["error"]
        assert cluster.run(["scontrol", "update", f"JobId={a}", "AdminComment=updatable"]).returncode == 0
    finally:
        state.close()
        cancel(cluster, {a})


def test_a_running_job_resized_in_place_is_requeued_when_it_loses_its_round(cluster):
    """Such a job (resized here by hand, as a pin that met it started did) takes no update until it is requeued:
    the requeuehold's mark, sent first, failed in every round, and a job that ignores its checkpoint signal ran on
    (the framework test's never-polling job in CI, 2026-11-28).  It is requeued, then held and marked."""
    root = make_root("shockwave-safety-r-")
    a = submit(cluster, root, "a")
    wait_for(lambda: state_of(cluster, {a})[a][0] == "RUNNING", what="a running")
    node = raw_jobs(cluster)[a]["nodes"]
    assert cluster.run(["scontrol", "update", f"JobId={a}", f"NodeList={node}"]).returncode == 0
    refused = cluster.run(["scontrol", "update", f"JobId={a}", "AdminComment=x"])
    assert refused.returncode != 0 and "DB index" in refused.stderr, refused.stderr   # what the test is about
    ctl = Controller(config(cluster, root))
    ctl.loop.policy = Scripted(plan=())                     # a loses its round: signal (ignored), then requeuehold
    try:
        wait_for(lambda: ctl.run(max_rounds=1) is not None and state_of(cluster, {a})[a][0] == "PENDING",
                 timeout=90, interval=0.3, what="a requeued")
        st = state_of(cluster, {a})[a]
        assert st[1] == "JobHeldAdmin" and st[3].startswith("shockwave:held"), st     # held and marked as ours
    finally:
        ctl.close()
        cancel(cluster, {a})


class DiesAfterRequeue(SlurmCLI):
    """The controller's process ends (kill -9: nothing after it runs, the journal row stays an intent) right after
    the `requeuehold` of a job whose mark Slurm refused, before the update that marks and holds it."""

    requeued = False

    def requeue(self, job_ids, hold=False):
        super().requeue(job_ids, hold=hold)
        self.requeued = True

    def scontrol_update(self, job_ids, **fields):
        if self.requeued:
            raise SystemExit("killed between requeuehold and the mark")
        super().scontrol_update(job_ids, **fields)


def test_killed_between_the_requeue_and_the_mark_of_a_resized_job_the_next_controller_releases_it(cluster):
    """The new point of 2306615: the job is left with requeuehold's user hold and no mark; the journal's intent
    makes the next controller adopt that hold and release the job when a round plans it."""
    root = make_root("shockwave-safety-k-")
    a = submit(cluster, root, "a")
    wait_for(lambda: state_of(cluster, {a})[a][0] == "RUNNING", what="a running")
    node = raw_jobs(cluster)[a]["nodes"]
    assert cluster.run(["scontrol", "update", f"JobId={a}", f"NodeList={node}"]).returncode == 0
    cfg = config(cluster, root)
    ctl = Controller(cfg, cli=DiesAfterRequeue(env=cfg.slurm.env, timeout=30))
    ctl.loop.policy = Scripted(plan=())
    try:
        with pytest.raises(SystemExit):
            for _ in range(60):
                ctl.run(max_rounds=1)
        wait_for(lambda: state_of(cluster, {a})[a][0] == "PENDING", timeout=30, what="a requeued")
        st = state_of(cluster, {a})[a]
        assert st[1] == "JobHeldUser" and not st[3].startswith("shockwave:"), st     # held, not marked as ours
        assert [r["status"] for r in ctl.state.actions(job_id=a, verb="requeue_hold")] == ["intent"]
    finally:
        ctl.close()
    with planned_again(cluster, cfg, a):                # released and running: the check is the entry
        pass


# last in the module: on the old code its job crashed every later round of the module's cluster
def test_hostile_hint_is_quarantined_not_fatal(cluster):
    """Reproduction of item 1: `"²".isdigit()` is true and int() raised out of the round."""
    root = make_root("shockwave-safety-q-")
    hostile = submit(cluster, root, "hostile", comment="shockwave epochs=²")
    newline = submit(cluster, root, "nl", comment="shockwave\nepochs=3 bs=32")      # the same marker
    ok = submit(cluster, root, "ok")
    ids = {hostile, newline, ok}
    pol = Scripted()
    ctl = Controller(config(cluster, root))
    ctl.loop.policy = pol
    try:
        pol.plan = {ok}                                          # the hostile job may take the other GPU
        assert ctl.run(max_rounds=3) == 3                        # no exception, three rounds
        assert all(hostile not in seen for seen in pol.seen)    # never planned
        assert all({ok, newline} <= seen for seen in pol.seen)  # a newline after the marker: managed
        wait_for(lambda: ctl.run(max_rounds=1) and state_of(cluster, {ok})[ok][0] == "RUNNING", timeout=30,
                 what="the valid job scheduled")
        st = state_of(cluster, ids)
        assert st[hostile][1] != "JobHeldAdmin" and st[hostile][3] == ""         # untouched by us
        assert st[newline][1] == "JobHeldAdmin" and st[newline][3].startswith("shockwave:held")  # managed
        assert all(a["job_id"] != str(hostile) for a in ctl.state.actions())    # no action ever
        row = ctl.state.db.execute("SELECT state, view FROM jobs WHERE job_id=?", (str(hostile),)).fetchone()
        assert row["state"] == "QUARANTINED" and "epochs" in json.loads(row["view"])["quarantined"]
        assert ctl.backend.quarantined[hostile].startswith("invalid hints: hint epochs=")
    finally:
        ctl.close()
        cancel(cluster, ids)
