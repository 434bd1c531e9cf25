"""Hugging Face Accelerate integration (issue 33): ShockwaveAccelerate with a real Accelerator on CPU, outside Slurm.

(a) one process under shockwave-run (job_templates/train_accelerate.py): USR1 mid-epoch -> checkpoint at that step,
    exit 0, one `scontrol requeue` by the wrapper; the next run resumes at the next batch: every step exactly once,
    the weights of an uninterrupted run;
(b) two ranks under torchrun (gloo) preempted twice: both ranks stop at the same step (Accelerate's trigger), the
    weights of an uninterrupted two-rank run, no process is left;
(c) in one process: save is atomic (a temp folder renamed; a killed save's folder is never loaded and is cleaned
    up), the two newest are kept, resume restores the state and skips the batches done.
A fake `scontrol` / `squeue` first on PATH records every call.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_shockwave.events import EventReader
from tests.integration_runs import BIN, REPO, job_env, lines, run

pytestmark = pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="needs accelerate")

TRAIN = REPO / "job_templates" / "train_accelerate.py"
E, BS = 3, 8


def _finals(out: str) -> dict[int, tuple[int, str]]:
    """rank -> (optimizer steps done, weights checksum) from the program's last line per rank."""
    got = re.findall(r"\[train_accelerate\] rank=(\d+) .* step=(\d+) stopped=\w+ time=\S+ weights=(\S+)", out)
    return {int(r): (int(s), w) for r, s, w in got}


