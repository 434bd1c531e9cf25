"""Ground-truth batch-size schedules and exclusive run times for trace jobs.

The reference generates, per job, the batch size of every epoch (GNS from a table of doubling epochs per
model/batch size/GPU count; Accordion from critical regimes) and the exclusive run time under it (the FTF
denominator).  `bundled profiles` hold that output for the reference traces.  For a `.trace` without a
profile (a generated one) the same is computed from the reference's rules (workload/patterns.py,
`apply_reference_patterns`).  Job-spec jobs without a `gns_schedule` get our documented default pattern
(double at 25%, 50% and 75% of the epochs, capped at the model's largest profiled batch size) and the
exclusive run time is computed from the throughputs.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from slurm_shockwave.loader import load
from shockwave_lab.workload.errors import WorkloadError
from shockwave_lab.workload.jobs import JobSpec
from shockwave_lab.workload.models import ADAPTIVE_MAX_BS, accordion_critical, steps_per_epoch


def load_profile(path) -> dict[int, dict]:
    path = Path(path)
    data = load(path, "json")
    try:
        return {int(j["job_id"]): j for j in data["jobs"]}
    except (ValueError, KeyError, TypeError) as e:
        raise WorkloadError(path, 0, "jobs", f"not a job profile file ({e})") from None


def apply_profile(jobs: list[JobSpec], profile: dict[int, dict], source="profile") -> list[JobSpec]:
    """Attach the profile's GNS schedule and exclusive run time; the profile must describe these jobs."""
    out = []
    for job in jobs:
        p = profile.get(job.job_id)
        if p is None or p.get("job_type") != job.job_type or int(p.get("total_steps", -1)) != job.total_steps:
            raise WorkloadError(source, 0, f"job {job.job_id}", "profile does not match the trace")
        sched = [int(bs) for bs, n in p["bs_schedule_rle"] for _ in range(int(n))]
        # The reference generator leaves the last epoch at the initial batch size (a quirk of its loop);
        # the simulator asks the generator for a longer pattern, so the last epoch continues the one before.
        if len(sched) >= 2 and sched[-1] < sched[-2]:
            sched[-1] = sched[-2]
        gns = tuple(sched) if job.mode == "gns" else ()
        out.append(dataclasses.replace(job, gns_schedule=gns, isolated_runtime=float(p["isolated_runtime_s"])))
    return out


def apply_reference_patterns(jobs: list[JobSpec], throughputs) -> list[JobSpec]:
    """What the reference computes for a `.trace` without a bundled profile (workload/patterns.py): the GNS
    schedule from its table and the exclusive run time under its profile patterns.  Identical to the
    bundled profiles on the reference's own traces (tests/test_trace_generate.py)."""
    from shockwave_lab.workload.patterns import exclusive_runtime, gns_pattern, profile_pattern
    out = []
    for job in jobs:
        n = job.num_epochs
        gns = ()
        if job.mode == "gns":
            sched = gns_pattern(job.model, job.initial_bs, job.num_gpus, n)
            if len(sched) >= 2 and sched[-1] < sched[-2]:
                sched[-1] = sched[-2]          # as apply_profile: the simulator continues the previous epoch
            gns = tuple(sched)
        pattern = profile_pattern(job.model, job.initial_bs, job.num_gpus, job.mode, n)
        iso = exclusive_runtime(job.model, pattern, job.num_gpus, throughputs, job.samples)
        out.append(dataclasses.replace(job, gns_schedule=gns, isolated_runtime=iso))
    return out


def default_gns_schedule(job: JobSpec, throughputs) -> tuple[int, ...]:
    cap = job.max_bs or job.initial_bs
    sizes = throughputs.batch_sizes(job.model, job.num_gpus) if throughputs else {}
    if sizes:
        cap = min(cap, max(sizes))
    n = job.num_epochs
    sched, bs = [], job.initial_bs
    for e in range(n):
        if e in (n // 4, n // 2, (3 * n) // 4) and e > 0 and bs * 2 <= cap and (not sizes or bs * 2 in sizes):
            bs *= 2
        sched.append(bs)
    return tuple(sched)


def schedule_of(job: JobSpec) -> list[int]:
    """The batch size of every epoch the job will run (its ground truth in simulation)."""
    n = job.num_epochs
    if job.mode == "gns" and job.gns_schedule:
        return list(job.gns_schedule[:n]) + [job.gns_schedule[-1]] * max(0, n - len(job.gns_schedule))
    if job.mode == "accordion":
        big = job.max_bs or ADAPTIVE_MAX_BS.get(job.model, job.initial_bs)
        out = []
        for e in range(n):
            crit = (e in job.accordion_critical) if job.accordion_critical is not None else \
                accordion_critical(job.model, job.initial_bs, e)
            out.append(job.initial_bs if crit is None or crit else big)
        return out
    return [job.initial_bs] * n


def isolated_runtime(job: JobSpec, throughputs) -> float:
    """Exclusive run time on the job's own GPUs under its schedule (no rounding of iterations)."""
    total = 0.0
    for bs in schedule_of(job):
        thr = throughputs.get(job.model, bs, job.num_gpus) or throughputs.get(job.model, job.initial_bs, job.num_gpus)
        total += (job.samples / bs) / thr
    return total


def complete(jobs: list[JobSpec], throughputs) -> list[JobSpec]:
    """Fill in GNS schedules and exclusive run times that are still missing."""
    out = []
    for job in jobs:
        if job.mode == "gns" and not job.gns_schedule:
            job = dataclasses.replace(job, gns_schedule=default_gns_schedule(job, throughputs))
        if job.isolated_runtime <= 0:
            job = dataclasses.replace(job, isolated_runtime=isolated_runtime(job, throughputs))
        out.append(job)
    return out


__all__ = ["load_profile", "apply_profile", "apply_reference_patterns", "complete", "schedule_of", "isolated_runtime", "steps_per_epoch"]
