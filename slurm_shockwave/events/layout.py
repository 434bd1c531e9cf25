"""The event store on disk: where the files are, their modes, and what one line may hold.

Layout under the store root (docs/event-schema.md, "Layout and permissions")::

    <root>/                                  0755, owner root (NOT world-writable)
    <root>/users/                            0755, owner root
    <root>/users/<uid>/                      0755, owner <uid>; created by root (the prolog hook, or the admin)
    <root>/users/<uid>/<jobid>/events.jsonl  by the job (wrapper + training API), owned by <uid>
    <root>/_system/<jobid>.jsonl             by the Slurm prolog/epilog hooks, owned by root / SlurmUser

Shared by the package (events/schema.py, store.py, reader.py) and the Slurm prolog/epilog hook
(prolog_epilog/shockwave_hook.py), which loads this file by path, from a copy next to it or from the source
checkout: so it is standard library only and imports nothing of the package.
"""

import json

SCHEMA_VERSION = 1
#: Maximum encoded line length in bytes, newline included.  Writers refuse longer
#: lines; readers reject them.  4096 = Linux PIPE_BUF, small enough for one write(2).
MAX_LINE_BYTES = 4096
#: Upper bound for batch sizes and epoch counts ("absurd" above).
MAX_COUNT = 10_000_000

SYSTEM_DIR = "_system"
USERS_DIR = "users"
EVENTS_NAME = "events.jsonl"
SYSTEM_SUFFIX = ".jsonl"
DIR_MODE = 0o755
FILE_MODE = 0o644
#: mode bits that let group or others write: a file or directory with any of them is never trusted
WRITABLE_BY_OTHERS = 0o022

#: a Slurm job id: 123, or 123_4 for a task of an array
SLURM_JOB_ID = r"[0-9]{1,15}(?:_[0-9]{1,9})?"
#: a run outside Slurm (the wrapper's own id)
LOCAL_JOB_ID = r"local-[0-9]{1,24}"

# field name -> (type, min, max).  type is "int", "num" (int or float) or "str" (max = max length).
FIELD_SPECS = {
    "restart": ("int", 0, 100_000),
    "epoch": ("int", 0, MAX_COUNT),
    "step": ("int", 0, 1e12),
    "total_epochs": ("int", 1, MAX_COUNT),
    "samples_per_epoch": ("int", 1, 1e12),
    "samples": ("int", 0, 1e12),
    "batch_size": ("int", 1, MAX_COUNT),
    "old_batch_size": ("int", 1, MAX_COUNT),
    "min_batch_size": ("int", 1, MAX_COUNT),
    "max_batch_size": ("int", 1, MAX_COUNT),
    "gpus": ("int", 0, 100_000),
    "duration_s": ("num", 1e-6, 1e7),
    "throughput": ("num", 1e-9, 1e10),
    "throughput_bs": ("int", 1, MAX_COUNT),
    "throughput_gpus": ("int", 0, 100_000),
    "gns": ("num", 0, 1e12),
    "peak_mem_bytes": ("int", 0, 1e16),
    "exit_code": ("int", -255, 255),
    "signal": ("int", 0, 128),
    "pid": ("int", 1, 2**31),
    "path": ("str", 1, 1024),
    "reason": ("str", 0, 256),
    "host": ("str", 1, 255),
    "source": ("str", 1, 64),
}


def system_file_name(job_id: str) -> str:
    """The name of the hooks' event file of a job, in ``<root>/_system/``."""
    return job_id + SYSTEM_SUFFIX


def encode_line(record) -> bytes:
    """JSON-encode one record as a single newline-terminated line (<= MAX_LINE_BYTES)."""
    data = (json.dumps(record, separators=(",", ":"), ensure_ascii=True, allow_nan=False) + "\n").encode("ascii")
    if len(data) > MAX_LINE_BYTES:
        raise ValueError(f"event line is {len(data)} bytes, over the {MAX_LINE_BYTES}-byte cap")
    return data
