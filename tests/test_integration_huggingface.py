"""Hugging Face Trainer integration (issue 33): ShockwaveCallback with the real Trainer on CPU, outside Slurm.

(a) one process under shockwave-run (job_templates/train_hf.py): USR1 mid-epoch -> checkpoint at the next step's
    end, exit 0, one `scontrol requeue` by the wrapper; then SIGTERM (Slurm's requeue / time limit) with HF's own
    JIT checkpoint on -> Shockwave's checkpoint at the next step (HF's would wait 3 s and save on its own), exit 0,
    no requeue by the wrapper; the third run completes: every step exactly once, the weights of an uninterrupted run;
(b) two ranks under torchrun (gloo) preempted twice: both ranks stop at the same step, no process is left;
(c) last_checkpoint: the newest *complete* checkpoint (a save killed before the mark is skipped).
A fake `scontrol` / `squeue` first on PATH records every call.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_shockwave.events import EventReader
from tests.integration_runs import BIN, REPO, job_env, lines, run

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")

TRAIN = REPO / "job_templates" / "train_hf.py"
E, BS = 3, 8


def _finals(out: str) -> dict[int, tuple[int, str]]:
    """rank -> (optimizer steps done, weights checksum) from the program's last line per rank."""
    got = re.findall(r"\[train_hf\] rank=(\d+) .* step=(\d+)/\d+ time=\S+ weights=(\S+)", out)
    return {int(r): (int(s), w) for r, s, w in got}