def _check(tmp_path: Path, job: str, log: Path, stops: list[int], per_epoch: int) -> None:
    steps = [tuple(map(int, ln.split())) for ln in lines(log)]
    runs = [0, *stops, E * per_epoch]
    assert steps == [(r, s) for r in range(len(runs) - 1) for s in range(runs[r], runs[r + 1])], steps  # once each
    assert all(s % per_epoch for s in stops), stops  # each preemption landed mid-epoch
    evs = EventReader(tmp_path / "store").read_job(job, expected_uid=os.geteuid()).events
    resumes = [e for e in evs if e.kind == "resume"]
    assert [(e.restart, e.step) for e in resumes] == list(enumerate([0, *stops]))
    assert [(e.path, e.epoch) for e in resumes[1:]] == [
        (str(tmp_path / "ck" / f"checkpoint-{s}"), s // per_epoch) for s in stops]
    assert [(e.restart, e.step, e.path, e.epoch) for e in evs if e.kind == "checkpoint"] == [
        (i, s, str(tmp_path / "ck" / f"checkpoint-{s}"), s // per_epoch - 1 if s >= per_epoch else None)
        for i, s in enumerate(stops)]
    ends = [e for e in evs if e.kind == "epoch_end"]
    assert [e.epoch for e in ends] == list(range(E))  # each epoch reported once, by the run that finished it
    for e in ends:
        assert e.total_epochs == E and e.batch_size == BS and e.samples_per_epoch == per_epoch * BS
        assert e.samples == BS * sum(1 for r, s in steps if r == e.restart and s // per_epoch == e.epoch), e
    kept = sorted(os.listdir(tmp_path / "ck"))
    assert kept == sorted(f"checkpoint-{s}" for s in stops[-2:]), kept  # no temp folder left
    for s in stops[-2:]:
        mark = json.loads((tmp_path / "ck" / f"checkpoint-{s}" / "shockwave.json").read_text())
        assert (mark["step"], mark["epoch"], mark["batch"]) == (s, s // per_epoch, s % per_epoch)


# ------------------------------------------------------------------ (a) one process
def test_single_process_checkpoints_on_usr1_and_resumes_at_the_next_batch(tmp_path):
    job, log, S = "93601", tmp_path / "steps.log", 12
    args = [str(TRAIN), "--epochs", str(E), "--steps-per-epoch", str(S), "--batch-size", str(BS)]
    cmd = [str(BIN / "shockwave-run"), "--", sys.executable, *args, "--step-log", str(log), "--step-time", "0.05"]
    env = job_env(tmp_path, job)
    ref = subprocess.Popen([sys.executable, *args, "--checkpoint-dir", str(tmp_path / "ref")], cwd=tmp_path,
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
    assert rc0 == 0 and "Traceback" not in err0, err0[-3000:]
    assert [c for c in lines(tmp_path / "slurm_calls.log") if c.startswith("scontrol")] == [f"scontrol requeue {job}"]
    stop = _finals(out0)[0][0]
    assert stop in (15, 16), out0  # USR1 reaches the program directly: it stops at the step it is in

    rc1, out1, err1 = run(cmd, {**env, "SLURM_RESTART_COUNT": "1"}, tmp_path, str(log))
    assert rc1 == 0, err1[-3000:]
    _check(tmp_path, job, log, [stop], S)
    assert _finals(out1)[0] == _finals(ref_out)[0] == (E * S, _finals(ref_out)[0][1])  # nothing lost or redone


# ------------------------------------------------------------------ (b) torchrun, two ranks, preempted twice
def test_torchrun_two_ranks_preempted_twice_stop_together(tmp_path):
    job, log, S = "93602", tmp_path / "steps.log", 16
    args = [str(TRAIN), "--epochs", str(E), "--steps-per-epoch", str(S), "--batch-size", str(BS)]
    torchrun = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node=2"]
    cmd = [str(BIN / "shockwave-run"), "--", *torchrun, *args, "--step-log", str(log), "--step-time", "0.1"]
    env = job_env(tmp_path, job)
    ref = subprocess.Popen([*torchrun, *args, "--checkpoint-dir", str(tmp_path / "ref")],
                           cwd=tmp_path, env={**job_env(tmp_path, "1"), "SHOCKWAVE_STORE": ""},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stops, outs = [], []
    try:
        for restart, after in ((0, 18), (1, 14), (2, None)):  # the request file reaches the ranks within ~0.5 s
            rc, out, err = run(cmd, {**env, "SLURM_RESTART_COUNT": str(restart)}, tmp_path, str(log), log, after)
            assert rc == 0 and "Traceback" not in err, err[-3000:]
            finals = _finals(out)
            assert set(finals) == {0, 1} and finals[0] == finals[1], out  # the same step and weights on both ranks
            outs.append(out)
            if after is not None:
                stops.append(finals[0][0])
        ref_out, ref_err = ref.communicate(timeout=90)
    finally:
        if ref.poll() is None:
            ref.kill()
            ref.wait()
    assert ref.returncode == 0, ref_err[-3000:]
    _check(tmp_path, job, log, stops, S)
    assert len([c for c in lines(tmp_path / "slurm_calls.log") if c.startswith("scontrol requeue")]) == 2
    assert _finals(outs[-1]) == _finals(ref_out) and _finals(ref_out)[0][0] == E * S  # nothing lost or redone


# ------------------------------------------------------------------ (c) save, resume, skip: in this process
def test_save_is_atomic_keeps_two_and_resume_skips_the_batches_done(tmp_path, monkeypatch):
    import torch
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    from slurm_shockwave.wrapper.api import Reporter
    from slurm_shockwave.wrapper.integrations.accelerate import ShockwaveAccelerate

    for var in ("SHOCKWAVE_JOB_ID", "SHOCKWAVE_RESTART_COUNT", "SLURM_RESTART_COUNT", "SHOCKWAVE_RUN_START"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "93603")
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    loader = torch.utils.data.DataLoader(torch.arange(20.0).unsqueeze(1).repeat(1, 2), batch_size=2)
    model, loader = acc.prepare(model, loader)
    rep = Reporter(tmp_path / "events.jsonl", job_id="93603", install_handlers=False, env={})
    sw = ShockwaveAccelerate(acc, total_epochs=2, checkpoint_dir=tmp_path / "ck", reporter=rep)
    assert sw.resume() == (0, 0) and not sw.should_checkpoint()

    (tmp_path / "ck" / ".checkpoint-8.tmp").mkdir(parents=True)  # a save killed before its rename
    for n, _batch in enumerate(sw.batches(loader, 0), 1):
        with torch.no_grad():
            model.weight.fill_(float(n))
        if n in (3, 4, 7):
            sw.save(n)
    assert sorted(os.listdir(tmp_path / "ck")) == ["checkpoint-4", "checkpoint-7"]  # two kept, the temp one gone
    (tmp_path / "ck" / "checkpoint-9").mkdir()  # no mark: not a complete checkpoint
    sw.save(10)  # at the end of the epoch: resumes at the next one
    assert json.loads((tmp_path / "ck" / "checkpoint-10" / "shockwave.json").read_text())["epoch"] == 1

    with torch.no_grad():
        model.weight.fill_(-1.0)
    sw2 = ShockwaveAccelerate(acc, total_epochs=2, checkpoint_dir=tmp_path / "ck", reporter=rep)
    assert sw2.resume() == (1, 10) and model.weight[0, 0].item() == 10.0  # the state of checkpoint-10 is back
    shutil.rmtree(tmp_path / "ck" / "checkpoint-10")
    (tmp_path / "ck" / "checkpoint-9").rmdir()
    sw3 = ShockwaveAccelerate(acc, total_epochs=2, checkpoint_dir=tmp_path / "ck", reporter=rep)
    assert sw3.resume() == (0, 7) and model.weight[0, 0].item() == 7.0
    rest = [b[0, 0].item() for b in sw3.batches(loader, 0)]
    assert rest == [14.0, 16.0, 18.0]  # batches 8-10 of epoch 0: the 7 done are skipped
    assert len(list(sw3.batches(loader, 1))) == 10  # the next epoch is whole

    evs = [json.loads(ln) for ln in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["kind"], e.get("step")) for e in evs if e["kind"] in ("checkpoint", "resume")] == [
        ("resume", 0), ("checkpoint", 3), ("checkpoint", 4), ("checkpoint", 7), ("checkpoint", 10), ("resume", 10),
        ("resume", 7)]
    assert [(e["epoch"], e["samples"]) for e in evs if e["kind"] == "epoch_end"] == [(0, 20), (0, 6), (1, 20)]
    with pytest.raises(ValueError, match="automatic_checkpoint_naming"):
        acc.project_configuration = ProjectConfiguration(automatic_checkpoint_naming=True)
        ShockwaveAccelerate(acc, reporter=rep)
