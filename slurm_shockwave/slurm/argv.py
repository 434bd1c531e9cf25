"""The arguments of Slurm's commands (slurm/commands.py): validated job ids and ``Key=Value`` fields, and job lists cut
into the batches of one call each."""

from __future__ import annotations

import re
from collections.abc import Iterable

_JOB_ID_RE = re.compile(r"^\d+(_\d+)?$")
_FIELD_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
#: the name of the reservation that keeps a restart's nodes, before its job id (slurm/reservations.py)
RESTART_RESERVATION = "shockwave-restart-"
#: ids per scontrol/scancel call; keeps argv far below ARG_MAX
BATCH_SIZE = 500


def job_ids_of(ids: Iterable[int | str]) -> list[str]:
    """Validate job ids (``123`` or array task ``123_4``) and return them as strings, deduplicated."""
    out: list[str] = []
    for job_id in ids:
        text = str(job_id).strip()
        if isinstance(job_id, bool) or not _JOB_ID_RE.match(text):
            raise ValueError(f"invalid Slurm job id: {job_id!r}")
        if text not in out:
            out.append(text)
    return out


def chunks(items: list[str], size: int = BATCH_SIZE) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


#: a job list longer than PARALLEL_MIN is split into up to PARALLEL scontrol calls run at once: slurmctld acts on
#: each job of a list as one RPC (1-3 ms each on 2 shared cores: a first round holds ~1,000 jobs), and several
#: scontrol processes overlap them (measured: 900 AdminComment updates 3.1 s in one call, 1.0-1.6 s in 4)
PARALLEL = 4
PARALLEL_MIN = 128


def split(ids: list[str]) -> list[list[str]]:
    if len(ids) <= PARALLEL_MIN:
        return chunks(ids)
    return chunks(ids, min(BATCH_SIZE, -(-len(ids) // PARALLEL)))


def field_arg(key: str, value: object) -> str:
    """``Key=Value`` for scontrol update; the key must be a plain identifier."""
    if not _FIELD_RE.match(key):
        raise ValueError(f"invalid scontrol field name: {key!r}")
    if isinstance(value, bool):
        value = "yes" if value else "no"
    text = str(value)
    if "\n" in text or "\0" in text:
        raise ValueError(f"value of {key} contains a newline or NUL")
    return f"{key}={text}"
