"""Run the controller (as `shockwave controller run` does) with a kill switch on its Slurm calls.

    python -m tests.safety_ctl CONFIG [KILL]

$SAFETY_POLICY=rotate replaces the configured policy by `Rotate` (below; $SAFETY_ROTATE_SLICE: rounds a plan
is kept, default 1; $SAFETY_ROTATE_STATE: a file keeping the rotation across restarts, default none).
$SAFETY_READY: a file written once the signal handlers are installed.

KILL = "TOKEN:N:before|after": SIGKILL this process right before / right after the N-th Slurm command
whose argv contains TOKEN (an argv item equal to TOKEN or starting with it; "AdminComment=" alone matches
only the clearing of a mark; the words of a command's standard input count as argv: a round's node pins are
one scontrol reading a line per job).  Every Slurm command is appended to $SAFETY_CALL_LOG (one line each,
"pid ok|err argv"), and "KILL <spec>" right before the kill, so the test knows where it struck.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys

from solver.types import JobPlan, Policy, RoundDecision
from slurm_shockwave.cli.controller import EarlyStop
from slurm_shockwave.controller.config import load_config
from slurm_shockwave.controller.daemon import Controller
from slurm_shockwave.slurm import SlurmCLI


class Rotate(Policy):
    """Round robin over the managed jobs (fewest rounds planned first, then least progress): with more jobs
    than GPUs, running jobs lose their round all the time, so preemptions happen every few seconds.

    ``slice_rounds`` (``$SAFETY_ROTATE_SLICE``, default 1): a plan is kept that many rounds (GPUs freed in
    between are filled in the usual order), so a job that lost its round stays off for a whole slice: with
    2 and fewer than twice as many jobs as GPUs, a job that ignores the checkpoint signal is still unplanned
    when its grace ends, and the controller requeues and holds it.

    ``state_path`` (``$SAFETY_ROTATE_STATE``, default none): where the rotation is kept across restarts of the
    controller (a JSON file written after every decision), so a restarted controller goes on with the same
    turns instead of planning afresh (a job that lost its round before a kill -9 is still off after it)."""
    name = "rotate"

    def __init__(self, slice_rounds: int = 1, state_path: str | None = None):
        self.planned: dict = {}
        self.slice_rounds = max(1, int(slice_rounds))
        self.current: list = []
        self.left = 0          # rounds the current plan is still kept
        self.state_path = state_path
        if state_path and os.path.exists(state_path):
            with open(state_path) as fh:
                saved = json.load(fh)
            self.planned, self.current, self.left = saved["planned"], saved["current"], saved["left"]

    def decide(self, view):
        free, run = view.num_gpus, []
        if self.left > 0:      # within a slice: the jobs of the plan keep their GPUs
            by_id = {str(j.job_id): j for j in view.jobs}
            for jid in self.current:
                j = by_id.get(jid)
                if j is not None and j.num_gpus <= free:
                    run.append(j.job_id)
                    free -= j.num_gpus
            self.left -= 1
        else:
            self.left = self.slice_rounds - 1
        for j in sorted(view.jobs, key=lambda j: (self.planned.get(str(j.job_id), 0), j.epochs_done, str(j.job_id))):
            if j.job_id not in run and j.num_gpus <= free:
                run.append(j.job_id)
                free -= j.num_gpus
        for j in run:
            self.planned[str(j)] = self.planned.get(str(j), 0) + 1
        self.current = [str(j) for j in run]
        if self.state_path:
            tmp = self.state_path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"planned": self.planned, "current": self.current, "left": self.left}, fh)
            os.replace(tmp, self.state_path)
        return RoundDecision(run=tuple(run), plans={j: JobPlan(j, rule="policy") for j in run})


def _matches(token: str, argv) -> bool:
    argv = [os.path.basename(argv[0]), *argv[1:]] if argv else []
    if token.endswith("="):
        return token in argv
    return any(a == token or a.startswith(token) for a in argv)


def killing_runner(spec: str | None, log_path: str | None):
    token, n, when = spec.rsplit(":", 2) if spec else (None, "0", "")
    n = int(n or 0)
    seen = [0]

    def note(text):
        if log_path:
            with open(log_path, "a") as fh:
                fh.write(f"{os.getpid()} {text}\n")

    def die():
        note(f"KILL {spec}")
        os.kill(os.getpid(), signal.SIGKILL)

    def runner(argv, **kw):
        words = [*argv, *(kw.get("input") or "").split()]
        hit = token is not None and _matches(token, words) and seen[0] + 1 == n
        if token is not None and _matches(token, words):
            seen[0] += 1
        if hit and when == "before":
            die()
        try:
            proc = subprocess.run(argv, **kw)
        except Exception:
            note("err " + " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv)))
            raise
        note(("ok " if proc.returncode == 0 else "err ") +
             " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(words))[:300])
        if hit and when == "after":
            die()
        return proc
    return runner


def main(argv) -> int:
    early = EarlyStop()           # first, as `shockwave controller run` does: a SIGTERM while starting stops cleanly
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = load_config(argv[0])
    cli = SlurmCLI.from_config(cfg)
    cli.runner = killing_runner(argv[1] if len(argv) > 1 and argv[1] != "none" else None,
                                os.environ.get("SAFETY_CALL_LOG"))
    ctl = Controller(cfg, cli=cli)
    if os.environ.get("SAFETY_POLICY") == "rotate":
        ctl.loop.policy = ctl.policy = Rotate(int(os.environ.get("SAFETY_ROTATE_SLICE") or 1),
                                              os.environ.get("SAFETY_ROTATE_STATE") or None)
    ctl.install_signal_handlers(early)
    if os.environ.get("SAFETY_READY"):
        with open(os.environ["SAFETY_READY"], "w") as fh:
            fh.write(str(os.getpid()))
    try:
        ctl.run()
    finally:
        ctl.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
