"""Harness of tests/test_frameworks_slurm.py: the framework job templates on a real local Slurm cluster, run by the
real controller (authoritative, in this process) with a policy that preempts each framework job mid-epoch.

* :class:`FrameworkLab` - a ``LocalCluster`` with the prolog/epilog hooks writing into the lab's event store (as
  tests/test_templates_slurm.py), a work directory, ``sbatch`` of a template with the test's environment, and the
  readers the checks use (events, step logs, the processes whose command line names the lab's root).
* :class:`Preempting` - the policy: every framework job is planned except while the test preempts it (when its
  step log shows it mid-epoch, ``PREEMPTIONS`` times per job); a competitor that never polls the request is planned,
  taken off once (it is requeued held after ``grace_seconds``) and planned again once ``shockwave status`` showed it.
* :data:`TEMPLATES` - the framework templates; one line each (a template whose training script is missing is
  left out, see :func:`available`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from shockwave_lab.localcluster import LocalCluster
from slurm_shockwave.events import EventReader
from solver.types import Policy, RoundDecision

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
PREEMPTIONS = 2  # mid-epoch preemptions per framework job
# epochs of 60 steps of 0.2 s (12 s): the test preempts a job in an epoch's first 40 steps (8 s,
# test_frameworks_slurm `_mid_epoch`), and 20 steps (4 s) are left for the round to signal it and the job to save
# before the epoch ends.  On a loaded 2-core machine shorter ones failed: rounds 3-5 s apart missed the middle of a
# job's epochs until its last run was too short to preempt again, or the job reached the epoch's end before saving
EPOCHS, STEPS, STEP_TIME = 3, 60, 0.2
MARGIN = 20  # steps left in an epoch after the last at which the test preempts


@dataclass(frozen=True)
class Template:
    name: str
    sbatch: str
    script: str
    modules: tuple[str, ...]


TEMPLATES = (
    Template("torchrun", "torchrun.sbatch", "train_ddp.py", ("torch",)),
    Template("torchrun_2nodes", "torchrun_2nodes.sbatch", "train_ddp.py", ("torch",)),
    Template("lightning", "lightning.sbatch", "train_lightning.py", ("torch", "lightning")),
    Template("hf", "hf.sbatch", "train_hf.py", ("torch", "transformers")),
)

IGNORER = """#!/bin/bash
#SBATCH --comment=shockwave,epochs=1
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --gres=gpu:1
trap '' USR1
# never polls the checkpoint request: its first run would sleep 10 minutes, its second 2 s
exec {py} -m slurm_shockwave.wrapper.cli -- {py} -c \\
    'import os, time; time.sleep(600 if os.environ.get("SLURM_RESTART_COUNT", "0") == "0" else 2)' {tag}
"""


def available(t: Template) -> bool:
    if not (REPO / "job_templates" / t.script).exists():
        return False
    return subprocess.run([PY, "-c", "; ".join(f"import {m}" for m in t.modules)], capture_output=True).returncode == 0


class FrameworkLab:
    def __init__(self, root: Path):
        self.root = root
        self.store, self.work, self.hooks = root / "store", root / "work", root / "hooks"
        for d in (self.store, self.work, self.hooks):
            d.mkdir()
        os.chmod(self.store, 0o755)
        (self.store / "_system").mkdir(mode=0o755)
        (self.store / "users").mkdir(mode=0o755)
        for name in ("shockwave-hook.sh", "shockwave_hook.py"):
            shutil.copy2(REPO / "prolog_epilog" / name, self.hooks / name)
        shutil.copy2(REPO / "slurm_shockwave" / "slurm" / "hints.py", self.hooks / "shockwave_hints.py")
        shutil.copy2(REPO / "slurm_shockwave" / "events" / "layout.py", self.hooks / "shockwave_layout.py")
        (self.hooks / "shockwave-hook.conf").write_text(
            f"SHOCKWAVE_STORE={self.store}\nSHOCKWAVE_HOOK_LOG={self.hooks / 'hook.log'}\n"
        )
        hook = self.hooks / "shockwave-hook.sh"
        conf = [f"Prolog={hook}", f"Epilog={hook}", f"PrologSlurmctld={hook}", f"EpilogSlurmctld={hook}",
                "PrologFlags=Alloc"]
        # KillWait as Slurm's default: the SIGTERM of a requeue leaves the workers time to checkpoint
        self.cluster = LocalCluster(root=root / "cluster", nodes=2, gpus_per_node=8, cpus_per_node=16,
                                    kill_wait=30, extra_conf=conf)
        self.reader = EventReader(self.store, system_uids=(0,))

    def env(self) -> dict[str, str]:
        return {**self.cluster.full_env(), "SHOCKWAVE_PYTHON": PY, "SHOCKWAVE_STORE": str(self.store),
                "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
                "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}

    def step_log(self, name: str) -> Path:
        return self.work / f"steps-{name}.log"

    def submit(self, t: Template, *sbatch_args: str) -> int:
        args = ["--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS), "--step-time", str(STEP_TIME),
                "--step-log", str(self.step_log(t.name))]
        return self._sbatch([*sbatch_args, f"--job-name=fw-{t.name}", str(REPO / "job_templates" / t.sbatch), *args])

    def submit_ignorer(self) -> int:
        script = self.work / "ignorer.sh"
        script.write_text(IGNORER.format(py=PY, tag=self.work / "ignorer"))
        return self._sbatch(["--job-name=fw-ignorer", str(script)])

    def _sbatch(self, argv: list[str]) -> int:
        r = self.cluster.run(["sbatch", "--parsable", "-D", str(self.work), "-o", str(self.work / "out.%j"), *argv],
                             env=self.env())
        assert r.returncode == 0, r.stderr
        return int(r.stdout.strip().split(";")[0])

    def events(self, job: int):
        return self.reader.read_job(str(job), expected_uid=0).events

    def steps(self, name: str) -> list[tuple[int, int]]:
        p = self.step_log(name)
        if not p.exists():
            return []
        text = p.read_text()
        lines = text.splitlines()[: text.count("\n")]  # a line still being written is not read
        return [(int(a), int(b)) for a, b in (ln.split() for ln in lines if ln.strip())]

    def output(self, job: int) -> str:
        p = self.work / f"out.{job}"
        return p.read_text(errors="replace") if p.exists() else "(no output)"

    def processes(self, needle: str) -> list[str]:
        """pid + command line of every live process whose command line contains ``needle``."""
        out = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = next((ln for ln in (d / "status").read_text().splitlines() if ln.startswith("State:")), "")
            except OSError:
                continue
            if needle in cmd and "zombie" not in state:
                out.append(f"{d.name} {cmd[:300]}")
        return out

    def status_json(self, state_dir: Path) -> dict:
        r = subprocess.run([PY, "-m", "slurm_shockwave", "status", "--state-dir", str(state_dir), "--json"],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)


class Preempting(Policy):
    """Plans every job except those the test is preempting (see the module docstring)."""

    name = "preempting"

    def __init__(self):
        self.off: set[int] = set()

    def decide(self, view):
        return RoundDecision(run=tuple(j.job_id for j in view.jobs if int(j.job_id) not in self.off))
