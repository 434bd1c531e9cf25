"""Run the controller (as `shockwave controller run` does) with a kill switch on its Slurm calls.

    python -m tests.safety_ctl CONFIG [KILL]

$SAFETY_POLICY=rotate replaces the configured policy by `Rotate` (below).  $SAFETY_READY: a file written
once the signal handlers are installed.

KILL = "TOKEN:N:before|after": SIGKILL this process right before / right after the N-th Slurm command
whose argv contains TOKEN (an argv item equal to TOKEN or starting with it; "AdminComment=" alone matches
only the clearing of a mark).  Every Slurm command is appended to $SAFETY_CALL_LOG (one line each,
"pid ok|err argv"), and "KILL <spec>" right before the kill, so the test knows where it struck.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys

from solver.types import Policy, RoundDecision
from slurm_shockwave.controller.config import load_config
from slurm_shockwave.controller.daemon import Controller, make_cli


class Rotate(Policy):
    """Round robin over the managed jobs (fewest rounds planned first, then least progress): with more jobs
    than GPUs, running jobs lose their round all the time, so preemptions happen every few seconds."""
    name = "rotate"

    def __init__(self):
        self.planned: dict = {}

    def decide(self, view):
        free, run = view.num_gpus, []
        for j in sorted(view.jobs, key=lambda j: (self.planned.get(j.job_id, 0), j.epochs_done, str(j.job_id))):
            if j.num_gpus <= free:
                run.append(j.job_id)
                free -= j.num_gpus
        for j in run:
            self.planned[j] = self.planned.get(j, 0) + 1
        return RoundDecision(run=tuple(run), info={"jobs": {j.job_id: {"reason": "rotation: waits its turn"}
                                                            for j in view.jobs if j.job_id not in run}})


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
        hit = token is not None and _matches(token, argv) and seen[0] + 1 == n
        if token is not None and _matches(token, argv):
            seen[0] += 1
        if hit and when == "before":
            die()
        try:
            proc = subprocess.run(argv, **kw)
        except Exception:
            note("err " + " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv)))
            raise
        note(("ok " if proc.returncode == 0 else "err ") +
             " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv))[:300])
        if hit and when == "after":
            die()
        return proc
    return runner


def main(argv) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = load_config(argv[0])
    cli = make_cli(cfg)
    cli.runner = killing_runner(argv[1] if len(argv) > 1 and argv[1] != "none" else None,
                                os.environ.get("SAFETY_CALL_LOG"))
    ctl = Controller(cfg, cli=cli)
    if os.environ.get("SAFETY_POLICY") == "rotate":
        ctl.loop.policy = ctl.policy = Rotate()
    ctl.install_signal_handlers()
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
