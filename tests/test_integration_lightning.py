"""PyTorch Lightning integration (issue 33): ShockwaveCallback with real Lightning on CPU, outside Slurm.

(a) one process under shockwave-run: USR1 mid-epoch -> checkpoint at a step boundary, exit, one requeue by the
    wrapper; the next run resumes at the next step: every step exactly once, the weights of an uninterrupted run;
(b) two ranks under torchrun (gloo) preempted twice: every rank stops at the same step, no process is left;
(c) Lightning's own Slurm requeue (USR1 -> `scontrol requeue`) never runs with the callback (it does without).
A fake `scontrol` / `squeue` first on PATH records every call.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slurm_shockwave.events import EventReader

# not imported here (4-5 s): the programs under test import it
pytestmark = pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="needs lightning")

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TRAIN = REPO / "job_templates" / "train_lightning.py"
FAKE = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
[ "$(basename "$0")" = squeue ] && exit 1
exit 0
"""


def _env(tmp_path: Path, job: str, **extra: str) -> dict[str, str]:
    fake = tmp_path / "fakebin"
    fake.mkdir(exist_ok=True)
    for name in ("scontrol", "squeue"):
        (fake / name).write_text(FAKE.format(log=tmp_path / "slurm_calls.log"))
        (fake / name).chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SHOCKWAVE_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"))
    }
    env.update(
        PATH=f"{fake}:{env.get('PATH', '')}",
        SHOCKWAVE_STORE=str(tmp_path / "store"),
        PYTHONPATH=str(REPO),
        SHOCKWAVE_REQUEUE_RETRY_S="0",
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
        SLURM_JOB_ID=job,
        SLURM_NTASKS="1",
        SLURM_JOB_NAME="lightning-test",
        PYTHONWARNINGS="ignore",
        SHOCKWAVE_CHECKPOINT_DIR=str(tmp_path / "ck"),
    )
    return {**env, **extra}


def _calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "slurm_calls.log"
    return [ln for ln in log.read_text().splitlines() if ln.startswith("scontrol")] if log.exists() else []


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _run(cmd: list[str], env: dict, cwd: Path, signal_after: int | None, step_log: Path) -> tuple[int, str, str]:
    """Run ``cmd`` in its own session; USR1 to it once the step log has ``signal_after`` more lines.  Checks that
    no process of the session outlives it."""
    before = len(_lines(step_log))
    p = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        if signal_after is not None:
            deadline = time.monotonic() + 60
            while len(_lines(step_log)) < before + signal_after:
                assert time.monotonic() < deadline and p.poll() is None, p.communicate()
                time.sleep(0.02)
            p.send_signal(signal.SIGUSR1)
        out, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    time.sleep(0.1)
    with pytest.raises(ProcessLookupError):  # nothing of the job left behind (ranks, torchrun, helpers)
        os.killpg(p.pid, 0)
    return p.returncode, out, err


def _steps(step_log: Path) -> list[tuple[int, int]]:
    return [tuple(map(int, ln.split())) for ln in _lines(step_log)]  # type: ignore[misc]


def _events(tmp_path: Path, job: str):
    return EventReader(tmp_path / "store").read_job(job, expected_uid=os.geteuid()).events


def _finals(out: str) -> dict[int, tuple[str, int, str]]:
    """rank -> (state, step, digest of the weights) from the program's last line per rank."""
    pat = r"\[train_lightning\] rank (\d+) (done|stopped at step \d+) step=(\d+) weights=(\w+) loss=(\S+)"
    got = re.findall(pat, out)
    assert all(0 <= float(loss) < 100 for *_, loss in got), got  # finite: equal digests then mean equal weights
    return {int(r): (state, int(step), w) for r, state, step, w, _ in got}


