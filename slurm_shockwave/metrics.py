"""The paper's metrics, exactly as the reference computes them (reference notes section 3.4).

- makespan: time the last job finishes (the first arrival is t = 0);
- average JCT: mean of finish - arrival;
- rho_i = JCT_i / (T_excl,i x max(1, N_trace / G)): T_excl is the exclusive run time under the job's
  profiled schedule; the contention factor uses the number of jobs in the whole trace (static);
- unfair fraction: share of jobs with rho > 1.05 (and > 1.1); worst rho = max rho;
- utilisation: busy GPU-seconds / (G x makespan);
- physical lower bound of the makespan (ours, not the reference's; `lower_bound`):
  LB = max( max over arrival times t of (t + W(>= t) / G),  max over jobs of (arrival + exclusive time) ),
  W(>= t) = GPU-seconds of the jobs arriving at or after t, each job's work = its exclusive time x its GPUs.
  Times are relative to the first arrival, as the makespan.  No schedule can beat it: the work arriving
  from t on needs W/G seconds even on all G GPUs, and a job cannot finish before arrival + its exclusive
  time.  (It ignores round boundaries, gang packing and the restart penalty, so 1.0 is not attainable.)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

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

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("rho"), d.pop("jct")
        return d


def rho_values(records: list[JobRecord], n_trace: int, num_gpus: int) -> list[float]:
    contention = max(1.0, n_trace / num_gpus)
    return [r.jct / (r.isolated_runtime * contention) if r.isolated_runtime > 0 else float("inf") for r in records]


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
    return Metrics(policy=policy, jobs=len(records), gpus=num_gpus, makespan=makespan, avg_jct=sum(jct) / len(jct),
                   worst_rho=max(rho), unfair_fraction=100.0 * sum(x > 1.05 for x in rho) / len(rho),
                   unfair_fraction_1_1=100.0 * sum(x > 1.1 for x in rho) / len(rho),
                   utilization=busy / (num_gpus * makespan) if makespan > 0 else 0.0, rho=rho, jct=jct,
                   lower_bound=lb or 0.0, makespan_over_lb=makespan / lb if lb else 0.0)
