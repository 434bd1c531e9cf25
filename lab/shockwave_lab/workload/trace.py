"""The reference `.trace` format: 12 tab-separated fields per line, no header.

job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps, scale_factor, mode,
priority_weight, SLO, duration_s, arrival_time_s
"""
from __future__ import annotations

from pathlib import Path

from slurm_shockwave.loader import read_text
from shockwave_lab.workload.errors import WorkloadError
from shockwave_lab.workload.jobs import MODES, JobSpec
from shockwave_lab.workload.models import DATASET_SIZE, MAX_BATCH_SIZE, model_of

FIELDS = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps",
          "scale_factor", "mode", "priority_weight", "SLO", "duration_s", "arrival_time_s")


def read_trace(path, num_gpus: int | None = None, throughputs=None) -> list[JobSpec]:
    """Parse a trace; every problem is a WorkloadError naming file, line and field."""
    path = Path(path)
    text = read_text(path)
    jobs: list[JobSpec] = []
    last_arrival = 0.0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != len(FIELDS):
            missing = FIELDS[len(parts)] if len(parts) < len(FIELDS) else "line"
            raise WorkloadError(path, lineno, missing,
                                f"expected {len(FIELDS)} tab-separated fields, found {len(parts)}")
        rec = dict(zip(FIELDS, parts))
        model = model_of(rec["job_type"])
        if model not in DATASET_SIZE:
            raise WorkloadError(path, lineno, "job_type", f"unknown model {model!r}")
        try:
            bs = int(rec["job_type"].split("(batch size ", 1)[1].rstrip(")"))
        except (IndexError, ValueError):
            raise WorkloadError(path, lineno, "job_type", "expected '<model> (batch size B)'") from None
        total_steps = _number(path, lineno, rec, "total_steps", int)
        sf = _number(path, lineno, rec, "scale_factor", int)
        weight = _number(path, lineno, rec, "priority_weight", float)
        arrival = _number(path, lineno, rec, "arrival_time_s", float)
        mode = rec["mode"].strip()
        if total_steps <= 0:
            raise WorkloadError(path, lineno, "total_steps", f"must be positive, got {total_steps}")
        if sf <= 0:
            raise WorkloadError(path, lineno, "scale_factor", f"GPUs must be positive, got {sf}")
        if num_gpus is not None and sf > num_gpus:
            raise WorkloadError(path, lineno, "scale_factor", f"asks for {sf} GPUs but the cluster has {num_gpus}")
        if mode not in MODES:
            raise WorkloadError(path, lineno, "mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
        if weight <= 0:
            raise WorkloadError(path, lineno, "priority_weight", f"must be positive, got {weight}")
        if arrival < 0 or arrival < last_arrival:
            raise WorkloadError(path, lineno, "arrival_time_s", "arrivals must be non-negative and sorted")
        if throughputs is not None and throughputs.get(model, bs, sf) is None:
            raise WorkloadError(path, lineno, "job_type",
                                f"no throughput for {rec['job_type']!r} on {sf} GPU(s) in {throughputs.source}")
        last_arrival = arrival
        jobs.append(JobSpec(job_id=len(jobs), arrival_time=arrival, model=model, initial_bs=bs, num_gpus=sf,
                            mode=mode, total_steps=total_steps, weight=weight,
                            max_bs=MAX_BATCH_SIZE.get(model)))
    if not jobs:
        raise WorkloadError(path, 0, "file", "no jobs")
    return jobs


def _number(path, lineno, rec, field, kind):
    try:
        return kind(float(rec[field])) if kind is int else kind(rec[field])
    except ValueError:
        raise WorkloadError(path, lineno, field, f"not a number: {rec[field]!r}") from None
