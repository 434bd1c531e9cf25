"""A job submitted with submitit, managed by the real controller (authoritative) on a real local Slurm cluster:
it is preempted with its own checkpoint signal (USR2 to its steps, read from its submission: submitit's script
name), checkpoints through submitit (`checkpoint()`), is requeued by submitit alone (once per preemption: the
controller's requeuehold never fires when submitit requeued in time), and completes with the right result.
The job reports through slurm_shockwave.wrapper.integrations.submitit (start, resume, checkpoint, epoch_end).

The host's Slurm only: submitit runs its task with `srun`, which the chroot'ed versions cannot (`Slurmd could not
connect IO`).  submitit calls `sbatch`/`scontrol` from PATH with os.environ: SLURM_CONF is set for the test."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from slurm_shockwave.controller.config import config_from_dict
from slurm_shockwave.controller.daemon import Controller
from solver.types import Policy, RoundDecision
from tests.slurm_fixtures import cluster_up, keep_root, make_root, wait_for

submitit = pytest.importorskip("submitit")
cloudpickle = pytest.importorskip("cloudpickle")
from slurm_shockwave.wrapper.integrations.submitit import Checkpointable  # noqa: E402 - after importorskip

pytestmark = pytest.mark.slurm

STEPS, STEP_S, STEPS_PER_EPOCH = 240, 0.05, 20
#: a shell job beside it that checkpoints like shockwave-run: on USR1 at its batch shell it requeues itself
OTHER = """#!/bin/bash
trap 'echo "USR1 at the batch shell"; scontrol requeue $SLURM_JOB_ID; exit 0' USR1
trap 'echo "USR2 at the batch shell"' USR2
for i in $(seq 1 3000); do sleep 0.1; done
"""


class Count(Checkpointable):
    """Sums 0..STEPS-1 one step at a time.  submitit pickles self at each checkpoint, so the sum, the step and the
    epoch go on where they were; the state changes in one dict update (a signal handler never runs inside it)."""

    def __init__(self):
        self.total, self.starts = 0, []

    def __call__(self):
        self.starts = [*self.starts, self.step]
        self.report_start()
        while self.step < STEPS:
            time.sleep(STEP_S)
            step = self.step + 1
            self.__dict__.update(total=self.total + self.step, step=step, epoch=step // STEPS_PER_EPOCH)
            if step % STEPS_PER_EPOCH == 0:
                self.reporter.report_epoch(step // STEPS_PER_EPOCH - 1, batch_size=32, samples=32 * STEPS_PER_EPOCH,
                                           duration_s=STEP_S * STEPS_PER_EPOCH, total_epochs=STEPS // STEPS_PER_EPOCH)
        return self.total, self.starts


class Scripted(Policy):
    name = "scripted"

    def __init__(self):
        self.plan = set()

    def decide(self, view):
        return RoundDecision(run=tuple(j.job_id for j in view.jobs if j.job_id in self.plan))


@pytest.fixture(scope="module")
def cluster():
    yield from cluster_up("shockwave-submitit-", nodes=1, gpus_per_node=1)


def jobs(c, ids):
    return {j.job_id: j for j in c.cli.squeue_jobs() if j.job_id in ids}


def events(store: Path, job_id: int) -> list[dict]:
    path = store / "users" / str(os.geteuid()) / str(job_id) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def processes_with(text: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and text.encode() in (p / "cmdline").read_bytes():
                out.append(int(p.name))
        except OSError:
            continue
    return out


def test_a_submitit_job_is_preempted_with_usr2_and_requeued_once_per_preemption(cluster, monkeypatch):
    root = make_root("shockwave-submitit-a-")
    store, folder = root / "events", root / "submitit"
    conf = root / "controller.toml"
    conf.write_text(f'[controller]\nevent_store = "{store}"\n')
    for k, v in cluster.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SHOCKWAVE_CONFIG", str(conf))  # the job finds the site's store as shockwave-run does
    monkeypatch.delenv("SHOCKWAVE_STORE", raising=False)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the job need not import this test module
    executor = submitit.SlurmExecutor(folder=folder, python=sys.executable)
    executor.update_parameters(partition=cluster.partition, gres="gpu:1", time=60, nodes=1, ntasks_per_node=1,
                               comment="shockwave epochs=8 bs=32 epoch_s=1")
    try:
        job = executor.submit(Count())
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    a = int(job.job_id)
    wait_for(lambda: jobs(cluster, {a})[a].state == "RUNNING", timeout=30, what="the submitit job running")
    script = root / "other.sh"
    script.write_text(OTHER)
    b = cluster.cli.sbatch(str(script), ["--job-name=other", "--gres=gpu:1", "--requeue", f"--chdir={root}",
                                         f"--output={root}/other-%j.out", "-p", cluster.partition,
                                         "--comment=shockwave epochs=10 bs=32 epoch_s=30"])
    cfg = config_from_dict({"controller": {
        "round_seconds": 1, "mode": "authoritative", "partition": cluster.partition, "state_dir": str(root / "state"),
        "event_store": str(store), "grace_seconds": 3, "min_run_seconds": 1, "preemption_cost_s": 0,
        "rounds_per_restart": 0},
        "policy": {"name": "fifo"}}, "test")
    cfg.slurm.env = dict(cluster.env)
    ctl = Controller(cfg)
    pol = ctl.loop.policy = Scripted()
    t0 = time.monotonic()
    try:
        def runs_alone(target, other):
            ctl.run(max_rounds=1)
            js = jobs(cluster, {target, other})
            return js[target].state == "RUNNING" and js[other].state != "RUNNING" and js[target]

        for target in (a, b, a, b, a):
            pol.plan = {target}
            other = b if target == a else a
            running = wait_for(lambda: runs_alone(target, other), timeout=40, interval=0.1, what=f"{target} running")
            if target == a:  # its run reported its start (submitit's handlers are up) and worked a little
                restart = running.restart_count
                wait_for(lambda: ctl.run(max_rounds=1) is not None and any(
                    e["kind"] == "resume" and e["restart"] == restart for e in events(store, a)), timeout=30,
                    interval=0.1, what="the run's resume event")
            if (target, running.restart_count) == (a, 2):
                break  # its third run: kept until it completes
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                ctl.run(max_rounds=1)
        wait_for(lambda: ctl.run(max_rounds=1) is not None and jobs(cluster, {a})[a].state == "COMPLETED",
                 timeout=40, interval=0.1, what="the submitit job completed")
        elapsed = time.monotonic() - t0
        final = jobs(cluster, {a})[a]
        total, starts = job.result()
        acts = [r for r in ctl.state.actions(status="done") if r["job_id"] == str(a)]
        signals = [json.loads(r["value"]) for r in acts if r["verb"] == "signal"]
        other_signals = [json.loads(r["value"]) for r in ctl.state.actions(job_id=b, verb="signal", status="done")]
        log, err = (folder / f"{a}_0_log.out").read_text(), (folder / f"{a}_0_log.err").read_text()  # out: all levels
        evs = events(store, a)
        try:
            # preempted twice, each time with USR2 at its steps (its own signal), never the configured USR1
            assert signals == ["USR2", "USR2"], signals
            assert other_signals == ["B:USR1", "B:USR1"], other_signals
            assert log.count("Caught signal SIGUSR2") == 2 and "SIGUSR1" not in log + err
            assert log.count("Calling checkpoint method") == 2
            # requeued exactly once per preemption, by submitit alone: no requeuehold of ours, 2 restarts
            assert final.restart_count == 2 and not [r for r in acts if r["verb"] == "requeue_hold"]
            # the right result, each run going on from the step its predecessor checkpointed
            assert total == sum(range(STEPS)) and len(starts) == 3 and starts[0] == 0 < starts[1] < starts[2]
            ckpts = [e["step"] for e in evs if e["kind"] == "checkpoint"]
            resumes = [e["step"] for e in evs if e["kind"] == "resume"]
            assert resumes == starts and ckpts == starts[1:]
            assert sum(e["kind"] == "epoch_end" for e in evs) == STEPS // STEPS_PER_EPOCH
            assert "USR1 at the batch shell" in (root / f"other-{b}.out").read_text()
            assert "USR2" not in (root / f"other-{b}.out").read_text()
        except AssertionError:
            print(keep_root(root), f"\n{log[-3000:]}")
            raise
        wait_for(lambda: not processes_with(str(folder)), timeout=15, what="no process of the submitit job left")
        sent = [r["ts"] for r in acts if r["verb"] == "signal"]
        saved = [e["ts"] for e in evs if e["kind"] == "checkpoint"]
        lags = ", ".join(f"{c - s_:.2f} s" for s_, c in zip(sorted(sent), saved))
        print(f"submitit job: 2 preemptions (signal to checkpoint: {lags}; 0 steps redone), done in {elapsed:.1f} s")
    finally:
        ctl.close()
        cluster.cli.cancel([a, b])
        wait_for(lambda: not any(j.state in ("RUNNING", "PENDING") for j in jobs(cluster, {a, b}).values()),
                 timeout=30, what="jobs cancelled")
