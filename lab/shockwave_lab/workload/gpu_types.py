"""A simulated cluster's GPU types: `--gpus 32` (one untyped pool) or `--gpus v100:16,p100:8,k80:8` (several).

* One untyped pool (`solver.types.GPU`) runs every job at the throughput file's `v100` column, as the reference.
* Several types: each type runs at its own column of the same Gavel-format file (k80, p100, v100, ...).  Jobs are
  still read and checked against the `v100` column (BASE: a trace's steps and a profile's exclusive times are
  defined on it), then each job gets its **reference type**: among the types it can run on (`allowed`: its
  requested type, else every type with room for its gang and a throughput at its first batch size), the one on
  which its batch-size schedule runs fastest alone.  Its exclusive run time (the rho and FTF denominator, the
  lower bound's work, the deadline guard's clock) is the one on that type: the BASE column's value scaled by the
  schedule's run time on the reference type over that on BASE (`retype`).  Alone on the cluster a job would
  take its fastest type, so a fair share is measured against it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from solver.types import GPU

from shockwave_lab.workload.errors import WorkloadError
from shockwave_lab.workload.profiles import schedule_of
from shockwave_lab.workload.throughputs import ThroughputTable

BASE = "v100"     # the column of the untyped pool and of every workload's lengths


def parse_gpus(text) -> int | dict[str, int]:
    """`32` -> 32; `v100:16,p100:8` -> {"v100": 16, "p100": 8}.  ValueError (one line) on anything else."""
    text = str(text).strip()
    if ":" not in text:
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"--gpus: expected a number or TYPE:N,TYPE:N,..., got {text!r}") from None
        if n <= 0:
            raise ValueError(f"--gpus must be positive, got {n}")
        return n
    out: dict[str, int] = {}
    for part in text.split(","):
        name, _, count = part.strip().partition(":")
        try:
            n = int(count)
        except ValueError:
            n = 0
        if not name or n <= 0 or name in out or name == GPU:
            raise ValueError(f"--gpus: expected TYPE:N with a new type name and N >= 1 for each type, got {part!r}")
        out[name] = n
    return out


def capacity_of(gpus) -> dict[str, int]:
    """{type: GPUs} of `gpus` (a number: one untyped pool)."""
    if isinstance(gpus, Mapping):
        return {str(t): int(n) for t, n in gpus.items()}
    return {GPU: int(gpus)}


def typed(capacity: Mapping[str, int]) -> bool:
    return set(capacity) != {GPU}


def tables_for(throughputs, capacity: Mapping[str, int]) -> tuple[ThroughputTable, dict[str, ThroughputTable]]:
    """(the BASE column, {type: its column}) for a cluster.  `throughputs`: a file, a ThroughputTable (the BASE
    column: one untyped pool only) or {type: ThroughputTable} holding BASE and every type of the cluster."""
    if isinstance(throughputs, Mapping):
        missing = [t for t in [BASE, *capacity] if t != GPU and t not in throughputs]
        if missing:
            raise ValueError(f"throughput tables missing for {missing} (a typed cluster needs {BASE}, the "
                             "workload's column, and each of its types)")
        base = throughputs[BASE]
        return base, {t: base if t == GPU else throughputs[t] for t in capacity}
    base = throughputs if isinstance(throughputs, ThroughputTable) else ThroughputTable.load(throughputs, BASE)
    if not typed(capacity):
        return base, {GPU: base}
    if isinstance(throughputs, ThroughputTable):
        raise ValueError("a cluster of several GPU types needs the throughputs file (one column per type)")
    return base, {t: base if t == BASE else ThroughputTable.load(throughputs, t) for t in capacity}


def schedule_time(job, table: ThroughputTable) -> float:
    """Seconds the job's batch-size schedule takes alone on its gang in `table` (inf: not profiled there)."""
    total = 0.0
    for bs in schedule_of(job):
        thr = table.get(job.model, bs, job.num_gpus) or table.get(job.model, job.initial_bs, job.num_gpus)
        if not thr:
            return math.inf
        total += (job.samples / bs) / thr
    return total


def allowed(job, tables: Mapping[str, ThroughputTable], capacity: Mapping[str, int]) -> list[str]:
    """The types the job can run on: its requested one, else those with room for its gang and a throughput."""
    types = [job.gpu_type] if job.gpu_type is not None else sorted(capacity)
    return [t for t in types if t in capacity and capacity[t] >= job.num_gpus
            and tables[t].get(job.model, job.initial_bs, job.num_gpus)]


def reference_type(job, tables: Mapping[str, ThroughputTable], capacity: Mapping[str, int]) -> str | None:
    """The allowed type its schedule runs fastest on (ties: the larger type, then by name); None: no type."""
    times = {t: schedule_time(job, tables[t]) for t in allowed(job, tables, capacity)}
    times = {t: x for t, x in times.items() if math.isfinite(x)}
    return min(times, key=lambda t: (times[t], -capacity[t], t)) if times else None


def cluster_gpus(job, tables: Mapping[str, ThroughputTable], capacity: Mapping[str, int], ref: str) -> float:
    """The cluster's GPUs counted at the job's speed: sum over the types it can run on of GPUs x its throughput
    there / on its reference type (at its gang and first batch size).  Its equal share of every type gives it
    this many reference-type GPUs' worth of progress (the dynamic FTF's G, docs/fairness.md)."""
    speed = {t: tables[t].get(job.model, job.initial_bs, job.num_gpus) or 0.0 for t in allowed(job, tables, capacity)}
    return sum(capacity[t] * x / speed[ref] for t, x in speed.items()) if speed.get(ref) else float(capacity[ref])


def retype(jobs, base: ThroughputTable, tables: Mapping[str, ThroughputTable], capacity: Mapping[str, int]) -> list:
    """The jobs with their exclusive run time on their reference type; WorkloadError for a job that fits no type."""
    out = []
    for job in jobs:
        ref = reference_type(job, tables, capacity)
        if ref is None:
            want = f"{job.gpu_type} GPUs" if job.gpu_type else "GPUs of one type"
            raise WorkloadError("--gpus", 0, f"job {job.job_id}",
                                f"{job.num_gpus} {want} with a throughput for {job.job_type} do not exist in "
                                f"{dict(capacity)}")
        on_base = schedule_time(job, base)
        scale = schedule_time(job, tables[ref]) / on_base if math.isfinite(on_base) and on_base > 0 else 1.0
        out.append(dataclasses.replace(job, isolated_runtime=job.isolated_runtime * scale))
    return out
