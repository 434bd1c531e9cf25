"""One truth for the plan (issue 11 items 1, 3, 4, 5, 9; issue 10 item 9), on a real local Slurm cluster:
a preempted job keeps its first arrival; status and explain read the same round record; unmanaged
jobs are in the picture; an ended job starts an early round; every decision is checked before enactment; the
read-side tools work for a non-root user with the controller stopped."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from solver.policies import default_policy
from solver.policies.shockwave_edf import ShockwaveEDF
from solver.types import ClusterView, Policy, RoundDecision
from slurm_shockwave.cli.main import cli
from slurm_shockwave.controller.config import config_from_dict
from slurm_shockwave.controller.daemon import Controller
from slurm_shockwave.controller.metrics_server import ControllerMetrics
from slurm_shockwave.events.writer import EventWriter
from tests.slurm_fixtures import cluster_up, make_root, wait_for

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parent.parent

LOOP = "#!/bin/sh\ntrap 'echo checkpoint-signal' USR1\ni=0\nwhile [ $i -lt {seconds} ]; do sleep 1; i=$((i+1)); done\n"


@pytest.fixture(scope="module")
def cluster():
    yield from cluster_up("shockwave-plan-", nodes=1, gpus_per_node=4)


def submit(c, root: Path, name, seconds=600, gpus=1, comment="shockwave epochs=10 bs=32 epoch_s=30", extra=()):
    script = root / f"{name}.sh"
    script.write_text(LOOP.format(seconds=seconds))
    args = [f"--job-name={name}", f"--gres=gpu:{gpus}", f"--output={root}/{name}-%j.out", f"--chdir={root}",
            "-p", c.partition, *extra]
    if "--no-requeue" not in extra:
        args.append("--requeue")
    if comment:
        args.append(f"--comment={comment}")
    return c.cli.sbatch(str(script), args)


def config(c, root: Path, mode: str, policy="fifo", **extra):
    ctl = {"round_seconds": 1, "mode": mode, "partition": c.partition, "state_dir": str(root / "state"),
           "event_store": str(root / "events"), "grace_seconds": 1, "rounds_per_restart": 0, **extra}
    (root / "events").mkdir(exist_ok=True)
    cfg = config_from_dict({"controller": ctl, "policy": {"name": policy}}, "test")
    cfg.slurm.env = dict(c.env)
    return cfg


class Scripted(Policy):
    name = "scripted"

    def __init__(self, plan=()):
        self.plan = set(plan)

    def decide(self, view):
        return RoundDecision(run=tuple(j.job_id for j in view.jobs if j.job_id in self.plan))


def jobs_by_id(c, ids):
    return {j.job_id: j for j in c.cli.squeue_jobs() if j.job_id in set(ids)}


def cancel(c, ids):
    c.cli.cancel(list(ids))
    wait_for(lambda: not any(j.state in ("RUNNING", "PENDING") for j in jobs_by_id(c, ids).values()),
             timeout=30, what="jobs cancelled")


def status_json(state_dir, *args):
    r = CliRunner().invoke(cli, ["status", "--state-dir", str(state_dir), "--json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def explain_json(state_dir, jid):
    r = CliRunner().invoke(cli, ["explain", str(jid), "--state-dir", str(state_dir), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def recording(ctl):
    views = []
    orig = ctl.backend.observe

    def observe():
        v = orig()
        views.append(v)
        return v
    ctl.backend.observe = observe
    return views


# ---------------------------------------------------------------- item 1
def test_preempted_twice_keeps_first_arrival_rho_and_fair_share(cluster):
    root = make_root("shockwave-plan-1-")
    a, b = submit(cluster, root, "a"), submit(cluster, root, "b")
    ctl = Controller(config(cluster, root, "authoritative", min_run_seconds=0))
    pol = Scripted({a, b})
    ctl.loop.policy = pol
    views = recording(ctl)
    try:
        wait_for(lambda: ctl.run(max_rounds=1) is not None and all(
            j.state == "RUNNING" for j in jobs_by_id(cluster, {a, b}).values()), timeout=40, what="a, b running")
        submit0 = jobs_by_id(cluster, {a})[a].submit_time
        for k in (1, 2):
            pol.plan = {b}                       # a loses its round: signalled, then requeued held
            wait_for(lambda: ctl.run(max_rounds=1) is not None and jobs_by_id(cluster, {a})[a].restart_count == k
                     and jobs_by_id(cluster, {a})[a].state == "PENDING", timeout=60, interval=0.1,
                     what=f"a preempted ({k})")
            time.sleep(1.1)                      # Slurm's submit times have 1 s resolution
            pol.plan = {a, b}
            wait_for(lambda: ctl.run(max_rounds=1) is not None and jobs_by_id(cluster, {a})[a].state == "RUNNING",
                     timeout=60, interval=0.1, what=f"a running again ({k})")
        live = jobs_by_id(cluster, {a})[a]
        assert live.restart_count == 2
        assert live.submit_time > submit0, "Slurm moved the submit time on requeue (what the fix guards against)"
        arrivals = {v.job(a).arrival_time for v in views if any(j.job_id == a for j in v.jobs)}
        assert arrivals == {float(submit0)}
        # the same view content at the same clock gives the same rho-hat and fair-share target
        first, last = views[0], views[-1]
        outs = []
        for v in (first, last):
            jobs = tuple(dataclasses.replace(j, ran_last_round=False) for j in v.jobs)
            cv = ClusterView(now=first.now + 100, round_index=0, round_length=1.0, num_gpus=4, jobs=jobs)
            outs.append(ShockwaveEDF().decide(cv).plans[a])
        for key in ("rho_hat", "fair_finish_in_s"):                          # fair_finish_in_s: the fair-share target
            assert getattr(outs[0], key) is not None and getattr(outs[0], key) == getattr(outs[1], key), (key, outs)
        rec, _at = ctl.state.latest_round()
        assert rec.job_context(a).submit_time == float(submit0)
    finally:
        ctl.close()
        cancel(cluster, {a, b})


# ---------------------------------------------------------------- item 3 (+ issue 10 item 3 display, item 8 warning)
def test_status_and_explain_agree_with_the_decision(cluster):
    root = make_root("shockwave-plan-3-")
    ids = [submit(cluster, root, f"s{i}", comment="shockwave epochs=12 bs=32 epoch_s=20") for i in range(6)]
    cfg = config(cluster, root, "advisory", policy=default_policy().name)
    ctl = Controller(cfg)
    try:
        ctl.run(max_rounds=2)
        out = status_json(root / "state")
        rec, _at = ctl.state.latest_round()
        assert out["cluster"]["round"] == rec.round_index == 1
        rows = {int(r["job_id"]): r for r in out["jobs"]}
        assert set(rows) == set(ids)
        for jid in ids:
            ex = explain_json(root / "state", jid)
            plan = rec.plan(jid)
            # one prediction, the controller's: status == explain == what the policy decided on
            assert ex["predicted_remaining_s"] == rows[jid]["predicted_remaining_s"] == plan.predicted_remaining_s
            assert ex["plan"]["predicted_remaining_s"] == ex["predicted_remaining_s"]
            assert ex["reason"] == rows[jid]["reason"] == plan.reason
            assert ex["plan"]["rule"] == plan.rule and (plan.rule != "") == rows[jid]["planned_now"]
            # not a placeholder: 12 epochs of ~20 s (the hint) before the job has reported anything
            assert ex["predicted_remaining_s"] > 100
            assert rows[jid]["eta_source"] == "hint"
            if rows[jid]["planned_now"]:
                assert not rows[jid]["reason"].startswith("deferred")
            else:
                assert "planned this round" not in rows[jid]["reason"]
        assert sum(r["gpus"] for r in rows.values() if r["planned_now"]) <= 4
    finally:
        ctl.close()
        cancel(cluster, ids)


def test_released_reason_unmanaged_capacity_no_requeue_and_ended_early(cluster):
    root = make_root("shockwave-plan-4-")
    other = submit(cluster, root, "other", comment="", extra=("--time=30",))         # unmanaged, 1 GPU
    wait_for(lambda: jobs_by_id(cluster, {other})[other].state == "RUNNING", what="unmanaged job running")
    # a and b may not start on their own before the controller's first round (Slurm schedules at submit
    # time and 3 GPUs are free): a begin time keeps them pending; the release sets StartTime=now
    a = submit(cluster, root, "a", extra=("--begin=now+3600",))
    b = submit(cluster, root, "b", extra=("--no-requeue", "--begin=now+3600"))
    short = submit(cluster, root, "short", seconds=4, comment="shockwave epochs=12 bs=32")
    # unmanaged, pending for good: it needs all 4 GPUs while `other` holds one (with 3 it could start when `short`
    # ends, and a loaded machine's second round would find no GPU left for `a`)
    big = submit(cluster, root, "big", gpus=4, comment="", extra=("--time=30",))
    store = root / "events"
    store.mkdir(exist_ok=True)
    w = EventWriter.for_job(store, str(short))
    w.emit("start", batch_size=32, total_epochs=12, samples_per_epoch=320, gpus=1)
    for e in range(2):
        w.emit("epoch_end", epoch=e, batch_size=32, samples=320, duration_s=1.0)
    w.emit("exit", exit_code=0)
    ids = {other, a, b, short, big}
    ctl = Controller(config(cluster, root, "advisory"))
    pol = Scripted({short})
    ctl.loop.policy = pol
    try:
        ctl.run(max_rounds=1)                    # a, b deferred (held); short planned
        wait_for(lambda: jobs_by_id(cluster, {a})[a].held, what="a held")
        pol.plan = {short, a}
        ctl.run(max_rounds=1)                    # a released in this round
        out = status_json(root / "state")
        rows = {int(r["job_id"]): r for r in out["jobs"]}
        assert rows[a]["reason"].startswith("released this round"), rows[a]["reason"]
        assert rows[b]["reason"].startswith("deferred")
        assert any("--no-requeue" in w for w in rows[b]["warnings"])
        assert not any("--no-requeue" in w for w in rows[a]["warnings"])
        cl = out["cluster"]
        assert cl["gpus"] == 4 and cl["gpus_unmanaged"] == 1 and cl["gpus_managed_capacity"] == 3
        assert cl["unmanaged_pending"] == 1 and cl["unmanaged_pending_gpus"] == 4
        rec, _at = ctl.state.latest_round()
        unm = rec.context.unmanaged
        assert rec.view.num_gpus == 3 and unm.running[0].expected_end is not None
        assert [r.job_id for r in unm.pending] == [big]
        text = CliRunner().invoke(cli, ["status", "--state-dir", str(root / "state")]).output
        assert "1 unmanaged" in text and "/4 GPUs busy" in text
        # the short job exits 0 after 2 of 12 epochs: shown as ended early, not as a stale row
        wait_for(lambda: ctl.run(max_rounds=1) is not None and
                 any(r["job_id"] == str(short) and r.get("finished")
                     for r in status_json(root / "state", "--all")["jobs"]), timeout=60, what="short finished")
        ex = explain_json(root / "state", short)
        assert ex["reason"].startswith("ended early: 2/12 epochs, not requeued"), ex["reason"]
        assert ex["finished"] and ex["state"] == "COMPLETED"
        assert str(short) not in {r["job_id"] for r in status_json(root / "state")["jobs"]}
    finally:
        ctl.close()
        cancel(cluster, ids)


# ---------------------------------------------------------------- item 5
def test_freed_gpus_start_an_early_round(cluster):
    root = make_root("shockwave-plan-5-")
    first = submit(cluster, root, "first", seconds=12, gpus=4)
    nxt = submit(cluster, root, "next", gpus=4)
    ctl = Controller(config(cluster, root, "advisory"), metrics=ControllerMetrics())
    pol = Scripted({first})
    ctl.loop.policy = pol
    try:
        wait_for(lambda: ctl.run(max_rounds=1) is not None and jobs_by_id(cluster, {first})[first].state == "RUNNING",
                 timeout=30, interval=0.1, what="first running")
        # from now on 120 s rounds: the wait ends early only because `first` ends and frees its GPUs
        ctl.backend.round_length = 120.0
        started = time.monotonic()
        ctl.run(max_rounds=1)
        print(f"early round after {time.monotonic() - started:.1f} s of a 120 s round")
        assert ctl.backend.early_round, "the wait ended only at the round boundary"
        assert ctl.metrics.registry.get_sample_value("shockwave_early_rounds_total") == 1
        assert jobs_by_id(cluster, {first})[first].state == "COMPLETED"
        pol.plan = {nxt}
        ctl.backend.round_length = 1.0
        ctl.run(max_rounds=1)
        wait_for(lambda: jobs_by_id(cluster, {nxt})[nxt].state == "RUNNING", timeout=30, what="next running")
    finally:
        ctl.close()
        cancel(cluster, {first, nxt})


# ---------------------------------------------------------------- item 9
class OverCapacity(Policy):
    name = "overcapacity"

    def decide(self, view):
        return RoundDecision(run=tuple(j.job_id for j in view.jobs) + (999999,))


def test_a_bad_decision_is_never_enacted(cluster):
    root = make_root("shockwave-plan-9-")
    ids = [submit(cluster, root, f"o{i}", gpus=2, extra=("--hold",)) for i in range(4)]   # 8 GPUs asked, 4 exist
    ctl = Controller(config(cluster, root, "advisory"))
    ctl.loop.policy = OverCapacity()
    try:
        ctl.run(max_rounds=1)
        rec, _at = ctl.state.latest_round()
        assert rec.fallback is True and rec.decision.path == "fallback"
        run = [int(j) for j in rec.run]
        assert 0 < len(run) and 2 * len(run) <= 4 and 999999 not in run
        deferred = [j for j in ids if j not in run]
        assert all(ctl.state.actions(job_id=j, verb="release") == [] for j in deferred)
    finally:
        ctl.close()
        cancel(cluster, ids)


# ---------------------------------------------------------------- issue 10 item 9
def test_status_as_non_root_with_the_controller_stopped(cluster):
    root = make_root("shockwave-plan-ro-")
    a = submit(cluster, root, "ro")
    ctl = Controller(config(cluster, root, "advisory"))
    try:
        ctl.run(max_rounds=2)
    finally:
        ctl.close()
        cancel(cluster, {a})
    state = root / "state"
    for p in [root, state, *state.iterdir()]:
        os.chown(p, 0, 0)
        p.chmod(0o755 if p.is_dir() else 0o644)
    time.sleep(3.5)                              # > 3 rounds of 1 s without a finished round
    files = sorted((p.name, p.stat().st_mtime) for p in state.iterdir())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-m", "slurm_shockwave", "status",
                        "--state-dir", str(state), "--json"], env=env, capture_output=True, text=True, timeout=120,
                       cwd="/")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [j["job_id"] for j in out["jobs"]] == [str(a)]
    assert out["cluster"]["snapshot_age_s"] >= 3
    assert any("has not finished a round" in w for w in out["cluster"]["warnings"])
    r = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-m", "slurm_shockwave", "explain", str(a),
                        "--state-dir", str(state)], env=env, capture_output=True, text=True, timeout=120, cwd="/")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert sorted((p.name, p.stat().st_mtime) for p in state.iterdir()) == files     # nothing written
    shutil.rmtree(root, ignore_errors=True)
