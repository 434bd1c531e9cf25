"""Both simulations of `shockwave whatif`: the history under the site's Slurm (site_model.SiteSlurm) and under the
default policy (solver.policies.default_policy(), as the controller runs it: rounds of `default_round_s`, its
early rounds and its preemption gate at ControllerConfig's cost), on the same jobs and the same cluster.

Each imported job becomes the reference model with its measured run time on its GPUs (imports/entries.py), a
static job: alone it runs exactly as long as it ran.  One `Run` per policy: per job its first start, finish,
run time, restarts and dynamic FTF, and the dispatches (job, start, end, GPUs) the GPU shares are counted from.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from shockwave_lab.imports.entries import REFERENCE, rates, to_entries
from shockwave_lab.whatif.inputs import UNTYPED, Cluster, Site
from shockwave_lab.whatif.site_model import AssocTree, SiteSlurm

#: the site's scheduler pass (Slurm's default sched_interval), the Slurm model's round
SLURM_ROUND_S = 60.0


@dataclass
class Job:
    """One job of the history and where it ran in one simulation."""

    id: str
    user: str
    account: str
    gpus: int
    arrival: float
    runtime: float  # measured (its exclusive run time in the simulation)
    start: float = math.nan  # first start
    finish: float = math.nan
    restarts: int = 0
    ftf: float = math.nan  # dynamic finish-time fairness

    @property
    def wait(self) -> float:
        return self.start - self.arrival

    @property
    def jct(self) -> float:
        return self.finish - self.arrival


@dataclass
class Run:
    policy: str
    jobs: dict  # id -> Job
    usage: list  # (job id, start, end, GPUs) per dispatch
    rounds: int
    wall_s: float
    decide_s: float
    capacity: int
    notes: list = field(default_factory=list)


def _specs(rows, cluster: Cluster, notes: list, requeue: bool = True):
    """(JobSpecs, throughputs for run_simulation-style tables, entries by id): the jobs on the cluster's types;
    `requeue` False (the site's JobRequeue=0): a job whose history does not say it asked --requeue may not be
    preempted, as on the site."""
    from shockwave_lab.data_files import THROUGHPUTS
    from shockwave_lab.workload import profiles
    from shockwave_lab.workload.gpu_types import BASE
    from shockwave_lab.workload.spec import read_spec
    from shockwave_lab.workload.throughputs import ThroughputTable
    from shockwave_lab.workload.users import spec_text

    table = ThroughputTable.load(THROUGHPUTS / "tacc_throughputs.json")
    entries = to_entries(rows, table, gpu_types=cluster.typed)
    kept, unknown, too_big, pinned = [], 0, 0, 0
    for e in entries:
        if not requeue and "preemptible" not in e:
            e["preemptible"], pinned = False, pinned + 1
        t = e.get("gpu_type")
        if cluster.typed and t is not None and t not in cluster.capacity:
            e.pop("gpu_type")  # a type this cluster no longer has: any type
            unknown += 1
        room = cluster.capacity.get(e["gpu_type"]) if e.get("gpu_type") else max(cluster.capacity.values())
        if e["gpus"] > room:
            too_big += 1
            continue
        e.setdefault("account", e.get("user", "user"))
        kept.append(e)
    if unknown:
        notes.append(f"{unknown} job(s) asked for a GPU type the cluster does not list: run on any type")
    if too_big:
        notes.append(f"{too_big} job(s) larger than any GPU type's total: left out")
    if pinned:
        notes.append(f"JobRequeue=0: {pinned} job(s) the history does not record asking --requeue may not be preempted")
    model, _bs = REFERENCE
    speed = rates(table, {e["gpus"] for e in kept} | set(table.gpu_counts(*REFERENCE)))
    column = {(f"{model} (batch size {b})", g): thr for g, by in speed.items() for b, thr in by.items()}
    base = ThroughputTable(column, "reference model (imports/entries.py)")
    with tempfile.TemporaryDirectory(prefix="whatif-") as tmp:
        path = Path(tmp) / "history.jsonl"
        path.write_text(spec_text(kept))  # read_spec: the job spec's own checks and JobSpecs
        jobs = read_spec(path, throughputs=base)
    jobs = profiles.complete(jobs, base)
    tables = {BASE: base, **{t: base for t in cluster.capacity}} if cluster.typed else base
    measured = {str(r.id): float(r.runtime) for r in rows}
    return jobs, tables, {str(e["id"]): {**e, "runtime": measured[str(e["id"])]} for e in kept}


def _gpus_per_node(cluster: Cluster, jobs, notes: list) -> int | None:
    g = cluster.gpus_per_node
    if g and any(j.num_gpus > g and j.num_gpus % g for j in jobs):
        notes.append(f"a job's gang does not fill whole nodes of {g} GPUs: each GPU type is one pool (no nodes)")
        return None
    if g and any(n % g for n in cluster.capacity.values()):
        return None
    if not g:
        notes.append("nodes of different sizes: each GPU type is one pool (no nodes)")
    return g


def simulate(
    jobs,
    tables,
    cluster: Cluster,
    policy,
    round_length: float,
    gpus_per_node,
    early_rounds,
    preemption_cost_s,
    entries: dict,
) -> Run:
    """One simulation (simulate.run_simulation's steps, with a policy object)."""
    from shockwave_lab.metrics import dynamic_ftf
    from shockwave_lab.sim.cluster import SimulatedCluster
    from shockwave_lab.workload import gpu_types
    from slurm_shockwave.controller.loop import RoundLoop

    capacity = dict(cluster.capacity)
    base = tables if not isinstance(tables, dict) else tables[gpu_types.BASE]
    if gpu_types.typed(capacity):
        jobs = gpu_types.retype(jobs, base, tables, capacity)
        sim_tables = {t: tables[t] for t in capacity}
    else:
        sim_tables = base
    sim = SimulatedCluster(
        jobs, sim_tables, capacity, round_length=round_length, gpus_per_node=gpus_per_node, early_rounds=early_rounds
    )
    loop = RoundLoop(sim, policy, preemption_cost_s=preemption_cost_s)
    t0 = time.perf_counter()
    loop.run()
    wall = time.perf_counter() - t0
    out: dict = {}
    for r in sim.finished:
        e = entries[str(r.job_id)]
        out[str(r.job_id)] = Job(
            str(r.job_id),
            e.get("user", "user"),
            e["account"],
            r.num_gpus,
            r.arrival_time,
            e["runtime"],
            finish=r.finish_time,
            restarts=r.restarts,
        )
    for jid, a, _b, _g in sim.usage_log:
        j = out.get(str(jid))
        if j is not None and not a >= j.start:  # nan or later
            j.start = a
    recs = sorted(sim.finished, key=lambda r: (r.arrival_time, str(r.job_id)))
    exclusive = [entries[str(r.job_id)]["runtime"] for r in recs]  # measured: the FTF denominator
    lives = [
        (r.arrival_time, r.finish_time, x, r.num_gpus, r.cluster_gpus) for r, x in zip(recs, exclusive, strict=True)
    ]
    for r, v in zip(recs, dynamic_ftf(lives, sum(capacity.values())), strict=True):
        out[str(r.job_id)].ftf = v
    usage = [(str(j), a, b, g) for j, a, b, g in sim.usage_log]
    return Run(policy.name, out, usage, loop.rounds, wall, loop.decide_seconds, sum(capacity.values()))


def site_config(site: Site):
    from shockwave_lab.baselines.slurm_multifactor import SlurmConfig

    return SlurmConfig(
        weight_age=site.weight_age,
        weight_fairshare=site.weight_fairshare,
        weight_job_size=site.weight_job_size,
        max_age_s=max(1.0, site.max_age_s),
        decay_half_life_s=max(1.0, site.decay_half_life_s),
        calc_period_s=min(86400.0, site.calc_period_s),
        favor_small=site.favor_small,
        bf_window_s=site.bf_window_s,
        bf_max_job_test=site.bf_max_job_test,
    )


def run_both(
    rows, cluster: Cluster, site: Site, shares, slurm_round_s: float = SLURM_ROUND_S, default_round_s: float = 120.0
) -> tuple[Run, Run, list]:
    """(the site's run, the default's run, notes on what was assumed)."""
    from slurm_shockwave.controller.config import ControllerConfig
    from slurm_shockwave.plugins import load_policy_plugins
    from solver.policies import default_policy, make_policy

    notes: list = []
    jobs, tables, entries = _specs(rows, cluster, notes, site.job_requeue)
    if not jobs:
        raise ValueError("no job of the history fits the cluster")
    gpn = _gpus_per_node(cluster, jobs, notes)
    tree = AssocTree.build(shares, {(e["account"], e.get("user", "user")) for e in entries.values()})
    if not shares:
        notes.append("no sshare: every account 1 share under root, every user 1 share in its account")
    if UNTYPED in cluster.capacity:
        notes.append(f"nodes listing GPUs without a type: type {UNTYPED!r}")
    config = site_config(site)
    limits = recorded_limits(rows, entries, notes, config.time_limit_factor)
    site_policy = SiteSlurm(config, tree, fair_tree=site.fair_tree, preempt=site.preempt, limits=limits)
    controller = ControllerConfig(round_seconds=default_round_s)
    early = controller.early_round_timing
    load_policy_plugins()
    pol = make_policy(default_policy().name)
    both = [
        (jobs, tables, cluster, site_policy, slurm_round_s, gpn, early, None, entries),
        (jobs, tables, cluster, pol, default_round_s, gpn, early, controller.preemption_cost_s, entries),
    ]
    slurm, default = _in_parallel(both)
    slurm.policy = "slurm (site)"
    return slurm, default, notes


def recorded_limits(rows, entries: dict, notes: list, assumed: float) -> dict:
    """{job: seconds} the time limits the history recorded (sacct's TimeLimit) of the jobs simulated, for the site's
    backfill; a note says how many and how they compare with the run times (the others: `assumed` x run time)."""
    limits = {str(r.id): float(r.limit) for r in rows if r.limit and str(r.id) in entries}
    if not limits:
        notes.append(f"no time limit in the history: backfill assumes {assumed:g} x each job's run time")
        return limits
    over = sorted(limits[i] / max(entries[i]["runtime"], 1.0) for i in limits)
    notes.append(
        f"time limits as recorded for {len(limits)} of {len(entries)} job(s) (limit / run time: median "
        f"{over[len(over) // 2]:.3g}); the others {assumed:g} x run time"
    )
    return limits


def _simulate(args: tuple) -> Run:
    return simulate(*args)


def _in_parallel(calls: list) -> list:
    """`simulate` of each argument tuple, in processes of their own where the machine has more than one CPU (the two
    simulations are independent and each is single-threaded); in this process otherwise, or when processes cannot be
    started (a restricted sandbox: the same results, one after the other)."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    workers = min(len(calls), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    if workers > 1:
        try:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
                return list(pool.map(_simulate, calls))
        except (OSError, BrokenProcessPool, ValueError):
            pass
    return [simulate(*c) for c in calls]
