"""`replay(...)`: plan, run on a real local Slurm cluster, measure, simulate the same trace, compare."""
from __future__ import annotations

import dataclasses
import os
import shlex
import time

from shockwave_lab.simulate import elastic_jobs, load_workload
from shockwave_lab.workload.models import steps_per_epoch
from shockwave_lab.workload.throughputs import ThroughputTable
from shockwave_lab.replay import compare, plan
from shockwave_lab.replay.collect import measure
from shockwave_lab.replay.run import Replay


def load(trace, throughputs, gpus: int, users: int = 4, first: int | None = None, elastic: int | None = None,
         no_requeue_every: int | None = None, gpu_types=(), uniform: bool = False):
    """(ReplayJobs, JobSpecs with the replay's users, throughput table) of a trace; `elastic`: every job elastic from
    1 GPU up to that many (its own count when larger), as `simulate --elastic` makes them; `no_requeue_every`: every
    N-th job in arrival order (the first included) may not be preempted (`preemptible: false`, submitted with
    --no-requeue).  Each job runs whole epochs (`whole_epochs`)."""
    table = ThroughputTable.load(throughputs)
    specs = whole_epochs(load_workload(trace, table, gpus))
    if first:
        specs = sorted(specs, key=lambda s: (s.arrival_time, s.job_id))[:first]
    if elastic is not None:
        specs = elastic_jobs(specs, elastic)
    if no_requeue_every:
        order = sorted(specs, key=lambda s: (s.arrival_time, s.job_id))
        pinned = {s.job_id for s in order[::no_requeue_every]}
        specs = [dataclasses.replace(s, preemptible=False) if s.job_id in pinned else s for s in specs]
    if gpu_types:
        return typed(specs, throughputs, gpus, users, list(gpu_types), uniform)
    jobs = plan.plan_jobs(specs, table, plan.users(users))
    return jobs, plan.with_users(specs, jobs), table


def typed(specs, throughputs, gpus: int, users: int, node_types: list, uniform: bool = False):
    """`load` on a cluster of several GPU types, one per node (`node_types`, as LocalCluster names its nodes): the
    JobSpecs as the simulator reads them, the ReplayJobs with their epochs on each type and their exclusive run time on
    their reference type (gpu_types.retype), and the simulator's tables ({type: table}, the workload's column too).
    `uniform`: every job's speed on a type is the workload's column times the type's `site_speeds` (what the
    controller is told is then true for every job: real against simulated measures the enactment alone)."""
    from shockwave_lab.localcluster.config import node_names
    from shockwave_lab.workload import gpu_types as G
    capacity = type_capacity(gpus, node_types)
    base, tables = G.tables_for(throughputs, capacity)
    names = dict(zip(node_names(len(node_types)), node_types))
    jobs = plan.plan_jobs(G.retype(specs, base, tables, capacity), base, plan.users(users), tables, names)
    if uniform:
        speeds = site_speeds(jobs, node_types)
        tables = {t: ThroughputTable({k: x * speeds[t] for k, x in base._t.items()}, f"{base.source} x {speeds[t]}")
                  for t in capacity}
        jobs = plan.plan_jobs(G.retype(specs, base, tables, capacity), base, plan.users(users), tables, names)
    return jobs, plan.with_users(specs, jobs), {G.BASE: base, **tables}


def type_capacity(gpus: int, node_types: list) -> dict:
    """{type: GPUs} of `gpus` GPUs spread evenly over nodes of one type each (`node_types`, in node order)."""
    per = gpus // len(node_types)
    return {t: per * node_types.count(t) for t in dict.fromkeys(node_types)}


def site_speeds(jobs, types) -> dict:
    """What a site would set as `gpu_type_speeds`: each type's median speed over the jobs, relative to the fastest
    type's (1.0), each job at its first batch size (the controller knows one speed per type, the simulator each
    job's own)."""
    import statistics
    speed = {t: statistics.median(j.epoch_s[j.schedule[0]] / j.epoch_s_by_type[j.schedule[0]][t] for j in jobs)
             for t in dict.fromkeys(types)}
    top = max(speed.values())
    return {t: round(x / top, 3) for t, x in speed.items()}


