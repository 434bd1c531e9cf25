"""Alibaba PAI 2020 (NSDI '22, "MLaaS in the Wild"): `cluster-trace-gpu-v2020/data/pai_job_table.csv` with
`pai_task_table.csv` (`--tasks`), from `alibaba/clusterdata` (the data itself from Aliyun OSS, see its README).

Both files have no header line (the repository ships it apart, `*.header`; a first row equal to it is skipped):
job table `job_name, inst_id, user, status, start_time, end_time`; task table `job_name, task_name, inst_num,
status, start_time, end_time, plan_cpu, plan_mem, plan_gpu, gpu_type`.  Times are seconds on a shifted clock.

A job is a row of the job table: its arrival is the job's `start_time` (PAI's submission time), its run time the
span of its tasks (the latest task end_time - the earliest task start_time), its GPUs the sum over its tasks of
`inst_num x plan_gpu / 100` (plan_gpu 100 = one GPU; a fraction is rounded up or dropped, --fractional), its GPU
type its GPU tasks' `gpu_type` when they name one (lower case; `misc` = older generations), its user `user`.
Status Terminated or Failed: finished; Running: still running; Waiting: never started.  PAI has no accounts and says
nothing of preemption.  A job with no row in the task table is dropped ("no tasks"); task rows of jobs not in the job
table are counted as dropped ("tasks of unknown jobs").
"""

from __future__ import annotations

from pathlib import Path

from shockwave_lab.imports.common import Row, Tally, csv_rows, missing, name, number, span
from shockwave_lab.workload.errors import WorkloadError

JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)


def read(path, tally: Tally, tasks=None) -> list[Row]:
    path = Path(path)
    if tasks is None:
        raise WorkloadError(path, 0, "--tasks", "Alibaba PAI needs the task table too (--tasks pai_task_table.csv)")
    tasks = Path(tasks)
    by_job: dict[str, list] = {}
    for line, c in csv_rows(tasks, TASK_COLUMNS, names=TASK_COLUMNS):
        inst = number(tasks, line, "inst_num", c["inst_num"], hi=100_000)
        plan = number(tasks, line, "plan_gpu", c["plan_gpu"], hi=10_000) if not missing(c["plan_gpu"]) else 0.0
        start = None if missing(c["start_time"]) else number(tasks, line, "start_time", c["start_time"])
        end = None if missing(c["end_time"]) else number(tasks, line, "end_time", c["end_time"])
        if inst * plan / 100 > 100_000:
            raise WorkloadError(
                tasks,
                line,
                "plan_gpu",
                f"{inst:g} instances x {plan:g}% = {inst * plan / 100:g} GPUs is absurd (at most 100000)",
            )
        by_job.setdefault(c["job_name"].strip(), []).append(
            (line, inst * plan / 100, start, end, name(c["gpu_type"]) if plan > 0 else None)
        )
    out, seen = [], set()
    for line, c in csv_rows(path, JOB_COLUMNS, names=JOB_COLUMNS):
        job = c["job_name"].strip()
        seen.add(job)
        status = c["status"].strip().lower()
        if missing(c["start_time"]):
            raise WorkloadError(path, line, "start_time", f"missing (the job's submission time): {c['start_time']!r}")
        submit = number(path, line, "start_time", c["start_time"])
        parts = by_job.get(job)
        if not parts:
            tally.drop("no tasks")
            continue
        gpus = sum(p[1] for p in parts)
        types = {p[4].lower() for p in parts if p[4]}
        base = dict(
            id=job, submit=submit, gpus=gpus, user=name(c["user"]), gpu_type=types.pop() if len(types) == 1 else None
        )
        starts = [p[2] for p in parts if p[2] is not None]
        ends = [p[3] for p in parts if p[3] is not None]
        if status == "running":
            out.append(Row(runtime=None, unfinished=bool(starts), **base))
        elif status == "waiting" or not starts or not ends:
            out.append(Row(runtime=None, **base))
        elif status in ("terminated", "failed"):
            last = max((p for p in parts if p[3] is not None), key=lambda p: p[3])
            out.append(Row(runtime=span(tasks, last[0], "start_time", min(starts), "end_time", max(ends)), **base))
        else:
            raise WorkloadError(
                path, line, "status", f"expected Terminated, Failed, Running or Waiting, got {c['status']!r}"
            )
    unknown = sum(len(v) for k, v in by_job.items() if k not in seen)
    if unknown:
        tally.drop("tasks of unknown jobs", unknown)
    return out
