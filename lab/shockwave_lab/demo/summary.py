"""The demo's summary: per job JCT, measured rho, restarts; makespan; the same workload simulated."""
from __future__ import annotations

import math

from shockwave_lab.simulate import run_simulation
from shockwave_lab.workload.jobs import JobSpec
from shockwave_lab.workload.throughputs import ThroughputTable


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


def rebase_rho(rows, base_rows, num_jobs: int, num_gpus: int) -> None:
    """Use one exclusive run time per job (measured in the base run, where nobody was preempted) for the rho
    of every run, so that rho compares JCTs, not two noisy measurements of the same work."""
    contention = max(1.0, num_jobs / num_gpus)
    base = {r["name"]: r.get("exclusive_s") for r in base_rows}
    for r in rows:
        x = base.get(r["name"]) or r.get("exclusive_s")
        r["exclusive_s"] = x
        r["rho"] = r["jct_s"] / (x * contention) if r.get("jct_s") and x else None


def aggregate(rows) -> dict:
    done = [r for r in rows if r["jct_s"] is not None]
    if not done:
        return {"jobs": len(rows), "completed": 0}
    return {"jobs": len(rows), "completed": sum(r["state"] == "COMPLETED" for r in rows),
            "makespan_s": max(r["end"] for r in done), "avg_jct_s": sum(r["jct_s"] for r in done) / len(done),
            "worst_rho": max((r["rho"] for r in done if r["rho"]), default=None),
            "unfair_fraction": (100.0 * sum(1 for r in done if r["rho"] > 1.05) / len(done)
                                if all(r["rho"] for r in done) else None),
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
                  restart_penalty=5.0, policy=None):
    """The same jobs (arrivals, GPUs, measured epoch durations, observed batch sizes) simulated with a policy
    (None: the default, as the controller runs it) and the same round length; a restart costs
    `restart_penalty` s (a process start + checkpoint load)."""
    specs, table = specs_from(jobs, rows, step_time_guess)
    r = run_simulation(specs, table, num_gpus, policy, round_length=round_seconds, policy_config=policy_config,
                       restart_penalty=restart_penalty)
    m = r.metrics
    users = {}
    for rec in r.records:
        users.setdefault(jobs[rec.job_id][0].user, []).append(rec.jct)
    return {"makespan_s": m.makespan, "avg_jct_s": m.avg_jct, "worst_rho": m.worst_rho,
            "unfair_fraction": m.unfair_fraction, "jobs": m.jobs, "policy": m.policy,
            "user_jct": {u: sum(v) / len(v) for u, v in sorted(users.items())},
            "per_job": {jobs[rec.job_id][0].name: rec.jct for rec in r.records}}


def simulate_fifo_backfill(jobs, rows, num_gpus, step_time_guess=None) -> dict:
    """A model of plain Slurm on the same inputs: continuous time, jobs in submit order, a job starts as soon
    as its GPUs are free, a later job starts first when it fits (backfill), nobody is preempted.  (The
    simulator's round-based `fifo` re-allocates only every 1,000 s, the reference's reset interval, which
    does not model Slurm at the demo's time scale.)"""
    from slurm_shockwave.backends.base import JobRecord
    from shockwave_lab.metrics import compute
    specs, _table = specs_from(jobs, rows, step_time_guess)
    waiting = sorted(specs, key=lambda s: (s.arrival_time, s.job_id))
    running, records, t, free = [], [], 0.0, int(num_gpus)
    while waiting or running:
        for s in [s for s in waiting if s.arrival_time <= t]:
            if s.num_gpus <= free:
                waiting.remove(s)
                free -= s.num_gpus
                running.append((t + s.isolated_runtime, s))
        nxt = [e for e, _s in running] + [s.arrival_time for s in waiting if s.arrival_time > t]
        if not nxt:
            break                                  # a job larger than the cluster: never runs
        t = min(nxt)
        for end, s in [r for r in running if r[0] <= t]:
            running.remove((end, s))
            free += s.num_gpus
            records.append(JobRecord(s.job_id, s.user, s.num_gpus, s.arrival_time, end, s.isolated_runtime,
                                     s.isolated_runtime))
    m = compute("fifo+backfill", records, int(num_gpus), n_trace=len(specs))
    users = {}
    for rec in records:
        users.setdefault(jobs[rec.job_id][0].user, []).append(rec.jct)
    return {"makespan_s": m.makespan, "avg_jct_s": m.avg_jct, "worst_rho": m.worst_rho,
            "unfair_fraction": m.unfair_fraction, "jobs": m.jobs, "policy": "fifo+backfill",
            "user_jct": {u: sum(v) / len(v) for u, v in sorted(users.items())},
            "per_job": {jobs[rec.job_id][0].name: rec.jct for rec in records}}


def user_shares(jobs, events: dict, submitted_at: dict, rows) -> dict:
    """Each user's share of the GPU-seconds used while every user had work in the system (from the latest
    first submission of a user to the earliest last job end of a user), from the jobs' epoch events
    (an epoch ran on the job's GPUs from `ts - duration_s` to `ts`); and each user's mean JCT."""
    by_user: dict = {}
    for (dj, job_id), row in zip(jobs, rows):
        sub, end = submitted_at.get(job_id), row.get("end")
        t0 = min(submitted_at.values()) if submitted_at else 0.0
        u = by_user.setdefault(dj.user, {"first": float("inf"), "last": 0.0, "jct": []})
        if sub:
            u["first"] = min(u["first"], sub)
        if end is not None:
            u["last"] = max(u["last"], t0 + end)
        if row.get("jct_s") is not None:
            u["jct"].append(row["jct_s"])
    if not by_user:
        return {}
    start = max(u["first"] for u in by_user.values())
    stop = min(u["last"] for u in by_user.values())
    used = {user: 0.0 for user in by_user}
    if stop > start:
        for dj, job_id in jobs:
            for e in events.get(job_id, ()):
                if e.kind != "epoch_end" or not e.duration_s:
                    continue
                lo, hi = max(e.ts - e.duration_s, start), min(e.ts, stop)
                if hi > lo:
                    used[dj.user] += (hi - lo) * dj.gpus
    total = sum(used.values())
    return {"window_s": round(max(0.0, stop - start), 1),
            "share": {u: (x / total if total else None) for u, x in sorted(used.items())},
            "user_jct": {u: (sum(v["jct"]) / len(v["jct"]) if v["jct"] else None) for u, v in sorted(by_user.items())}}


def deviation(real: dict, sim: dict) -> dict:
    out = {}
    for k in ("makespan_s", "avg_jct_s"):
        if real.get(k) and sim.get(k):
            out[k] = real[k] / sim[k] - 1.0
    return out
