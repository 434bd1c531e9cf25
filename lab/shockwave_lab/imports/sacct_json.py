"""`sacct --json` from a site's own Slurm accounting, in the shapes of 22.05 (OpenAPI v0.0.38), 24.11 (data_parser
v0.0.42) and 26.05 (v0.0.45): `{"meta": ..., "jobs": [...]}`.

Run it as `sacct --json -a -D -S 2024-01-01 -E now` (-D: every run of a requeued job; 22.05 lists them anyway).
Per job object: `job_id`, `array.job_id`/`array.task_id` (an array task is `<array job>_<task>`), `het.job_id`/
`het.job_offset`, `state.current` (a word on 22.05, a list of words later), `time.submission/start/end` (epoch
seconds; 24.11+ write 4294967294 for "none"), `time.limit` (minutes; unlimited: infinite or 4294967295),
`tres.allocated`/`tres.requested` (`{"type": "gres", "name": "gpu" or "gpu:a100", "count": N}`), `user`, `account`,
`submit_line` and `script` (24.11+: `--requeue`/`--no-requeue`).  Numbers may be plain or `{"set", "infinite", "number"}`.  The
runs of a job, its requeues and array tasks: shockwave_lab/imports/slurm_runs.py.
"""

from __future__ import annotations

from pathlib import Path

from shockwave_lab.imports.common import MAX_SECONDS, Row, Tally, gpus, name, number
from shockwave_lab.imports.slurm_runs import Run, rows_of
from shockwave_lab.imports.submit_line import requeue_of
from shockwave_lab.workload.errors import WorkloadError
from slurm_shockwave.loader import parse, read_text

NO_VAL = 0xFFFFFFFE  # and above: Slurm's "not set" for 32-bit times and counts


def read(path, tally: Tally) -> list[Row]:
    path = Path(path)
    data = parse(read_text(path), path, "json")
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list):
        raise WorkloadError(path, 0, "jobs", 'expected sacct --json output: an object with a "jobs" list')
    runs = []
    for i, job in enumerate(jobs):
        where = f"job {i}"
        loc = f"{path} ({where})"
        if not isinstance(job, dict):
            raise WorkloadError(loc, 0, "job", "expected an object")
        runs.append(_run(loc, where, job))
    return rows_of(runs, path)


def _run(loc, where, job) -> Run:
    def get(obj, *keys):
        for k in keys:
            if not isinstance(obj, dict) or k not in obj:
                raise WorkloadError(loc, 0, ".".join(keys), "missing")
            obj = obj[k]
        return obj

    def num(field, value, optional=False):
        if isinstance(value, dict):
            if not value.get("set", True) or value.get("infinite"):
                return None
            value = value.get("number")
        if value is None and optional:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= NO_VAL:
            return None
        return number(loc, 0, field, value)

    def obj(field, value):
        """A nested object of the job (None or missing: empty); anything else is bad input, not a crash."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise WorkloadError(loc, 0, field, f"expected an object, got {type(value).__name__}")
        return value

    jid = num("job_id", get(job, "job_id"))
    if jid is None:
        raise WorkloadError(loc, 0, "job_id", "not set")
    ident = str(int(jid))
    array = obj("array", job.get("array"))
    array_job = num("array.job_id", array.get("job_id"), optional=True)
    task = num("array.task_id", array.get("task_id"), optional=True)
    if array_job and task is not None:
        ident = f"{int(array_job)}_{int(task)}"
    het = obj("het", job.get("het"))
    het_job = num("het.job_id", het.get("job_id"), optional=True)
    offset = num("het.job_offset", het.get("job_offset"), optional=True)
    if het_job and offset is not None:
        ident = f"{int(het_job)}+{int(offset)}"
    state = get(job, "state", "current")
    words = state if isinstance(state, list) else [state]
    if not all(isinstance(w, str) for w in words):
        raise WorkloadError(loc, 0, "state.current", f"expected a state name, got {state!r}")
    word = "REQUEUED" if "REQUEUED" in words else (words[0].upper() if words else "")
    submit = num("time.submission", get(job, "time", "submission"))
    if submit is None:
        raise WorkloadError(loc, 0, "time.submission", "not set")
    tres = obj("tres", job.get("tres"))
    alloc = tres.get("allocated") or []
    alloc_gpus, gpu_type = _gpus(loc, "tres.allocated", alloc)
    req_gpus, _ = _gpus(loc, "tres.requested", tres.get("requested") or [])
    return Run(
        id=ident,
        line=where,
        state=word,
        submit=submit,
        start=num("time.start", get(job, "time", "start"), optional=True),
        end=num("time.end", get(job, "time", "end"), optional=True),
        alloc_gpus=alloc_gpus if alloc else None,
        req_gpus=req_gpus,
        gpu_type=gpu_type,
        user=name(job.get("user")),
        account=name(job.get("account")),
        names=("time.start", "time.end"),
        limit=_limit(loc, num("time.limit", (job.get("time") or {}).get("limit"), optional=True)),
        requeue=requeue_of(_text(loc, "submit_line", job.get("submit_line")), _text(loc, "script", job.get("script"))),
    )


def _text(loc, field, value) -> str | None:
    if value is not None and not isinstance(value, str):
        raise WorkloadError(loc, 0, field, f"expected a string, got {type(value).__name__}")
    return value


def _limit(loc, minutes: float | None) -> float | None:
    """Seconds of a limit in minutes; None for none or 0 (Slurm's "no limit")."""
    if minutes and 60.0 * minutes > MAX_SECONDS:
        raise WorkloadError(loc, 0, "time.limit", f"{minutes:g} minutes is absurd (at most {MAX_SECONDS / 60:g})")
    return 60.0 * minutes if minutes else None


def _gpus(loc, field, items) -> tuple[int, str | None]:
    """(GPUs, type or None) of a TRES list: the untyped `gpu` gres when present, else the sum of the typed ones."""
    if not isinstance(items, list):
        raise WorkloadError(loc, 0, field, f"expected a list, got {type(items).__name__}")
    total, typed, kinds = None, 0, []
    for t in items:
        if not isinstance(t, dict) or t.get("type") != "gres" or not str(t.get("name") or "").startswith("gpu"):
            continue
        count = t.get("count")
        n = gpus(loc, 0, field, count["number"] if isinstance(count, dict) and "number" in count else count)
        if n != int(n):
            raise WorkloadError(loc, 0, field, f"not a whole GPU count: {count!r}")
        kind = str(t["name"])
        if kind == "gpu":
            total = int(n)
        elif kind.startswith("gpu:"):
            typed += int(n)
            kinds.append(kind.split(":", 1)[1].lower())
    return (total if total is not None else typed), (kinds[0] if len(set(kinds)) == 1 else None)
