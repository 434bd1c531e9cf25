#!/bin/bash
# The replay's emulated training job (shockwave_lab/replay/emujob.py) under the training wrapper, as the
# job templates run a real program: ignore the checkpoint signal until the wrapper installs its handler, then
# exec the wrapper so that it IS the batch shell and receives the B:USR1 signal itself.
#   sbatch ... emujob.sh --spec JOB.json --timeline FILE
# Environment: SHOCKWAVE_PYTHON (python with slurm_shockwave), SHOCKWAVE_STORE (the event store).
set -u
trap '' USR1
py="${SHOCKWAVE_PYTHON:-python3}"
exec "$py" -m slurm_shockwave.wrapper.cli -- "$py" -m shockwave_lab.replay.emujob "$@"
