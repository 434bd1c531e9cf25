"""Philly as the Pollux artifact ships it (OSDI '21): `simulator/traces/philly.csv` of `petuum/adaptdl` (branch
`osdi21-artifact`, Apache-2.0), a per-job table the Pollux authors reduced from Philly's `cluster_job_log` (ATC '19,
Microsoft): 82,247 jobs submitted 2017-09-04 to 2017-12-22 (Pollux's `workload.py` samples its workloads from it).

Columns (header line): timestamp, duration, num_gpus, gpu_time, cluster.  A job is a row: arrival `timestamp`
(`YYYY-MM-DD HH:MM:SS`, the submission time as Pollux's `workload.py` reads it; no zone: only differences are
used), run time `duration` (seconds: the artifact does not say how it was derived from the job's attempts), GPUs
`num_gpus`, account `cluster` (the hash of Philly's virtual cluster, the `vc` of the `philly` format).  `gpu_time` is
`duration x num_gpus`: a row where it is not (beyond a second per GPU) is bad input.  The table has no job id (a job
is named `philly-<line>`, its line in the file), **no user** (each job is the job spec's default user), no GPU type,
nothing on preemption; every row ran (no state column).
"""

from __future__ import annotations

from pathlib import Path

from shockwave_lab.imports.common import Row, Tally, csv_rows, gpus, name, number, stamp
from shockwave_lab.workload.errors import WorkloadError

COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


def read(path, tally: Tally) -> list[Row]:
    path = Path(path)
    out = []
    for line, cell in csv_rows(path, COLUMNS):
        submit = stamp(path, line, "timestamp", cell["timestamp"])
        if submit is None:
            raise WorkloadError(path, line, "timestamp", f"missing: {cell['timestamp']!r}")
        runtime = number(path, line, "duration", cell["duration"])
        count = gpus(path, line, "num_gpus", cell["num_gpus"])
        if count != int(count):
            raise WorkloadError(path, line, "num_gpus", f"not a whole number: {cell['num_gpus']!r}")
        gpu_time = number(path, line, "gpu_time", cell["gpu_time"], hi=1e15)
        if abs(gpu_time - runtime * count) > max(count, 1):
            raise WorkloadError(
                path, line, "gpu_time", f"{gpu_time:g} is not duration x num_gpus ({runtime:g} x {count:g})"
            )
        out.append(Row(id=f"philly-{line}", submit=submit, runtime=runtime, gpus=count, account=name(cell["cluster"])))
    return out
