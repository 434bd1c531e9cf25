"""`sacct -P` (parsable, `|`-separated, with its header line) from a site's own Slurm accounting.

Run it as

    sacct -a -X -D -P -S 2024-01-01 -E now -o JobID,User,Account,State,Submit,Start,End,AllocTRES,ReqTRES,Timelimit

Columns are found by name in the header (any order, others ignored): JobID, Submit, Start, End, State and AllocTRES
are required; ReqTRES, User, Account and Timelimit are read when present.  GPUs are the `gres/gpu=N` of AllocTRES
(a typed `gres/gpu:a100=N` gives the type).  A step row (`123.batch`, without -X) is not a job: it is counted as dropped.
Times are read as sacct prints them (local time, no zone: only differences are used).  The runs of a job, its
requeues and array tasks: shockwave_lab/imports/slurm_runs.py.
"""

from __future__ import annotations

from pathlib import Path

from shockwave_lab.imports.common import Row, Tally, gpus, name, stamp, time_limit
from shockwave_lab.imports.slurm_runs import Run, rows_of, state_word
from shockwave_lab.workload.errors import WorkloadError
from slurm_shockwave.loader import read_text

REQUIRED = ("JobID", "State", "Submit", "Start", "End", "AllocTRES")


def read(path, tally: Tally) -> list[Row]:
    path = Path(path)
    lines = read_text(path).splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        raise WorkloadError(path, 0, "file", "empty (expected sacct -P output with its header line)")
    header = lines[first].split("|")
    col = {h.strip(): i for i, h in enumerate(header)}
    lacking = [c for c in REQUIRED if c not in col]
    if lacking:
        raise WorkloadError(
            path,
            first + 1,
            "header",
            f"missing column(s) {', '.join(lacking)} (run sacct -P with "
            "-o JobID,User,Account,State,Submit,Start,End,AllocTRES,ReqTRES,Timelimit)",
        )
    runs = []
    for i in range(first + 1, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != len(header):
            raise WorkloadError(
                path, i + 1, "row", f"expected {len(header)} |-separated fields, found {len(cells)} (a truncated file?)"
            )
        cell = {h: cells[j] for h, j in col.items()}
        job = cell["JobID"].strip()
        if not job:
            raise WorkloadError(path, i + 1, "JobID", "empty")
        if "." in job:
            tally.drop("job steps")
            continue
        submit = stamp(path, i + 1, "Submit", cell["Submit"])
        if submit is None:
            raise WorkloadError(path, i + 1, "Submit", f"missing: {cell['Submit']!r}")
        alloc = cell["AllocTRES"].strip()
        alloc_gpus, gpu_type = tres_gpus(path, i + 1, "AllocTRES", alloc) if alloc else (None, None)
        runs.append(
            Run(
                id=job,
                line=i + 1,
                state=state_word(cell["State"]),
                submit=submit,
                start=stamp(path, i + 1, "Start", cell["Start"]),
                end=stamp(path, i + 1, "End", cell["End"]),
                alloc_gpus=alloc_gpus,
                gpu_type=gpu_type,
                req_gpus=tres_gpus(path, i + 1, "ReqTRES", cell.get("ReqTRES", ""))[0],
                user=name(cell.get("User")),
                account=name(cell.get("Account")),
                limit=time_limit(path, i + 1, "Timelimit", cell.get("Timelimit")),
            )
        )
    return rows_of(runs, path)


def tres_gpus(path, line, field: str, text: str) -> tuple[int, str | None]:
    """(GPUs, type or None) of a TRES string such as `billing=2,cpu=1,gres/gpu=2,gres/gpu:a100=2,node=1`: the
    untyped `gres/gpu` count when present, else the sum of the typed ones; the type when exactly one is named."""
    total, typed, kinds = None, 0, []
    for part in (text or "").split(","):
        key, _, value = part.strip().partition("=")
        if key == "gres/gpu" or key.startswith("gres/gpu:"):
            n = gpus(path, line, field, value)
            if n != int(n):
                raise WorkloadError(path, line, field, f"not a whole GPU count: {value!r}")
            if key == "gres/gpu":
                total = int(n)
            else:
                typed += int(n)
                kinds.append(key.split(":", 1)[1])
    return (total if total is not None else typed), (kinds[0].lower() if len(set(kinds)) == 1 else None)
