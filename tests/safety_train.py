"""A tiny training program for the fault tests (run under `shockwave-run`): EPOCHS epochs of EPOCH_S seconds
(sleeps), a checkpoint after every epoch and on the checkpoint signal, resume from the checkpoint.

    shockwave-run -- python tests/safety_train.py EPOCHS EPOCH_S

$SAFETY_CHECKPOINT_S: seconds a checkpoint on the signal takes (a slow checkpoint write; default 0).
Reports epoch_end events (batch size 32, 320 samples) and prints one line per epoch to stdout
("epoch E restart R"), so a test can check that no epoch is lost or repeated.
"""
from __future__ import annotations

import os
import sys
import time

from slurm_shockwave.wrapper import api
from slurm_shockwave.wrapper.checkpoint import CheckpointManager


def main(argv) -> int:
    epochs, epoch_s = int(argv[0]), float(argv[1])
    rep = api.get_reporter()                   # installs the checkpoint-signal handlers first
    api.configure(total_epochs=epochs)
    ckpt = CheckpointManager(reporter=rep)
    state = ckpt.load() or {"epoch": 0}
    start = int(state["epoch"])
    restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    # a program that ignores the checkpoint signal: only Slurm's SIGTERM (the controller's requeue) stops it
    ignore_signal = os.environ.get("SAFETY_IGNORE_CHECKPOINT_SIGNAL") == "1"
    slow = float(os.environ.get("SAFETY_CHECKPOINT_S") or 0)
    print(f"start restart={restart} resume epoch={start}", flush=True)
    for e in range(start, epochs):
        t0 = time.time()
        steps = 10
        for _ in range(steps):
            if api.should_exit() or (api.should_checkpoint() and not ignore_signal):
                time.sleep(slow)
                ckpt.save({"epoch": e}, epochs_done=e)   # the epoch in progress is redone after the restart
                print(f"checkpoint on signal at epoch={e}", flush=True)
                return 0
            time.sleep(epoch_s / steps)
        api.report_epoch(e, 32, 320, time.time() - t0)
        ckpt.save({"epoch": e + 1}, epochs_done=e + 1)
        print(f"epoch {e} restart {restart}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
