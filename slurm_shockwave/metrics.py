"""The paper's metrics, exactly as the reference computes them (docs/reference.md §5).

- makespan: time the last job finishes (the first arrival is t = 0);
- average JCT: mean of finish - arrival;
- rho_i = JCT_i / (T_excl,i x max(1, N_trace / G)): T_excl is the exclusive run time under the job's
  profiled schedule; the contention factor uses the number of jobs in the whole trace (static);
- unfair fraction: share of jobs with rho > 1.05 (and > 1.1); worst rho = max rho;
- utilisation: busy GPU-seconds / (G x makespan);
- dynamic finish-time fairness (ours, beside the paper's rho; docs/fairness.md; `dynamic_ftf`): Themis's
  rho with the contention each job actually saw, rho_dyn,i = (integral over the job's life [a_i, f_i] of
  min(1, G / D(t)) dt) / T_excl,i, D(t) = GPUs demanded by the jobs active (arrived, unfinished) at t: the
  GPU-time share the job was entitled to while it lived, over the time it needed alone.  Reported as worst,
  95th percentile and unfair fraction (rho_dyn > 1.05);
- physical lower bound of the makespan (ours, not the reference's; `lower_bound`):
  LB = max( max over arrival times t of (t + W(>= t) / G),  max over jobs of (arrival + exclusive time) ),
  W(>= t) = GPU-seconds of the jobs arriving at or after t, each job's work = its exclusive time x its GPUs.
  Times are relative to the first arrival, as the makespan.  No schedule can beat it: the work arriving
  from t on needs W/G seconds even on all G GPUs, and a job cannot finish before arrival + its exclusive
  time.  (It ignores round boundaries, gang packing and the restart penalty, so 1.0 is not attainable.)
"""
from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field

from .backends.base import JobRecord


@dataclass
class Metrics:
    policy: str
    jobs: int
    gpus: int
    makespan: float
    avg_jct: float
    worst_rho: float
    unfair_fraction: float        # percent, rho > 1.05
    unfair_fraction_1_1: float    # percent, rho > 1.1
    utilization: float
    rho: list
    jct: list
    lower_bound: float = 0.0      # physical lower bound of the makespan (s); 0 = not computed
    makespan_over_lb: float = 0.0
    ftf_dynamic_worst: float = 0.0
    ftf_dynamic_p95: float = 0.0
    ftf_dynamic_unfair: float = 0.0   # percent, rho_dyn > 1.05
    ftf_dynamic: list = field(default_factory=list)

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("rho"), d.pop("jct"), d.pop("ftf_dynamic")
        return d


def rho_values(records: list[JobRecord], n_trace: int, num_gpus: int) -> list[float]:
    contention = max(1.0, n_trace / num_gpus)
    return [r.jct / (r.isolated_runtime * contention) if r.isolated_runtime > 0 else float("inf") for r in records]


UNFAIR = 1.05     # a job is counted unfair above this finish-time fairness


def dynamic_ftf(jobs, num_gpus: int) -> list[float]:
    """Finish-time fairness with the contention each job saw (module docstring).  `jobs`: (arrival, finish,
    exclusive run time, GPUs) per job, in any order; returns rho_dyn per job in the same order (inf for a
    job with no exclusive time).  O(n log n): one sweep builds the entitlement's running integral."""
    events = sorted({t for a, f, _x, _g in jobs for t in (float(a), float(f))})
    delta = {}
    for a, f, _x, g in jobs:
        delta[float(a)] = delta.get(float(a), 0) + int(g)
        delta[float(f)] = delta.get(float(f), 0) - int(g)
    cum, demand, total = [0.0], 0, 0.0
    share = []
    for t0, t1 in zip(events, events[1:]):
        demand += delta[t0]
        s = min(1.0, num_gpus / demand) if demand > 0 else 1.0
        share.append(s)
        total += s * (t1 - t0)
        cum.append(total)

    def entitled(t: float) -> float:          # integral of the share from the first event to t
        i = bisect.bisect_right(events, t) - 1
        if i >= len(share):
            return cum[-1]
        return cum[i] + share[i] * (t - events[i])

    return [(entitled(float(f)) - entitled(float(a))) / x if x > 0 else math.inf for a, f, x, _g in jobs]


def percentile(values, q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between order statistics (numpy's default)."""
    v = sorted(values)
    if not v:
        return 0.0
    k = (len(v) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def lower_bound(jobs, num_gpus: int) -> float:
    """Physical lower bound of the makespan.  `jobs`: (arrival s, exclusive run time s, GPUs) per job."""
    jobs = sorted((float(a), float(x), int(g)) for a, x, g in jobs)
    if not jobs:
        return 0.0
    start = jobs[0][0]
    longest = max(a - start + x for a, x, _g in jobs)
    best, suffix = 0.0, 0.0
    for i in range(len(jobs) - 1, -1, -1):              # suffix sums: work arriving at or after jobs[i]
        suffix += jobs[i][1] * jobs[i][2]
        if i == 0 or jobs[i - 1][0] < jobs[i][0]:       # first job of a group with the same arrival time
            best = max(best, jobs[i][0] - start + suffix / num_gpus)
    return max(best, longest)


def compute(policy: str, records: list[JobRecord], num_gpus: int, n_trace: int | None = None,
            busy_gpu_seconds: float | None = None, start_time: float = 0.0, lb: float | None = None) -> Metrics:
    if not records:
        raise ValueError("no finished jobs to score")
    records = sorted(records, key=lambda r: (r.arrival_time, str(r.job_id)))
    n_trace = n_trace or len(records)
    makespan = max(r.finish_time for r in records) - start_time
    jct = [r.jct for r in records]
    rho = rho_values(records, n_trace, num_gpus)
    busy = busy_gpu_seconds if busy_gpu_seconds is not None else sum(r.run_time * r.num_gpus for r in records)
    dyn = dynamic_ftf([(r.arrival_time, r.finish_time, r.isolated_runtime, r.num_gpus) for r in records], num_gpus)
    return Metrics(policy=policy, jobs=len(records), gpus=num_gpus, makespan=makespan, avg_jct=sum(jct) / len(jct),
                   worst_rho=max(rho), unfair_fraction=100.0 * sum(x > UNFAIR for x in rho) / len(rho),
                   unfair_fraction_1_1=100.0 * sum(x > 1.1 for x in rho) / len(rho),
                   utilization=busy / (num_gpus * makespan) if makespan > 0 else 0.0, rho=rho, jct=jct,
                   lower_bound=lb or 0.0, makespan_over_lb=makespan / lb if lb else 0.0,
                   ftf_dynamic_worst=max(dyn), ftf_dynamic_p95=percentile(dyn, 95),
                   ftf_dynamic_unfair=100.0 * sum(x > UNFAIR for x in dyn) / len(dyn), ftf_dynamic=dyn)