def _check(tmp_path: Path, job: str, log: Path, stops: list[int], per_epoch: int) -> list:
    steps = [tuple(map(int, ln.split())) for ln in lines(log)]
    assert [s for _, s in steps] == list(range(E * per_epoch)), steps  # every step once, in order: none redone
    runs = [0, *stops, E * per_epoch]
    assert steps == [(r, s) for r in range(len(runs) - 1) for s in range(runs[r], runs[r + 1])]
    assert all(s % per_epoch for s in stops), stops  # each preemption landed mid-epoch
    evs = EventReader(tmp_path / "store").read_job(job, expected_uid=os.geteuid()).events
    assert [(e.restart, e.step) for e in evs if e.kind == "resume"] == list(enumerate([0, *stops]))
    ckpts = [e for e in evs if e.kind == "checkpoint"]
    assert [(e.restart, e.step, e.epoch) for e in ckpts] == [
        (i, s, s // per_epoch - 1 if s >= per_epoch else None) for i, s in enumerate(stops)]
    assert [e.path for e in ckpts] == [str(tmp_path / "ck" / f"checkpoint-{s}") for s in stops]
    for e in [e for e in evs if e.kind == "resume"][1:]:
        assert e.path == str(tmp_path / "ck" / f"checkpoint-{e.step}") and e.epoch == e.step // per_epoch
    ends = [e for e in evs if e.kind == "epoch_end"]
    assert [e.epoch for e in ends] == list(range(E))  # each epoch reported once, by the run that finished it
    for e in ends:
        assert e.total_epochs == E and e.batch_size == BS and e.samples_per_epoch == per_epoch * BS
        assert e.samples == BS * sum(1 for r, s in steps if r == e.restart and s // per_epoch == e.epoch), e
    for s in stops:  # complete checkpoints: the mark, nothing half-written
        names = set(os.listdir(tmp_path / "ck" / f"checkpoint-{s}"))
        assert {"shockwave.json", "trainer_state.json", "optimizer.pt", "model.safetensors"} <= names, names
        assert "checkpoint-is-incomplete.txt" not in names
    return evs


# ------------------------------------------------------------------ (a) one process: USR1, then SIGTERM
def test_single_process_usr1_then_sigterm_resume_at_the_next_step(tmp_path):
    job, log, S = "93501", tmp_path / "steps.log", 12
    args = [str(TRAIN), "--epochs", str(E), "--steps-per-epoch", str(S), "--batch-size", str(BS)]
    cmd = [str(BIN / "shockwave-run"), "--", sys.executable, *args, "--step-log", str(log), "--step-time", "0.05"]
    env = job_env(tmp_path, job)
    ref = subprocess.Popen([sys.executable, *args, "--output-dir", str(tmp_path / "ref")], cwd=tmp_path,
                           env={**job_env(tmp_path, "1"), "SHOCKWAVE_STORE": ""}, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        rc0, out0, err0 = run(cmd, env, tmp_path, str(log), log, after=15)  # USR1 in epoch 1
        ref_out, ref_err = ref.communicate(timeout=90)
    finally:
        if ref.poll() is None:
            ref.kill()
            ref.wait()
    assert ref.returncode == 0, ref_err[-3000:]
    assert rc0 == 0 and "Traceback" not in err0, err0[-3000:]  # checkpointed, exited 0, requeued by the wrapper
    calls = [c for c in lines(tmp_path / "slurm_calls.log") if c.startswith("scontrol")]
    assert calls == [f"scontrol requeue {job}"], calls
    stop0 = _finals(out0)[0][0]

    # SIGTERM (what Slurm sends at a requeue or the time limit), HF's JIT checkpoint on: ours acts, at once
    env1 = {**env, "SLURM_RESTART_COUNT": "1"}
    rc1, out1, err1 = run([*cmd, "--jit-checkpoint"], env1, tmp_path, str(log), log, after=5, sig=signal.SIGTERM)
    assert rc1 == 0, err1[-3000:]  # Slurm requeues after TERM: the wrapper does not
    assert [c for c in lines(tmp_path / "slurm_calls.log") if c.startswith("scontrol")] == calls
    assert "HF's JIT stays idle" in err1, err1[-3000:]
    stop1 = _finals(out1)[0][0]

    rc2, out2, err2 = run(cmd, {**env, "SLURM_RESTART_COUNT": "2"}, tmp_path, str(log), log)
    assert rc2 == 0, err2[-3000:]
    assert f"from={tmp_path / 'ck' / f'checkpoint-{stop1}'}" in out2
    evs = _check(tmp_path, job, log, [stop0, stop1], S)
    assert _finals(out2)[0] == _finals(ref_out)[0]  # the weights of the uninterrupted run: nothing lost or redone

    sig_ts = {e.restart: e.ts for e in evs if e.kind == "signal"}
    lag = {e.restart: e.ts - sig_ts[e.restart] for e in evs if e.kind == "checkpoint"}
    assert lag[1] < 2.5, lag  # HF's JIT would wait kill_wait = 3 s first (and miss the mark and the event)
    assert [e.reason for e in evs if e.kind == "exit"] == [
        "preempted (signals: SIGUSR1); requeued", "preempted (signals: SIGTERM)", "completed"]


# ------------------------------------------------------------------ (b) torchrun, two ranks, preempted twice
def test_torchrun_two_ranks_preempted_twice_stop_together(tmp_path):
    job, log, S = "93502", tmp_path / "steps.log", 16
    cmd = [str(BIN / "shockwave-run"), "--", str(BIN / "torchrun"), "--standalone", "--nproc_per_node=2", str(TRAIN),
           "--epochs", str(E), "--steps-per-epoch", str(S), "--batch-size", str(BS), "--step-log", str(log),
           "--step-time", "0.1"]
    env = job_env(tmp_path, job)
    stops, outs = [], []
    for restart, after in ((0, 18), (1, 14), (2, None)):  # the request file reaches the ranks within ~0.5 s
        rc, out, err = run(cmd, {**env, "SLURM_RESTART_COUNT": str(restart)}, tmp_path, str(log), log, after=after)
        assert rc == 0 and "Traceback" not in err, err[-3000:]
        finals = _finals(out)
        assert set(finals) == {0, 1} and finals[0] == finals[1], out  # the same step and weights on both ranks
        outs.append(out)
        if after is not None:
            stops.append(finals[0][0])
    assert _finals(outs[-1])[0][0] == E * S
    _check(tmp_path, job, log, stops, S)
    assert len([c for c in lines(tmp_path / "slurm_calls.log") if c.startswith("scontrol requeue")]) == 2
    assert {json.loads((tmp_path / "ck" / f"checkpoint-{s}" / "shockwave.json").read_text())["step"]
            for s in stops} == set(stops)
    assert {f"rng_state_{r}.pth" for r in (0, 1)} <= set(os.listdir(tmp_path / "ck" / f"checkpoint-{stops[-1]}"))


# ------------------------------------------------------------------ (c) last_checkpoint
def test_last_checkpoint_is_the_newest_complete_one(tmp_path, monkeypatch):
    from slurm_shockwave.wrapper.integrations.huggingface import last_checkpoint

    for var in ("SHOCKWAVE_JOB_ID", "SHOCKWAVE_RESTART_COUNT", "SLURM_RESTART_COUNT", "SHOCKWAVE_RUN_START"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "93503")

    def ckpt(step: int, mark: dict | None = None, state: bool = True, jit_incomplete: bool = False) -> str:
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if state:
            (d / "trainer_state.json").write_text("{}")
        if mark is not None:
            (d / "shockwave.json").write_text(json.dumps(mark))
        if jit_incomplete:
            (d / "checkpoint-is-incomplete.txt").write_text("in progress")
        return str(d)

    assert last_checkpoint(tmp_path / "missing") is None and last_checkpoint(tmp_path) is None
    two = ckpt(2)  # written without the callback: used while no checkpoint carries the mark
    assert last_checkpoint(tmp_path) == two
    ckpt(3, state=False)  # a save killed early
    ckpt(4, jit_incomplete=True)  # HF's JIT save killed
    assert last_checkpoint(tmp_path) == two
    ten = ckpt(10, {"step": 10, "job_id": "93503", "time": time.time()})
    ckpt(12)  # a save killed after trainer_state.json, before the mark
    (tmp_path / "checkpoint-20").write_text("not a folder")
    assert last_checkpoint(tmp_path) == ten
    old = ckpt(30, {"step": 30, "job_id": "93503", "time": time.time() - 100})
    monkeypatch.setenv("SHOCKWAVE_RUN_START", str(time.time() - 10))
    assert last_checkpoint(tmp_path) == ten  # an older job's, with this id: ignored on the job's first run
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert last_checkpoint(tmp_path) == old  # this job's own, from its earlier run
