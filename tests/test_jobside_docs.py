"""Every fenced ```python sample of the README and the docs runs, under shockwave-run, and does what it says.

Samples are found in README.md, docs/**/*.md, job_templates/README.md and prolog_epilog/README.md. Each
runs as a program under the wrapper (a private event store and checkpoint directory in a temp dir, no
Slurm), must exit 0, and the training samples must report all their declared epochs and be finished.
Also: the `Training` object under a real preemption signal (save, stop, resume; nothing lost or repeated).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_shockwave.events import EventReader, summarize

REPO = Path(__file__).resolve().parents[1]
RUN = [sys.executable, "-m", "slurm_shockwave.wrapper.cli"]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```", re.S | re.M)


def doc_files() -> list[Path]:
    files = [REPO / "README.md", REPO / "job_templates" / "README.md", REPO / "prolog_epilog" / "README.md"]
    files += sorted((REPO / "docs").rglob("*.md"))
    return [f for f in files if f.exists()]


def samples() -> list[tuple[str, str]]:
    out = []
    for f in doc_files():
        for i, block in enumerate(FENCE.findall(f.read_text())):
            out.append((f"{f.relative_to(REPO)}#{i + 1}", block))
    return out


SAMPLES = samples()


def _env(tmp_path: Path, job: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SHOCKWAVE_"))}
    env.update(PYTHONPATH=str(REPO), SHOCKWAVE_STORE=str(tmp_path / "store"), SLURM_JOB_ID=job,
               SHOCKWAVE_CHECKPOINT_DIR=str(tmp_path / "ck"), SHOCKWAVE_REQUEUE_RETRY_S="0")
    return env


def test_the_readme_and_docs_have_samples():
    names = [n for n, _ in SAMPLES]
    assert any(n.startswith("README.md#") for n in names) and any(n.startswith("docs/") for n in names)


@pytest.mark.parametrize("name,code", SAMPLES, ids=[n for n, _ in SAMPLES])
def test_doc_sample_runs(tmp_path, name, code):
    prog = tmp_path / "sample.py"
    prog.write_text(code)
    r = subprocess.run(RUN + ["--", sys.executable, str(prog)], cwd=tmp_path, env=_env(tmp_path, "4100"),
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr}"
    evs = EventReader(tmp_path / "store").read_job("4100", expected_uid=os.geteuid()).events
    p = summarize(evs)
    if "Training(" in code:                       # a training sample: every declared epoch, once, finished
        epochs = [e.epoch for e in evs if e.kind == "epoch_end"]
        assert p.total_epochs and epochs == list(range(p.total_epochs)), epochs
        assert p.finished and [e.kind for e in evs][-1] == "exit"


TRAIN = """
import sys, time
from slurm_shockwave.wrapper import Training

class Model:
    def __init__(self):
        self.seen = []
    def state_dict(self):
        return {"seen": list(self.seen)}
    def load_state_dict(self, state):
        self.seen = state["seen"]

m = Model()
run = Training(m, total_epochs=8, samples_per_epoch=10, batch_size=16)
print("resume", run.start_epoch, flush=True)
for epoch in run.epochs():
    time.sleep(0.25)                  # one epoch of "training"
    m.seen.append(epoch)
print("seen", m.seen, "stopped_early", run.stopped_early, flush=True)
"""


def _signal_after_epoch(tmp_path, prog, env, job: str, epoch: int):
    """Run `prog` under shockwave-run, send the checkpoint signal once epoch `epoch` is reported; (out, err, p)."""
    p = subprocess.Popen(RUN + ["--", sys.executable, str(prog)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    evfile = tmp_path / "store" / "users" / str(os.geteuid()) / job / "events.jsonl"
    deadline = time.monotonic() + 60
    while f'"epoch":{epoch},'.encode() not in (evfile.read_bytes() if evfile.exists() else b""):
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    p.send_signal(signal.SIGUSR1)
    out, err = p.communicate(timeout=60)
    return out, err, p


def test_training_object_saves_on_the_signal_and_resumes(tmp_path):
    """The program never calls save() or checkpointed() itself: Training does both, and the wrapper asks
    for a requeue because epochs are left (here there is no Slurm, so it exits 1 instead of 0/COMPLETED)."""
    prog = tmp_path / "train.py"
    prog.write_text(TRAIN)
    env = _env(tmp_path, "4200")
    out, err, p = _signal_after_epoch(tmp_path, prog, env, "4200", 1)
    assert p.returncode == 1, (out, err)
    assert "stopped_early True" in out and "could not be requeued" in err
    first = summarize(EventReader(tmp_path / "store").read_job("4200", expected_uid=os.geteuid()).events)
    assert first.last_checkpoint_path and 2 <= first.epochs_done < 8 and not first.finished
    assert first.exit_reason.startswith(f"ended early: {first.epochs_done}/8 epochs, requeue failed")
    r = subprocess.run(RUN + ["--", sys.executable, str(prog)], cwd=tmp_path,
                       env={**env, "SLURM_RESTART_COUNT": "1"}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"resume {first.epochs_done}" in r.stdout and "seen [0, 1, 2, 3, 4, 5, 6, 7]" in r.stdout
    evs = EventReader(tmp_path / "store").read_job("4200", expected_uid=os.geteuid()).events
    assert [e.epoch for e in evs if e.kind == "epoch_end"] == list(range(8))    # none lost, none repeated
    assert summarize(evs).finished


def test_breaking_out_of_the_loop_on_the_signal_still_saves(tmp_path):
    code = TRAIN.replace("    m.seen.append(epoch)\n",
                         "    if run.should_checkpoint():\n        break\n    m.seen.append(epoch)\n")
    prog = tmp_path / "train.py"
    prog.write_text(code)
    env = _env(tmp_path, "4300")
    out, _, _ = _signal_after_epoch(tmp_path, prog, env, "4300", 0)
    evs = EventReader(tmp_path / "store").read_job("4300", expected_uid=os.geteuid()).events
    ck = [e for e in evs if e.kind == "checkpoint"]
    assert ck and ck[-1].total_epochs == 8 and "stopped_early True" in out
    r = subprocess.run(RUN + ["--", sys.executable, str(prog)], cwd=tmp_path,
                       env={**env, "SLURM_RESTART_COUNT": "1"}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "seen [0, 1, 2, 3, 4, 5, 6, 7]" in r.stdout, r.stdout + r.stderr
