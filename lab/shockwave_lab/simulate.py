"""Run a workload through the round loop on a SimulatedCluster and score it: the one place the lab drives the
simulated cluster (`shockwave simulate`, the study, the replay's and the demo's simulated columns)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from shockwave_lab.data_files import bundled_profile_for
from shockwave_lab.metrics import Metrics, compute, lower_bound
from shockwave_lab.sim.cluster import SimulatedCluster
from shockwave_lab.workload import gpu_types, profiles
from shockwave_lab.workload.errors import WorkloadError
from shockwave_lab.workload.spec import read_spec
from shockwave_lab.workload.throughputs import ThroughputTable
from shockwave_lab.workload.trace import read_trace
from slurm_shockwave.controller.loop import RoundLoop
from slurm_shockwave.plugins import load_policy_plugins
from solver.policies import default_policy, make_policy


@dataclass
class SimResult:
    metrics: Metrics
    records: list
    rounds: int
    wall_seconds: float
    decide_seconds: float
    fallbacks: int
    utilization_timeline: list = field(default_factory=list)
    round_log: list = field(default_factory=list)
    decided_by: dict = field(default_factory=dict)      # {scope: {rule: share of GPU-rounds}} (RoundLoop)
    preemptions: dict = field(default_factory=dict)     # RoundLoop.preemptions: preempted / kept / wasted

    def to_json(self) -> dict:
        m = self.metrics
        return {**m.summary(), "rounds": self.rounds, "wall_seconds": round(self.wall_seconds, 3),
                "decide_seconds": round(self.decide_seconds, 3), "fallbacks": self.fallbacks,
                "decided_by": self.decided_by,
                "jobs_detail": [{"job_id": r.job_id, "user": r.user, "account": r.account, "gpus": r.num_gpus,
                                 "arrival": r.arrival_time, "finish": r.finish_time, "jct": r.jct, "rho": rho,
                                 "restarts": r.restarts, "isolated_runtime": r.isolated_runtime}
                                for r, rho in zip(sorted(self.records, key=lambda r: (r.arrival_time, str(r.job_id))),
                                                  m.rho)],
                "utilization_timeline": self.utilization_timeline}


def load_workload(path, throughputs: ThroughputTable, num_gpus: int, profile=None):
    """Jobs from a reference .trace or our job-spec file (.toml/.json/.jsonl), completed with schedules."""
    path = Path(path)
    if path.suffix.lower() in (".toml", ".json", ".jsonl"):
        jobs = read_spec(path, num_gpus=num_gpus, throughputs=throughputs)
    else:
        jobs = read_trace(path, num_gpus=num_gpus, throughputs=throughputs)
        profile = profile or bundled_profile_for(path, throughputs.source)
        if profile:
            jobs = profiles.apply_profile(jobs, profiles.load_profile(profile), source=profile)
        else:
            jobs = profiles.apply_reference_patterns(jobs, throughputs)
    return profiles.complete(jobs, throughputs)


def workload_lower_bound(jobs, throughputs, num_gpus: int, cluster=None) -> float:
    """metrics.lower_bound with each job's exclusive time = the smaller of its profiled one (the FTF
    denominator) and the one under the schedule the simulator applies (they differ for Accordion jobs: the
    reference's profile forces the first 30% of epochs critical, its simulator does not), so it is a lower
    bound in this simulator too.  On a cluster of several types (`cluster`: the SimulatedCluster) both are on the
    job's reference type, its fastest: no type does the work sooner.  An elastic job: `_elastic_bound`."""
    def table_for(j):
        if cluster is None or not gpu_types.typed(cluster.capacity):
            return throughputs
        return cluster.tables[cluster.reference_types[j.job_id]]

    def simulated(j):
        if cluster is None or not gpu_types.typed(cluster.capacity):
            return profiles.isolated_runtime(j, throughputs)
        return gpu_types.schedule_time(j, cluster.tables[cluster.reference_types[j.job_id]])
    return lower_bound([_elastic_bound(j, min(j.isolated_runtime, simulated(j)), table_for(j)) for j in jobs],
                       num_gpus)


def _elastic_bound(job, exclusive: float, table) -> tuple[float, float, float]:
    """(arrival, exclusive time, GPUs) for metrics.lower_bound: a rigid job's on its own count; an elastic job's
    fastest time (each epoch of its schedule on its fastest count of the range) with the least GPU-seconds (each epoch
    on its cheapest count) as the product of the pair, both scaled by `exclusive` over its own count's time."""
    if job.gpus_range is None:
        return job.arrival_time, exclusive, job.num_gpus
    lo, hi = job.gpus_range
    fast = work = own = 0.0
    for bs in profiles.schedule_of(job):
        at = {n: job.samples / bs / thr for n, thr in table.gpu_counts(job.model, bs).items()
              if (lo <= n <= hi or n == job.num_gpus) and thr}
        if job.num_gpus not in at:
            return job.arrival_time, exclusive, job.num_gpus
        own += at[job.num_gpus]
        fast += min(at.values())
        work += min(t * n for n, t in at.items())
    scale = exclusive / own if own > 0 else 1.0
    return job.arrival_time, fast * scale, work / fast if fast > 0 else job.num_gpus


def elastic_jobs(jobs, up_to: int) -> list:
    """Every job elastic from 1 GPU up to `up_to` GPUs (its own count, when larger), its global batch size kept."""
    if up_to < 1:
        raise ValueError(f"elastic: the largest count must be at least 1, got {up_to}")
    return [replace(j, gpus_range=(1, max(int(up_to), j.num_gpus))) for j in jobs]


#: How the round loop runs a policy (`shockwave simulate --semantics`, the study's runs):
#: "controller": as the controller runs it in authoritative mode: a round starts early when a job ends while another
#:     waits (ControllerConfig's poll and min gap at this round length) and a running job is preempted only when
#:     the plan keeps it off longer than ControllerConfig's preemption cost (the gate, controller/loop.py); a policy
#:     that models Slurm's own scheduler (`runs_under_controller = False`) gets the early rounds, not the gate;
#: "reference": as the reference's simulator: rounds of fixed length, every preemption the plan makes (what
#:     shockwave-paper's reproduction of the paper's numbers uses).
SEMANTICS = ("controller", "reference")


def semantics_settings(semantics: str, round_length: float = 120.0, policy: str | None = None) -> dict:
    """run_simulation's `early_rounds`, `preemption_cost_s` and `mode` under `semantics` for `policy`."""
    if semantics not in SEMANTICS:
        raise ValueError(f"unknown semantics {semantics!r}: one of {', '.join(SEMANTICS)}")
    if semantics == "reference":
        return {"early_rounds": None, "preemption_cost_s": None, "mode": None, "rounds_per_restart": 0}
    from slurm_shockwave.controller.config import ControllerConfig
    from solver.policies import policy_class
    load_policy_plugins()
    controller = ControllerConfig(round_seconds=min(round_length, 86400))
    gated = policy_class(policy or default_policy().name).runs_under_controller
    return {"early_rounds": controller.early_round_timing,
            "preemption_cost_s": controller.preemption_cost_s if gated else None, "mode": "authoritative",
            "rounds_per_restart": controller.rounds_per_restart}


def run_simulation(workload, throughputs, num_gpus, policy: str | None = None, round_length: float = 120.0,
                   policy_config=None, profile=None, on_round=None, keep_round_log: bool = False,
                   restart_penalty: float = 20.0, gpus_per_node: int | None = None,
                   early_rounds: tuple[float, float] | None = None, preemption_cost_s: float | None = None,
                   mode: str | None = None, semantics: str | None = None,
                   rounds_per_restart: int | None = None, elastic: int | None = None,
                   slurm_starts: bool = False) -> SimResult:
    """`workload`: a file (load_workload) or a list of JobSpecs; `num_gpus`: a number (one untyped pool) or {GPU
    type: count} (workload/gpu_types.py: `throughputs` is then the file, or {type: table} with the v100 column);
    `gpus_per_node`: each gang on one node of that many GPUs (None: each type one pool, as the reference);
    `early_rounds`: (poll, min gap) seconds of the controller's event-driven rounds (sim/cluster.py; None: the
    reference's rounds); `preemption_cost_s`: the controller's preemption gate at that cost (None: no gate, the
    reference's semantics); `rounds_per_restart`: the gate's restart bound (None: solver.preemption's); `mode`: how
    a running job's reason reads (RoundLoop); `semantics`: one of SEMANTICS, which sets those four (with none of
    them given); `elastic`: every job elastic from 1 GPU up to that many (or its own count, when larger): `elastic_jobs`;
    `slurm_starts`: Slurm starts an arrival between rounds on its asked count where it fits (sim/slurm_starts.py)."""
    if semantics is not None:
        if any(x is not None for x in (early_rounds, preemption_cost_s, mode, rounds_per_restart)):
            raise ValueError("semantics sets early_rounds, preemption_cost_s, rounds_per_restart and mode: give either")
        s = semantics_settings(semantics, round_length, policy)
        early_rounds, preemption_cost_s, mode = s["early_rounds"], s["preemption_cost_s"], s["mode"]
        rounds_per_restart = s["rounds_per_restart"]
    if rounds_per_restart is None:
        from solver.preemption import ROUNDS_PER_RESTART as rounds_per_restart
    capacity = gpu_types.capacity_of(num_gpus)
    num_gpus = sum(capacity.values())
    if num_gpus <= 0 or min(capacity.values()) <= 0:
        raise WorkloadError("--gpus", 0, "gpus", f"must be positive, got {dict(capacity)}")
    table, tables = gpu_types.tables_for(throughputs, capacity)
    jobs = workload if isinstance(workload, list) else load_workload(workload, table, num_gpus, profile)
    if elastic is not None:
        jobs = elastic_jobs(jobs, elastic)
    if gpu_types.typed(capacity):
        jobs = gpu_types.retype(jobs, table, tables, capacity)
    load_policy_plugins()
    pol = make_policy(policy or default_policy().name, policy_config)
    cluster = SimulatedCluster(jobs, tables if gpu_types.typed(capacity) else table, capacity,
                               round_length=round_length, restart_penalty=restart_penalty, gpus_per_node=gpus_per_node,
                               early_rounds=early_rounds, slurm_starts=slurm_starts)
    loop = RoundLoop(cluster, pol, on_round=on_round, keep_records=keep_round_log, mode=mode,
                     preemption_cost_s=preemption_cost_s, rounds_per_restart=rounds_per_restart)
    started = time.perf_counter()
    loop.run()
    wall = time.perf_counter() - started
    metrics = compute(pol.name, cluster.finished, num_gpus, n_trace=len(jobs),
                      busy_gpu_seconds=cluster.busy_gpu_seconds, start_time=min(j.arrival_time for j in jobs),
                      lb=workload_lower_bound(jobs, table, num_gpus, cluster), usage=cluster.usage_log)
    return SimResult(metrics, cluster.finished, loop.rounds, wall, loop.decide_seconds, loop.fallbacks,
                     cluster.utilization_timeline, loop.records, loop.decided_by(), dict(loop.preemptions))
