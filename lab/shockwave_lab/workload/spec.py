"""Our own job-spec format for new workloads (documented in docs/job-spec.md).

Each job is validated by the pydantic model `JobEntry` (strict types, no NaN/inf, bounds, unknown fields
rejected); the first problem is reported as one line naming file, line and field.

Accepted files:
- `.toml`: one `[[job]]` table per job (errors name the line of the job's `[[job]]` header);
- `.jsonl`: one JSON object per line (errors name that line);
- `.json`: `{"jobs": [ {...}, ... ]}` or a bare list (errors name the job's index).

Fields per job (required: model, batch_size, and one of epochs/total_steps):
  id, arrival (s, default 0), model, batch_size, gpus (default 1), mode (static|gns|accordion),
  epochs | total_steps, samples_per_epoch, user, account, weight (> 0), max_batch_size, gpu_type, preemptible,
  gpus_range = [min, max]                (elastic: the GPU counts it may run on; gpus within them),
  gns_schedule = [[bs, n_epochs], ...]   (GNS: run-length target batch size per epoch),
  critical_epochs = [[start, stop), ...] (Accordion: epochs in the critical, small-batch regime).
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from slurm_shockwave.loader import parse, read_text
from slurm_shockwave.validation import describe
from shockwave_lab.workload.errors import WorkloadError
from shockwave_lab.workload.jobs import JobSpec
from shockwave_lab.workload.models import DATASET_SIZE, MAX_BATCH_SIZE, steps_per_epoch

PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
T = TypeVar("T")
Pair = Annotated[list[T], Field(min_length=2, max_length=2)]


def read_spec(path, num_gpus: int | None = None, throughputs=None) -> list[JobSpec]:
    path = Path(path)
    text = read_text(path)
    entries = _entries(path, text)
    if not entries:
        raise WorkloadError(path, 0, "job", "no jobs")
    jobs = [_job(path, where, raw, i, num_gpus, throughputs) for i, (where, raw) in enumerate(entries)]
    jobs.sort(key=lambda j: (j.arrival_time, j.job_id))
    return jobs


def _entries(path, text):
    """(line or "job <index>", raw job) of every job of the file."""
    data = parse(text, path)
    suffix = path.suffix.lower()
    if suffix == ".toml":
        headers = [i for i, ln in enumerate(text.splitlines(), 1) if re.match(r"\s*\[\[\s*job\s*\]\]", ln)]
        jobs = data.get("job", [])
        if not isinstance(jobs, list):
            raise WorkloadError(path, 0, "job", "expected [[job]] tables")
        return [(headers[i] if i < len(headers) else 0, j) for i, j in enumerate(jobs)]
    if suffix == ".jsonl":
        lines = [i for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
        return list(zip(lines, data))
    jobs = data.get("jobs") if isinstance(data, dict) else data
    if not isinstance(jobs, list):
        raise WorkloadError(path, 0, "jobs", "expected a list of job objects")
    return [(f"job {i}", j) for i, j in enumerate(jobs)]


class JobEntry(BaseModel):
    """One job of the spec, validated strictly (no coercion, no NaN/inf, bounds, unknown fields rejected)."""
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)

    model: str = Field(min_length=1, max_length=200)
    batch_size: int = Field(ge=1, le=10**7)
    id: int | str | None = None
    arrival: float = Field(0.0, ge=0.0, le=1e12)
    gpus: int = Field(1, ge=1, le=100000)
    mode: Literal["static", "gns", "accordion"] = "static"
    epochs: int | None = Field(None, ge=1, le=10**7)
    total_steps: int | None = Field(None, ge=1, le=10**13)
    samples_per_epoch: int | None = Field(None, ge=1, le=10**12)
    user: str = Field("user", min_length=1, max_length=200)
    account: str | None = Field(None, max_length=200)
    weight: float = Field(1.0, gt=0.0, le=1e6)
    max_batch_size: int | None = Field(None, ge=1, le=10**7)
    gns_schedule: list[Pair[PosInt]] | None = Field(None, min_length=1)      # [[batch size, epochs], ...]
    critical_epochs: list[Pair[NonNegInt]] | None = None                    # [[start, stop), ...]
    gpu_type: str | None = Field(None, min_length=1, max_length=100)        # e.g. "v100" (None: any type)
    preemptible: bool | None = None                                         # may be preempted (None: unknown)
    gpus_range: Pair[PosInt] | None = None                                  # elastic: [min, max] GPUs


def _job(path, where, raw, index, num_gpus, throughputs) -> JobSpec:
    line = where if isinstance(where, int) else 0
    loc = path if line else f"{path} ({where})"

    def err(field, problem):
        return WorkloadError(loc, line, field, problem)

    if not isinstance(raw, dict):
        raise err("job", "expected a table/object")
    try:
        e = JobEntry.model_validate(raw)
    except ValidationError as exc:
        raise err(None, describe(exc)[0]) from None
    model, bs, gpus = e.model, e.batch_size, e.gpus
    if model not in DATASET_SIZE and e.samples_per_epoch is None:
        raise err("model", f"unknown model {model!r} (give samples_per_epoch for a new model)")
    if num_gpus is not None and gpus > num_gpus:
        raise err("gpus", f"asks for {gpus} GPUs but the cluster has {num_gpus}")
    if e.gpus_range is not None and not e.gpus_range[0] <= gpus <= e.gpus_range[1]:
        raise err("gpus_range", f"must hold gpus = {gpus} (min <= gpus <= max), got {e.gpus_range}")
    if num_gpus is not None and e.gpus_range is not None and e.gpus_range[1] > num_gpus:
        raise err("gpus_range", f"goes up to {e.gpus_range[1]} GPUs but the cluster has {num_gpus}")
    samples = e.samples_per_epoch or DATASET_SIZE[model]
    if e.total_steps is not None:
        total_steps = e.total_steps
    elif e.epochs is not None:
        total_steps = e.epochs * steps_per_epoch(samples, bs)
    else:
        raise err("epochs", "missing (give epochs or total_steps)")
    max_bs = e.max_batch_size if e.max_batch_size is not None else MAX_BATCH_SIZE.get(model, bs)
    if max_bs < bs:
        raise err("max_batch_size", f"must be >= batch_size {bs}, got {max_bs}")
    if throughputs is not None and throughputs.get(model, bs, gpus) is None:
        raise err("batch_size", f"no throughput for {model} batch size {bs} on {gpus} GPU(s)")
    epochs = math.ceil(total_steps / steps_per_epoch(samples, bs))
    gns = ()
    if e.gns_schedule is not None:
        out = [b for b, n in e.gns_schedule for _ in range(n)]
        out += [out[-1]] * max(0, epochs - len(out))
        gns = tuple(out[:epochs])
    critical = None
    if e.critical_epochs is not None:
        critical = frozenset(x for a, b in e.critical_epochs for x in range(a, b))
    return JobSpec(job_id=e.id if e.id is not None else index, arrival_time=e.arrival, model=model, initial_bs=bs,
                   num_gpus=gpus, mode=e.mode, total_steps=total_steps, samples_per_epoch=samples, user=e.user,
                   account=e.account if e.account is not None else e.user, weight=e.weight, gns_schedule=gns,
                   accordion_critical=critical, max_bs=max_bs, gpu_type=e.gpu_type,
                   preemptible=e.preemptible,
                   gpus_range=tuple(e.gpus_range) if e.gpus_range is not None else None)
