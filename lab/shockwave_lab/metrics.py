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
- restarts (ours): `restarts_mean`, the mean restarts per job (a run after the job had run, elsewhere or after a
  preemption), and `restarts_per_hour_worst`, the most restarts any job had per hour of its own run time
  (restarts x 3600 / the seconds it held GPUs; 0 for a job never restarted);
- per user and per account (ours; `group_shares`, with more than one user or account): each one's share of the
  GPU-seconds held (round start to the job's end in the round, GPUs placed on) while **every** user (account)
  had an active job, `user_gpu_share` (`account_gpu_share`); its fair share over the same time
  (`user_fair_share`: at each time the max-min split of the G GPUs among the users by the GPUs their active jobs
  demand, water filling); `user_share_min` = the smallest share / fair share (1: every user got its fair share; a
  policy fair between jobs gives less to users with fewer jobs); `user_share_window_s` = how long every user had
  an active job; and each one's worst dynamic FTF (`user_ftf_dynamic_worst`, `account_ftf_dynamic_worst`).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass, field

from slurm_shockwave.backends.base import JobRecord


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
    restarts_mean: float = 0.0
    restarts_per_hour_worst: float = 0.0
    user_gpu_share: dict = field(default_factory=dict)            # empty: fewer than two users
    user_fair_share: dict = field(default_factory=dict)
    user_share_min: float = 0.0
    user_share_window_s: float = 0.0
    user_ftf_dynamic_worst: dict = field(default_factory=dict)
    account_gpu_share: dict = field(default_factory=dict)         # empty: fewer than two accounts
    account_fair_share: dict = field(default_factory=dict)
    account_ftf_dynamic_worst: dict = field(default_factory=dict)

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
    exclusive run time, GPUs[, the cluster's GPUs at its speed]) per job, in any order; returns rho_dyn per job in
    the same order (inf for a job with no exclusive time).  The optional fifth value replaces G for that job (on a
    cluster of several types, docs/fairness.md).  O(n log n) per distinct G: one sweep builds the entitlement's
    running integral."""
    events = sorted({t for a, f, *_rest in jobs for t in (float(a), float(f))})
    delta = {}
    for a, f, _x, g, *_rest in jobs:
        delta[float(a)] = delta.get(float(a), 0) + int(g)
        delta[float(f)] = delta.get(float(f), 0) - int(g)
    demands, demand = [], 0
    for t0 in events[:-1]:
        demand += delta[t0]
        demands.append(demand)
    integrals: dict = {}

    def integral(G):
        """(running integral at each event, share per segment) of min(1, G / D(t))."""
        if G not in integrals:
            cum, total, share = [0.0], 0.0, []
            for d, t0, t1 in zip(demands, events, events[1:]):
                s = min(1.0, G / d) if d > 0 else 1.0
                share.append(s)
                total += s * (t1 - t0)
                cum.append(total)
            integrals[G] = (cum, share)
        return integrals[G]

    def entitled(t: float, G) -> float:          # integral of the share from the first event to t
        cum, share = integral(G)
        i = bisect.bisect_right(events, t) - 1
        if i >= len(share):
            return cum[-1]
        return cum[i] + share[i] * (t - events[i])

    out = []
    for a, f, x, _g, *rest in jobs:
        G = rest[0] if rest and rest[0] else num_gpus
        out.append((entitled(float(f), G) - entitled(float(a), G)) / x if x > 0 else math.inf)
    return out


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
    """Physical lower bound of the makespan.  `jobs`: (arrival s, exclusive run time s, GPUs) per job (an elastic
    job: its fastest time, and GPUs such that their product is its least GPU-seconds: simulate._elastic_bound)."""
    jobs = sorted((float(a), float(x), float(g)) for a, x, g in jobs)
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


def _union(intervals) -> list[tuple[float, float]]:
    out: list = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersect(x, y) -> list[tuple[float, float]]:
    out, i, k = [], 0, 0
    while i < len(x) and k < len(y):
        a, b = max(x[i][0], y[k][0]), min(x[i][1], y[k][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[k][1]:
            i += 1
        else:
            k += 1
    return out


def group_shares(records: list[JobRecord], usage, group, num_gpus: int = 0) -> tuple[dict, float, dict]:
    """({group: share of the GPU-seconds held while every group had an active job}, that time in seconds, {group:
    its max-min fair share over that time (group_fair; {} without num_gpus)}); ({}, 0, {}) with fewer than two
    groups.  `usage`: (job, start, end, GPUs) per dispatch; `group(record)`: its group."""
    of = {r.job_id: group(r) for r in records}
    lives: dict = {}
    for r in records:
        lives.setdefault(of[r.job_id], []).append((float(r.arrival_time), float(r.finish_time)))
    if len(lives) < 2:
        return {}, 0.0, {}
    window = None
    for g in sorted(lives):
        mine = _union(lives[g])
        window = mine if window is None else _intersect(window, mine)
    starts = [a for a, _b in window]
    held = {g: 0.0 for g in lives}
    for jid, a, b, gpus in usage:
        if jid not in of:
            continue
        for k in range(max(0, bisect.bisect_right(starts, a) - 1), len(window)):
            lo, hi = window[k]
            if lo >= b:
                break
            held[of[jid]] += max(0.0, min(b, hi) - max(a, lo)) * gpus
    total = sum(held.values())
    span = sum(b - a for a, b in window)
    fair = group_fair(records, window, group, num_gpus) if num_gpus else {}
    return ({g: x / total for g, x in sorted(held.items())} if total > 0 else {}), span, fair


def _max_min(demands: dict, capacity: float) -> dict:
    """The max-min fair split of `capacity` GPUs among groups demanding `demands` GPUs (water filling)."""
    out, left, rest = {}, float(capacity), sorted(demands, key=lambda g: (demands[g], str(g)))
    while rest:
        level = left / len(rest)
        if demands[rest[0]] > level:
            out.update({g: level for g in rest})
            break
        g = rest.pop(0)
        out[g] = demands[g]
        left -= demands[g]
    return out


def group_fair(records: list[JobRecord], window, group, num_gpus: int) -> dict:
    """{group: its share of the GPU-seconds it was entitled to over `window` (sorted disjoint intervals)}: at each
    time, the max-min fair split of the GPUs among the groups by the GPUs their active jobs demand."""
    delta: dict = {}
    for r in records:
        for t, d in ((float(r.arrival_time), r.num_gpus), (float(r.finish_time), -r.num_gpus)):
            delta.setdefault(t, {})[group(r)] = delta.get(t, {}).get(group(r), 0) + d
    times = sorted(set(delta) | {t for w in window for t in w})
    demand, entitled, k = {}, {}, 0
    for t0, t1 in zip(times, times[1:]):
        for g, d in delta.get(t0, {}).items():
            demand[g] = demand.get(g, 0) + d
        while k < len(window) and window[k][1] <= t0:
            k += 1
        if k == len(window):
            break
        if window[k][0] <= t0:                   # the window's bounds are event times: inside or outside whole
            for g, x in _max_min({g: d for g, d in demand.items() if d > 0}, num_gpus).items():
                entitled[g] = entitled.get(g, 0.0) + x * (t1 - t0)
    total = sum(entitled.values())
    return {g: x / total for g, x in sorted(entitled.items())} if total > 0 else {}


def group_worst(records: list[JobRecord], values: list[float], group) -> dict:
    """{group: the largest of `values` (one per record, same order) among its jobs}; {} with fewer than two."""
    out: dict = {}
    for r, v in zip(records, values):
        out[group(r)] = max(out.get(group(r), -math.inf), v)
    return dict(sorted(out.items())) if len(out) > 1 else {}


def compute(policy: str, records: list[JobRecord], num_gpus: int, n_trace: int | None = None,
            busy_gpu_seconds: float | None = None, start_time: float = 0.0, lb: float | None = None,
            usage=None) -> Metrics:
    """`usage`: (job, start, end, GPUs) of every dispatch (the per-user and per-account GPU shares; None: none)."""
    if not records:
        raise ValueError("no finished jobs to score")
    records = sorted(records, key=lambda r: (r.arrival_time, str(r.job_id)))
    n_trace = n_trace or len(records)
    makespan = max(r.finish_time for r in records) - start_time
    jct = [r.jct for r in records]
    rho = rho_values(records, n_trace, num_gpus)
    busy = busy_gpu_seconds if busy_gpu_seconds is not None else sum(r.run_time * r.num_gpus for r in records)
    dyn = dynamic_ftf([(r.arrival_time, r.finish_time, r.isolated_runtime, r.num_gpus, r.cluster_gpus)
                       for r in records], num_gpus)
    user_share, window, user_fair = group_shares(records, usage or (), lambda r: r.user, num_gpus)
    account_share, _, account_fair = group_shares(records, usage or (), lambda r: r.account or r.user, num_gpus)
    return Metrics(policy=policy, jobs=len(records), gpus=num_gpus, makespan=makespan, avg_jct=sum(jct) / len(jct),
                   worst_rho=max(rho), unfair_fraction=100.0 * sum(x > UNFAIR for x in rho) / len(rho),
                   unfair_fraction_1_1=100.0 * sum(x > 1.1 for x in rho) / len(rho),
                   utilization=busy / (num_gpus * makespan) if makespan > 0 else 0.0, rho=rho, jct=jct,
                   lower_bound=lb or 0.0, makespan_over_lb=makespan / lb if lb else 0.0,
                   ftf_dynamic_worst=max(dyn), ftf_dynamic_p95=percentile(dyn, 95),
                   ftf_dynamic_unfair=100.0 * sum(x > UNFAIR for x in dyn) / len(dyn), ftf_dynamic=dyn,
                   restarts_mean=sum(r.restarts for r in records) / len(records),
                   restarts_per_hour_worst=max((3600.0 * r.restarts / r.run_time for r in records
                                                if r.restarts and r.run_time > 0), default=0.0),
                   user_gpu_share=user_share, user_share_window_s=window, user_fair_share=user_fair,
                   user_share_min=min((user_share.get(u, 0.0) / x for u, x in user_fair.items() if x > 0),
                                      default=0.0) if user_share else 0.0,
                   user_ftf_dynamic_worst=group_worst(records, dyn, lambda r: r.user),
                   account_gpu_share=account_share, account_fair_share=account_fair,
                   account_ftf_dynamic_worst=group_worst(records, dyn, lambda r: r.account or r.user))