def whole_epochs(specs: list) -> list:
    """The jobs with their length rounded up to whole epochs at their first batch size: a trace's steps may end
    mid-epoch (the simulator then stops there), while the emulated program, as a training program does, runs every
    epoch of its schedule to its end (replay/emujob.py); the simulated column models the jobs that ran.  Their
    epochs, schedules and exclusive run times (whole epochs already: workload/jobs.py) do not change."""
    return [dataclasses.replace(s, total_steps=s.num_epochs * steps_per_epoch(s.samples, s.initial_bs)) for s in specs]


def start_cost(real: dict) -> float:
    """What a start costs the simulated jobs: the restart cost measured in the real run; with no restarts (plain
    Slurm) the programs' own start-up measured there (the simulator charges it on first starts too)."""
    cost = real.get("restart_cost_s")
    return float(cost) if cost is not None else float(real.get("first_startup_s") or 0.0)


def replay(trace, throughputs, gpus: int = 32, nodes: int = 8, time_scale: float = 30.0, policy: str = "shockwave",
           users: int = 4, first: int | None = None, out=print, keep: bool = False, slurm: str | None = None,
           timeout_s: float | None = None, progress_every: float = 15.0, argv=None, elastic: int | None = None,
           no_requeue_every: int | None = None, gpu_types=(), uniform: bool = False) -> dict:
    """The result: {"real": {...}, "simulated": {...}, "deviation": {...}, ...} (all times in trace seconds);
    `gpu_types`: one GPU type per node (then `nodes` is their number), the controller given `site_speeds`."""
    jobs, specs, table = load(trace, throughputs, gpus, users, first, elastic, no_requeue_every, gpu_types, uniform)
    speeds = site_speeds(jobs, gpu_types) if gpu_types else {}
    capacity = type_capacity(gpus, list(gpu_types)) if gpu_types else gpus
    if policy != "slurm":
        from solver.policies import policy_class
        policy_class(policy)                         # an unknown name fails here, before a cluster starts
    guess = compare.simulate(specs, table, capacity, nodes, policy, 20.0, time_scale)
    expected = guess["makespan_s"] / time_scale
    kind = f" elastic up to {elastic} GPUs" if elastic else ""
    out(f"{len(jobs)} jobs{kind}, {gpus} GPUs on {nodes} nodes, users {', '.join(plan.users(users))}; time scale "
        f"{time_scale:g} (rounds of {120 / time_scale:g} s); the simulator expects a makespan of "
        f"{guess['makespan_s']:,.0f} trace s = {expected:.0f} s here")
    r = Replay(jobs, gpus=gpus, nodes=nodes, time_scale=time_scale, policy=policy, out=out, keep=keep, slurm=slurm,
               timeout_s=timeout_s, expected_s=expected, progress_every=progress_every, gpu_types=gpu_types,
               speeds=speeds)
    load_before = os.getloadavg()
    raw = r.run()            # SIGTERM/SIGHUP/SIGINT meanwhile: every process it started is stopped, then it raises
    real = measure(raw, jobs, time_scale, gpus, policy)
    cost = real.get("restart_cost_s")
    if gpu_types:                     # the runs of each job that started on another type than its run before
        node_type = jobs[0].node_types
        real["type_moves"] = sum(compare.changes([node_type.get(n) for n in j["nodes"]]) for j in raw["jobs"])
    sim = compare.simulate(specs, table, capacity, nodes, policy, start_cost(real), time_scale)
    return {"policy": policy, "time_scale": time_scale, "round_seconds": 120 / time_scale, "gpus": gpus,
            "nodes": nodes, "jobs": len(jobs), "users": users, "trace": str(trace), "elastic": elastic,
            "gpu_types": list(gpu_types), "gpu_type_speeds": speeds, "uniform_speeds": uniform,
            "no_requeue": [j.name for j in jobs if not j.requeue],
            "slurm_version": raw["slurm_version"], "wall_s": round(raw["wall_s"], 1),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "command": "shockwave replay " + shlex.join(argv) if argv else None,
            "restart_cost_s": cost, "real": real, "simulated": sim, "deviation": compare.deviation(real, sim),
            "fair_share": "slurmdbd, one account per user",
            "root": raw["root"], "kept": keep}