def _check_run_events(evs, stops: list[int], steps: list[tuple[int, int]], per_epoch: int, epochs: int) -> None:
    resumes = [(e.restart, e.step) for e in evs if e.kind == "resume"]
    ckpts = [(e.restart, e.step) for e in evs if e.kind == "checkpoint"]
    assert resumes == [(i, s) for i, s in enumerate([0, *stops])], resumes  # each run starts where the last stopped
    assert ckpts == [(i, s) for i, s in enumerate(stops)], ckpts
    assert [e.epoch for e in evs if e.kind == "epoch_end"] == list(range(epochs))  # each epoch reported once
    assert all(e.total_epochs == epochs and e.batch_size == 8 for e in evs if e.kind == "epoch_end")
    for e in (e for e in evs if e.kind == "epoch_end"):  # the samples of the epoch's steps done in its run
        assert e.samples == 8 * sum(1 for r, s in steps if r == e.restart and s // per_epoch == e.epoch), e


# ------------------------------------------------------------------ (a) one process, preempted once
def test_single_process_checkpoints_on_usr1_and_resumes_at_the_next_step(tmp_path):
    job, log = "93401", tmp_path / "steps.log"
    args = [str(TRAIN), "--epochs", "3", "--steps-per-epoch", "10", "--batch-size", "8"]
    cmd = [str(BIN / "shockwave-run"), "--", sys.executable, *args, "--step-log", str(log)]
    env = _env(tmp_path, job)
    (tmp_path / "ref").mkdir()  # the same training, uninterrupted, at the same time (2 cores)
    ref = subprocess.Popen(
        [sys.executable, *args],
        cwd=tmp_path / "ref",
        env=_env(tmp_path / "ref", "93402"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        rc, out1, err1 = _run([*cmd, "--step-time", "0.05"], env, tmp_path, 13, log)  # mid epoch 1
        assert rc == 0, err1[-3000:]  # the wrapper requeued (the fake scontrol: 0)
        assert _calls(tmp_path) == [f"scontrol requeue {job}"]  # once: by the wrapper, never by Lightning
        ((_, stop, _),) = _finals(out1).values()
        assert 13 <= stop < 30 and stop % 10, out1  # a step boundary inside an epoch
        assert not list(tmp_path.rglob("hpc_ckpt_*"))  # Lightning's own requeue checkpoint: none
    finally:
        out3, err3 = ref.communicate(timeout=90)
    assert ref.returncode == 0, err3[-3000:]

    rc, out2, err2 = _run(cmd, {**env, "SLURM_RESTART_COUNT": "1"}, tmp_path, None, log)
    assert rc == 0, err2[-3000:]
    assert f"resumed from {tmp_path / 'ck'}" in err2 and f"step {stop}" in err2
    assert _calls(tmp_path) == [f"scontrol requeue {job}"]  # finished: no requeue
    steps = _steps(log)
    assert [s for _, s in steps] == list(range(30))  # every step exactly once, in order
    assert {r for r, s in steps if s < stop} == {0} and {r for r, s in steps if s >= stop} == {1}
    _check_run_events(_events(tmp_path, job), [stop], steps, 10, 3)
    # exact resume: the weights of the uninterrupted run (the interrupted epoch's data is neither redone nor skipped)
    assert _finals(out3)[0][:2] == ("done", 30) and _finals(out2)[0] == _finals(out3)[0]


# ------------------------------------------------------------------ (b) torchrun, 2 ranks, preempted twice
def test_torchrun_two_ranks_preempted_twice_stop_together_and_complete(tmp_path):
    job, log = "93403", tmp_path / "steps.log"
    torchrun = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node=2", str(TRAIN), "--epochs", "3"]
    torchrun += ["--steps-per-epoch", "12", "--batch-size", "8"]
    cmd = [str(BIN / "shockwave-run"), "--no-requeue-on-signal", "--", *torchrun, "--step-log", str(log)]
    env = _env(tmp_path, job)
    stops: list[int] = []
    for restart in (0, 1):
        rc, out, err = _run(
            [*cmd, "--step-time", "0.1"], {**env, "SLURM_RESTART_COUNT": str(restart)}, tmp_path, 4, log
        )
        assert rc == 1 and "requeueing is off" in err, err[-3000:]  # exited 0 with epochs left, after the signal
        assert "Traceback" not in err and "ChildFailedError" not in err, err[-3000:]
        finals = _finals(out)
        assert set(finals) == {0, 1} and finals[0] == finals[1], out  # the same step and weights on both ranks
        assert finals[0][0] == f"stopped at step {finals[0][1]}"
        stops.append(finals[0][1])
    assert 0 < stops[0] < stops[1] < 36, stops
    (tmp_path / "ref").mkdir()  # the same training, uninterrupted, next to the last run
    ref = subprocess.Popen(
        torchrun,
        cwd=tmp_path / "ref",
        env=_env(tmp_path / "ref", "93404"),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        rc, out, err = _run(cmd, {**env, "SLURM_RESTART_COUNT": "2"}, tmp_path, None, log)
    finally:
        ref_out, ref_err = ref.communicate(timeout=90)
    assert rc == 0 and ref.returncode == 0, (err[-3000:], ref_err[-3000:])
    finals = _finals(out)
    assert finals[0] == finals[1] and finals[0][:2] == ("done", 36), out
    assert finals == _finals(ref_out), ref_out  # exact resume under DDP too: the uninterrupted run's weights
    steps = _steps(log)
    assert [s for _, s in steps] == list(range(36))  # rank 0's log: every step exactly once
    assert [r for r, _ in steps] == [0] * stops[0] + [1] * (stops[1] - stops[0]) + [2] * (36 - stops[1])
    _check_run_events(_events(tmp_path, job), stops, steps, 12, 3)
    assert _calls(tmp_path) == []  # requeue off, and Lightning never requeues


# ------------------------------------------------------------------ (c) Lightning's own requeue
PLAIN = textwrap.dedent("""
    import os, signal, sys
    import lightning.pytorch as pl, torch
    from torch.utils.data import DataLoader, TensorDataset

    class M(pl.LightningModule):
        def __init__(self):
            super().__init__(); self.lin = torch.nn.Linear(4, 1)
        def training_step(self, batch, i):
            if self.global_step == 3:
                os.kill(os.getpid(), signal.SIGUSR1)      # Slurm's --signal=USR1@... to this single-task job
            return self.lin(batch[0]).pow(2).mean()
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    cbs = []
    if sys.argv[1] == "callback":
        from slurm_shockwave.wrapper.integrations.lightning import ShockwaveCallback
        cbs = [ShockwaveCallback()]
    t = pl.Trainer(max_epochs=2, callbacks=cbs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, accelerator="cpu")
    t.fit(M(), DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4))
    print("env", type(t._accelerator_connector.cluster_environment).__name__,
          t._accelerator_connector.cluster_environment.auto_requeue, "step", t.global_step, flush=True)
""")


def test_lightning_never_runs_its_own_requeue_with_the_callback(tmp_path):
    (tmp_path / "plain.py").write_text(PLAIN)
    runs = {}
    for mode in ("callback", "without"):  # both at once: 2 cores
        d = tmp_path / mode
        d.mkdir()
        runs[mode] = subprocess.Popen(
            [sys.executable, str(tmp_path / "plain.py"), mode],
            cwd=d,
            text=True,
            env=_env(d, "93405"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    outs = {mode: p.communicate(timeout=90) for mode, p in runs.items()}
    assert [p.returncode for p in runs.values()] == [0, 0], [o[1][-2000:] for o in outs.values()]
    # the control: Lightning alone detects Slurm, saves hpc_ckpt_1.ckpt and runs `scontrol requeue` itself
    assert "env SLURMEnvironment True step 32" in outs["without"][0]
    assert _calls(tmp_path / "without") == ["scontrol requeue 93405"]
    assert (tmp_path / "without" / "hpc_ckpt_1.ckpt").exists()
    # with the callback: auto-requeue off, our checkpoint at the step after the signal, and no scontrol call
    assert "env SLURMEnvironment False step 4" in outs["callback"][0], outs["callback"]
    assert _calls(tmp_path / "callback") == []
    assert not list((tmp_path / "callback").rglob("hpc_ckpt_*"))
    assert [p.name for p in (tmp_path / "callback" / "ck").iterdir()] == ["shockwave-93405-step4.ckpt"]
