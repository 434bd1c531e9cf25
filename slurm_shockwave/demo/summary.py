"""The demo's summary: per job JCT, measured rho, restarts; makespan; the same workload simulated."""
from __future__ import annotations

import math

from ..simulate import run_simulation
from ..workload.jobs import JobSpec
from ..workload.throughputs import ThroughputTable


def job_rows(jobs, slurm_jobs: dict, progress: dict, num_gpus: int, submitted_at: dict | None = None) -> list[dict]:
    """One row per demo job: submission time (ours: Slurm resets a requeued job's submit time), Slurm's end
    time, and the events' epoch durations."""
    contention = max(1.0, len(jobs) / num_gpus)
    submitted_at = dict(submitted_at or {})
    for job_id, s in slurm_jobs.items():
        if job_id not in submitted_at and s.submit_time:
            submitted_at[job_id] = s.submit_time
    t0 = min(submitted_at.values(), default=0)
    rows = []
    for dj, job_id in jobs:
        s, p = slurm_jobs.get(job_id), progress.get(job_id)
        durations = dict(p.epoch_duration_by_bs) if p else {}
        exclusive = sum(durations.get(bs, 0.0) for bs in (p.bs_per_epoch if p else ()))
        end = s.end_time if s and s.end_time else None
        sub = submitted_at.get(job_id)
        jct = (end - sub) if end and sub else None
        rows.append({"job_id": job_id, "name": dj.name, "user": dj.user, "mode": dj.template, "gpus": dj.gpus,
                     "state": s.state if s else "?", "submit": (sub - t0) if sub else None,
                     "end": (end - t0) if end else None, "jct_s": jct,
                     "exclusive_s": exclusive or None,
                     "rho": jct / (exclusive * contention) if jct and exclusive else None,
                     "restarts": s.restart_count if s else None,
                     "epochs": f"{p.epochs_done if p else 0}/{dj.epochs}",
                     "batch_sizes": sorted(set(p.bs_per_epoch)) if p else [],
                     "bs_per_epoch": list(p.bs_per_epoch) if p else [],
                     "epoch_duration_by_bs": durations})
    return rows


def aggregate(rows) -> dict:
    done = [r for r in rows if r["jct_s"] is not None]
    if not done:
        return {"jobs": len(rows), "completed": 0}
    return {"jobs": len(rows), "completed": sum(r["state"] == "COMPLETED" for r in rows),
            "makespan_s": max(r["end"] for r in done), "avg_jct_s": sum(r["jct_s"] for r in done) / len(done),
            "worst_rho": max((r["rho"] for r in done if r["rho"]), default=None),
            "unfair_fraction": 100.0 * sum(1 for r in done if r["rho"] and r["rho"] > 1.05) / len(done),
            "restarts": sum(r["restarts"] or 0 for r in rows)}


def specs_from(jobs, rows, step_time_guess: float | None = None):
    """JobSpecs + a throughput table for the simulator: measured epoch durations (or a guess)."""
    specs, table = [], {}
    for (dj, _job_id), row in zip(jobs, rows):
        model = f"demo-{dj.name}"
        sched = row["bs_per_epoch"] or [dj.batch_size] * dj.epochs
        sched = (sched + [sched[-1]] * dj.epochs)[:dj.epochs]
        durations = {int(k): v for k, v in row["epoch_duration_by_bs"].items()}
        sizes = sorted(set(sched) | {dj.batch_size})
        for bs in sizes:
            spe = math.ceil(dj.samples / bs)
            if bs in durations and durations[bs] > 0:
                d = durations[bs]
            elif durations:
                near = min(durations, key=lambda b: abs(math.log(b / bs)))
                d = durations[near] * math.ceil(dj.samples / bs) / math.ceil(dj.samples / near)
            else:
                d = spe * (step_time_guess or 0.1)
            table[(f"{model} (batch size {bs})", dj.gpus)] = spe / d
        mode = dj.template
        extra = {}
        if mode == "gns":
            extra["gns_schedule"] = tuple(sched)
        elif mode == "accordion":
            extra["accordion_critical"] = frozenset(e for e, bs in enumerate(sched) if bs == dj.batch_size)
        spe0 = math.ceil(dj.samples / dj.batch_size)
        exclusive = sum(spe / table[(f"{model} (batch size {bs})", dj.gpus)]
                        for bs in sched for spe in [math.ceil(dj.samples / bs)])
        specs.append(JobSpec(job_id=len(specs), arrival_time=row["submit"] if row["submit"] is not None else dj.delay_s,
                             model=model, initial_bs=dj.batch_size, num_gpus=dj.gpus, mode=mode,
                             total_steps=dj.epochs * spe0, samples_per_epoch=dj.samples, user=dj.user,
                             max_bs=max(sizes), isolated_runtime=exclusive, **extra))
    t0 = min(s.arrival_time for s in specs)
    specs = [JobSpec(**{**s.__dict__, "arrival_time": s.arrival_time - t0}) for s in specs]
    return specs, ThroughputTable(table, "demo measurements")


def simulate_same(jobs, rows, num_gpus, round_seconds, policy_config=None, step_time_guess=None,
                  restart_penalty=5.0):
    """The same jobs (arrivals, GPUs, measured epoch durations, observed batch sizes) simulated with the
    same policy and round length; a restart costs `restart_penalty` s (a process start + checkpoint load)."""
    specs, table = specs_from(jobs, rows, step_time_guess)
    r = run_simulation(specs, table, num_gpus, "shockwave", round_length=round_seconds, policy_config=policy_config,
                       restart_penalty=restart_penalty)
    m = r.metrics
    return {"makespan_s": m.makespan, "avg_jct_s": m.avg_jct, "worst_rho": m.worst_rho,
            "unfair_fraction": m.unfair_fraction, "jobs": m.jobs,
            "per_job": {jobs[rec.job_id][0].name: rec.jct for rec in r.records}}


def deviation(real: dict, sim: dict) -> dict:
    out = {}
    for k in ("makespan_s", "avg_jct_s"):
        if real.get(k) and sim.get(k):
            out[k] = real[k] / sim[k] - 1.0
    return out
