"""Philly (ATC '19, Microsoft): `cluster_job_log` from `msr-fiddle/philly-traces` (trace-data.tar.gz), a JSON list
of jobs.

Per job: `jobid`, `user` (a hash), `vc` (the virtual cluster: the account), `status` (Pass, Killed, Failed),
`submitted_time` and `attempts`, each with `start_time`, `end_time` (`YYYY-MM-DD HH:MM:SS`, no zone: only
differences are used) and `detail`, a list of `{ip, gpus: [...]}`.  Philly retries a job in a new attempt (often
on other machines): the run that counts is the last attempt, as sacct's last run; its run time is its end_time -
start_time and its GPUs are the GPUs it held (the sum of `len(gpus)` over its `detail`).  No attempt: never started;
a last attempt without end_time: still running when the trace was taken (the trace's own note); without
start_time: a logging error the trace warns of, dropped as "no start time logged".  Every status ran.  The trace has
no GPU type and says nothing of preemption.
"""

from __future__ import annotations

from pathlib import Path

from shockwave_lab.imports.common import Row, Tally, missing, name, span, stamp
from shockwave_lab.workload.errors import WorkloadError
from slurm_shockwave.loader import parse, read_text


def read(path, tally: Tally) -> list[Row]:
    path = Path(path)
    data = parse(read_text(path), path, "json")
    if not isinstance(data, list):
        raise WorkloadError(path, 0, "file", "expected a JSON list of jobs (Philly's cluster_job_log)")
    out = []
    for i, job in enumerate(data):
        loc = f"{path} (job {i})"
        if not isinstance(job, dict):
            raise WorkloadError(loc, 0, "job", "expected an object")
        for key in ("jobid", "submitted_time", "attempts"):
            if key not in job:
                raise WorkloadError(loc, 0, key, "missing")
        submit = stamp(loc, 0, "submitted_time", job["submitted_time"])
        if submit is None:
            raise WorkloadError(loc, 0, "submitted_time", f"missing: {job['submitted_time']!r}")
        attempts = job["attempts"]
        if not isinstance(attempts, list):
            raise WorkloadError(loc, 0, "attempts", "expected a list")
        base = dict(id=str(job["jobid"]), submit=submit, user=name(job.get("user")), account=name(job.get("vc")))
        if not attempts:
            out.append(Row(runtime=None, gpus=1, **base))  # never started (GPUs unknown: counted so)
            continue
        k = len(attempts) - 1
        last = attempts[k]
        if not isinstance(last, dict):
            raise WorkloadError(loc, 0, f"attempts[{k}]", "expected an object")
        gpus = _gpus(loc, k, last.get("detail"))
        start = stamp(loc, 0, f"attempts[{k}].start_time", last.get("start_time"))
        end = stamp(loc, 0, f"attempts[{k}].end_time", last.get("end_time"))
        if start is None:
            tally.drop("no start time logged")
            continue
        if missing(last.get("end_time")):
            out.append(Row(runtime=None, gpus=gpus, unfinished=True, **base))
            continue
        out.append(
            Row(
                runtime=span(loc, 0, f"attempts[{k}].start_time", start, f"attempts[{k}].end_time", end),
                gpus=gpus,
                **base,
            )
        )
    return out


def _gpus(loc, k, detail) -> int:
    if detail is None:
        return 0
    if not isinstance(detail, list) or not all(
        isinstance(d, dict) and isinstance(d.get("gpus", []), list) for d in detail
    ):
        raise WorkloadError(loc, 0, f"attempts[{k}].detail", "expected a list of {ip, gpus: [...]} objects")
    n = sum(len(d.get("gpus", [])) for d in detail)
    if n > 100_000:
        raise WorkloadError(loc, 0, f"attempts[{k}].detail", f"{n} GPUs is absurd (at most 100000)")
    return n
