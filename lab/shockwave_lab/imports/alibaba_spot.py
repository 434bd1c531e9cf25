"""Alibaba spot GPU trace 2026 (ASPLOS '26, GFS): `cluster-trace-v2026-spot-gpu/job_info_df.csv` from
`alibaba/clusterdata`.

Columns (header line): job_name, organization, gpu_model, cpu_request, gpu_request, worker_num, submit_time,
duration, job_type.  `submit_time` is seconds after the first job's submission, `duration` the job's run time in
seconds (the trace has no start time: every row ran, and `duration` is its run time); GPUs = `gpu_request` (per
worker) x `worker_num`; the GPU type is `gpu_model` (lower case, e.g. `a100-sxm4-80gb`); the account is the cost
`organization`, which is also the user (the trace names no users).  `job_type` HP (high priority, strict SLO) may
not be preempted; Spot runs on spot instances and may be.
"""

from __future__ import annotations

from pathlib import Path

from shockwave_lab.imports.common import Row, Tally, csv_rows, gpus, name, number
from shockwave_lab.workload.errors import WorkloadError

COLUMNS = ("job_name", "organization", "gpu_model", "gpu_request", "worker_num", "submit_time", "duration", "job_type")
PREEMPTIBLE = {"hp": False, "spot": True}


def read(path, tally: Tally) -> list[Row]:
    path = Path(path)
    out = []
    for line, cell in csv_rows(path, COLUMNS):
        kind = cell["job_type"].strip().lower()
        if kind not in PREEMPTIBLE:
            raise WorkloadError(path, line, "job_type", f"expected HP or Spot, got {cell['job_type']!r}")
        per_worker = gpus(path, line, "gpu_request", cell["gpu_request"])
        workers = gpus(path, line, "worker_num", cell["worker_num"])
        if workers != int(workers):
            raise WorkloadError(path, line, "worker_num", f"not a whole number: {cell['worker_num']!r}")
        total = per_worker * workers
        if total > 100_000:
            raise WorkloadError(
                path,
                line,
                "gpu_request",
                f"{per_worker:g} x {workers:g} workers = {total:g} GPUs is absurd (at most 100000)",
            )
        org = name(cell["organization"])
        gpu_type = name(cell["gpu_model"])
        out.append(
            Row(
                id=cell["job_name"].strip() or str(line),
                submit=number(path, line, "submit_time", cell["submit_time"]),
                runtime=number(path, line, "duration", cell["duration"]),
                gpus=total,
                user=org,
                account=org,
                gpu_type=gpu_type.lower() if gpu_type else None,
                preemptible=PREEMPTIBLE[kind],
            )
        )
    return out
