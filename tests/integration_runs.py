"""What the framework integrations' tests share: a job's environment outside Slurm (private event store and
checkpoint directory, a fake `scontrol`/`squeue` first on PATH that records every call in `slurm_calls.log`), and
running a program under it with a signal placed by its step log, leaving no process behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FAKE = '#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\n[ "$(basename "$0")" = squeue ] && exit 1\nexit 0\n'


def job_env(tmp_path: Path, job: str, **extra: str) -> dict[str, str]:
    fake = tmp_path / "fakebin"
    fake.mkdir(exist_ok=True)
    for name in ("scontrol", "squeue"):
        (fake / name).write_text(FAKE.format(log=tmp_path / "slurm_calls.log"))
        (fake / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SHOCKWAVE_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"))}
    env.update(PATH=f"{fake}:{env.get('PATH', '')}", SHOCKWAVE_STORE=str(tmp_path / "store"), PYTHONPATH=str(REPO),
               SHOCKWAVE_REQUEUE_RETRY_S="0", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", SLURM_JOB_ID=job,
               PYTHONWARNINGS="ignore", SHOCKWAVE_CHECKPOINT_DIR=str(tmp_path / "ck"), **extra)
    return env


def lines(path: Path | None) -> list[str]:
    return path.read_text().splitlines() if path is not None and path.exists() else []


def leftovers(tag: str) -> list[int]:
    """Processes whose command line names ``tag`` (torchrun starts its workers in sessions of their own)."""
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and tag in (d / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def run(cmd, env, cwd: Path, tag: str, step_log: Path | None = None, after: int | None = None,
        sig=signal.SIGUSR1) -> tuple[int, str, str]:
    """Run ``cmd``; send ``sig`` to it once ``step_log`` has ``after`` more lines.  No process whose command line
    names ``tag`` may outlive it (killed, then the test fails)."""
    before = len(lines(step_log))
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if after is not None:
            deadline = time.monotonic() + 60
            while len(lines(step_log)) < before + after:
                assert time.monotonic() < deadline and p.poll() is None, p.communicate()
                time.sleep(0.01)
            p.send_signal(sig)
        out, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    deadline = time.monotonic() + 5
    while (left := leftovers(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"
    return p.returncode, out, err
