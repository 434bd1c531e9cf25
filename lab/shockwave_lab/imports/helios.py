"""Helios (SC '21, SenseTime): `data/<cluster>/cluster_log.csv`, taken from Slurm (only Venus is public).

Columns (header line): job_id, user, vc, gpu_num, cpu_num, node_num, state, submit_time, start_time, end_time,
duration, queue.  Times are `YYYY-MM-DD HH:MM:SS` (no zone: only differences are used).  A job is one row; its run
time is end_time - start_time (the trace's `duration` is that difference; it is not read), its GPUs `gpu_num`,
its user `user` and its account its virtual cluster `vc`.  Every final state (COMPLETED, CANCELLED, FAILED,
TIMEOUT, NODE_FAIL) ran; no start_time: never started.  The trace has no GPU type and says nothing of preemption.
Acme (shockwave_lab/imports/acme.py) has the same shape without `vc`.
"""

from __future__ import annotations

from pathlib import Path

from shockwave_lab.imports.common import Row, Tally, csv_rows, gpus, missing, name, span, stamp
from shockwave_lab.workload.errors import WorkloadError

COLUMNS = ("job_id", "user", "gpu_num", "state", "submit_time", "start_time", "end_time")
RUNNING = {"RUNNING", "SUSPENDED", "COMPLETING"}


def read(path, tally: Tally, account: str | None = "vc") -> list[Row]:
    """Rows of a Slurm-derived CSV trace; `account`: the column holding the account (None: the trace has none)."""
    path = Path(path)
    out = []
    for line, cell in csv_rows(path, COLUMNS + ((account,) if account else ())):
        jid = cell["job_id"].strip()
        if not jid:
            raise WorkloadError(path, line, "job_id", "empty")
        submit = stamp(path, line, "submit_time", cell["submit_time"])
        if submit is None:
            raise WorkloadError(path, line, "submit_time", f"missing: {cell['submit_time']!r}")
        start = stamp(path, line, "start_time", cell["start_time"])
        end = stamp(path, line, "end_time", cell["end_time"])
        state = cell["state"].strip().split(" ")[0].upper()
        running = state in RUNNING or (start is not None and missing(cell["end_time"]))
        out.append(
            Row(
                id=jid,
                submit=submit,
                runtime=None if running else span(path, line, "start_time", start, "end_time", end),
                gpus=gpus(path, line, "gpu_num", cell["gpu_num"]),
                user=name(cell["user"]),
                account=name(cell[account]) if account else None,
                unfinished=running,
            )
        )
    return out
