"""Our own job-spec format for new workloads (documented in docs/job-spec.md).

Accepted files:
- `.toml`: one `[[job]]` table per job (errors name the line of the job's `[[job]]` header);
- `.jsonl`: one JSON object per line (errors name that line);
- `.json`: `{"jobs": [ {...}, ... ]}` or a bare list (errors name the job's index).

Fields per job (required: model, batch_size, and one of epochs/total_steps):
  id, arrival (s, default 0), model, batch_size, gpus (default 1), mode (static|gns|accordion),
  epochs | total_steps, samples_per_epoch, user, account, weight (> 0), max_batch_size,
  gns_schedule = [[bs, n_epochs], ...]   (GNS: run-length target batch size per epoch),
  critical_epochs = [[start, stop), ...] (Accordion: epochs in the critical, small-batch regime).
"""
from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path

from .errors import WorkloadError, read_text
from .jobs import MODES, JobSpec
from .models import DATASET_SIZE, MAX_BATCH_SIZE, steps_per_epoch

KNOWN = {"id", "arrival", "model", "batch_size", "gpus", "mode", "epochs", "total_steps", "samples_per_epoch",
         "user", "account", "weight", "max_batch_size", "gns_schedule", "critical_epochs"}


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
    suffix = path.suffix.lower()
    if suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise WorkloadError(path, 0, "toml", str(e)) from None
        headers = [i for i, ln in enumerate(text.splitlines(), 1) if re.match(r"\s*\[\[\s*job\s*\]\]", ln)]
        jobs = data.get("job", [])
        if not isinstance(jobs, list):
            raise WorkloadError(path, 0, "job", "expected [[job]] tables")
        return [(headers[i] if i < len(headers) else 0, j) for i, j in enumerate(jobs)]
    if suffix == ".jsonl":
        out = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append((lineno, json.loads(line)))
            except ValueError as e:
                raise WorkloadError(path, lineno, "json", str(e)) from None
        return out
    try:
        data = json.loads(text)
    except ValueError as e:
        raise WorkloadError(path, getattr(e, "lineno", 0), "json", str(e).split(":")[0]) from None
    jobs = data.get("jobs") if isinstance(data, dict) else data
    if not isinstance(jobs, list):
        raise WorkloadError(path, 0, "jobs", "expected a list of job objects")
    return [(f"job {i}", j) for i, j in enumerate(jobs)]


def _job(path, where, raw, index, num_gpus, throughputs) -> JobSpec:
    line = where if isinstance(where, int) else 0
    loc = path if line else f"{path} ({where})"

    def err(field, problem):
        return WorkloadError(loc, line, field, problem)

    if not isinstance(raw, dict):
        raise err("job", "expected a table/object")
    unknown = sorted(set(raw) - KNOWN)
    if unknown:
        raise err(unknown[0], "unknown field")
    for req in ("model", "batch_size"):
        if req not in raw:
            raise err(req, "missing")
    model = raw["model"]
    if not isinstance(model, str) or (model not in DATASET_SIZE and "samples_per_epoch" not in raw):
        raise err("model", f"unknown model {model!r} (give samples_per_epoch for a new model)")
    bs = _int(err, raw, "batch_size", minimum=1)
    gpus = _int(err, raw, "gpus", default=1, minimum=1)
    if num_gpus is not None and gpus > num_gpus:
        raise err("gpus", f"asks for {gpus} GPUs but the cluster has {num_gpus}")
    mode = raw.get("mode", "static")
    if mode not in MODES:
        raise err("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
    samples = _int(err, raw, "samples_per_epoch", default=DATASET_SIZE.get(model, 0), minimum=1)
    if "total_steps" in raw:
        total_steps = _int(err, raw, "total_steps", minimum=1)
    elif "epochs" in raw:
        total_steps = _int(err, raw, "epochs", minimum=1) * steps_per_epoch(samples, bs)
    else:
        raise err("epochs", "missing (give epochs or total_steps)")
    arrival = _float(err, raw, "arrival", default=0.0, minimum=0.0)
    weight = _float(err, raw, "weight", default=1.0, minimum=0.0)
    if weight <= 0:
        raise err("weight", "must be positive")
    max_bs = _int(err, raw, "max_batch_size", default=MAX_BATCH_SIZE.get(model, bs), minimum=bs)
    if throughputs is not None and throughputs.get(model, bs, gpus) is None:
        raise err("batch_size", f"no throughput for {model} batch size {bs} on {gpus} GPU(s)")
    epochs = math.ceil(total_steps / steps_per_epoch(samples, bs))
    gns = _rle(err, raw.get("gns_schedule"), epochs) if "gns_schedule" in raw else ()
    critical = None
    if "critical_epochs" in raw:
        ranges = raw["critical_epochs"]
        if not isinstance(ranges, list) or not all(
                isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) and x >= 0 for x in r) for r in ranges):
            raise err("critical_epochs", "expected [[start, stop], ...] with non-negative integers")
        critical = frozenset(e for a, b in ranges for e in range(a, b))
    user = str(raw.get("user", "user"))
    return JobSpec(job_id=raw.get("id", index), arrival_time=arrival, model=model, initial_bs=bs, num_gpus=gpus,
                   mode=mode, total_steps=total_steps, samples_per_epoch=samples, user=user,
                   account=str(raw.get("account", user)), weight=weight, gns_schedule=gns,
                   accordion_critical=critical, max_bs=max_bs)


def _int(err, raw, field, default=None, minimum=None):
    if field not in raw:
        if default is None:
            raise err(field, "missing")
        return default
    v = raw[field]
    if isinstance(v, bool) or not isinstance(v, int):
        raise err(field, f"expected an integer, got {v!r}")
    if minimum is not None and v < minimum:
        raise err(field, f"must be >= {minimum}, got {v}")
    return v


def _float(err, raw, field, default, minimum):
    v = raw.get(field, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise err(field, f"expected a number, got {v!r}")
    if v < minimum:
        raise err(field, f"must be >= {minimum}, got {v}")
    return float(v)


def _rle(err, rle, epochs):
    if not isinstance(rle, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and x > 0 for x in p) for p in rle):
        raise err("gns_schedule", "expected [[batch_size, n_epochs], ...] with positive integers")
    out = [bs for bs, n in rle for _ in range(n)]
    if not out:
        raise err("gns_schedule", "empty")
    out += [out[-1]] * max(0, epochs - len(out))
    return tuple(out[:epochs])
