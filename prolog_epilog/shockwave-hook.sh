#!/bin/sh
# Shockwave hook for Slurm: use as Prolog, Epilog, PrologSlurmctld and EpilogSlurmctld.
# Runs shockwave_hook.py (next to this file) with a hard timeout and ALWAYS exits 0:
# a non-zero Prolog drains the node and requeues the job held.
# Python: $SHOCKWAVE_HOOK_PYTHON if set (tests), else /usr/bin/python3, else python3 on PATH.
dir=$(dirname "$0")
py=${SHOCKWAVE_HOOK_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
if command -v timeout >/dev/null 2>&1; then
    timeout -k 1 5 "$py" -I "$dir/shockwave_hook.py" </dev/null >/dev/null 2>&1
else
    "$py" -I "$dir/shockwave_hook.py" </dev/null >/dev/null 2>&1
fi
exit 0
