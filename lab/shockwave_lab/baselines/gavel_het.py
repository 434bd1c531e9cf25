"""Gavel's heterogeneity-aware max-min fairness (Narayanan et al., OSDI '20), the reference baseline on a cluster
of several GPU types.

Read, not copied: stanford-futuredata/gavel (commit c4fa400), scheduler/policies/max_min_fairness.py
(`MaxMinFairnessPolicyWithPerf`: the effective-throughput objective), max_min_fairness_water_filling.py
(`MaxMinFairnessWaterFillingPolicyWithPerf`: levels raised one after the other, jobs normalised by the throughput of
proportional.py's allocation) and scheduler.py (`_update_priorities`, `_reset_time_run_so_far`,
`_schedule_jobs_on_workers_helper`: the round mechanism per worker type).

Allocation X[i][t] (share of time job i runs on GPU type t), recomputed when jobs arrive or leave, at most every
`reset_interval` (time_fraction.py's rule):

    maximise   min_i  (sf_i / w_i) * sum_t thr_it X_it / prop_i
    subject to sum_i sf_i X_it <= G_t  (every type t),   sum_t X_it <= 1,   X >= 0

thr_it: the job's throughput on type t at its gang (JobView.throughput_by_type; 0 where it cannot run, so X_it = 0);
prop_i = sum_t thr_it G_t: its throughput under an equal share of every type (Gavel's proportional allocation, the
same for every job up to a constant), so a job's effective throughput counts in units of its fair share and a job
that is only slightly faster on V100s does not buy them from one that is much faster.  The max-min optimum is not
unique: like Gavel's water filling we raise it lexicographically, one LP (scipy's HiGHS) per level; a job whose
level constraint has a positive dual value cannot go above the level in any optimum (complementary slackness), so
it is frozen there (Gavel finds these jobs with a MILP).  With one type this is Gavel's one-type max-min fairness
(max_min_fairness.py's water filling).

Rounds, per type as Gavel's scheduler: priority_it = X_it / (time i ran on t since the reset / time any job ran on
t), X_it x 1e9 before any; deficits per type.  The types are taken fastest first (the sum of the active jobs'
normalised throughputs; Gavel's hard-coded order is V100, P100, K80), each type's queue by (priority, deficit, X),
highest first; a job runs on the first type whose queue reaches it with room for its gang (a job with no X yet is
counted against the GPUs, not started, as in time_fraction.py).
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from solver.types import ClusterView, JobPlan, RoundDecision
from solver.policies.base import Policy
from shockwave_lab.baselines.time_fraction import TimeFractionPolicy

TOL = 1e-9


def speeds(job, capacity) -> dict:
    """{type: it/s at its gang} of the types the job can run on (its view's, else every type with room)."""
    if job.throughput_by_type:
        return {t: float(x) for t, x in job.throughput_by_type.items() if x > 0 and capacity.get(t, 0) >= job.num_gpus}
    types = [job.gpu_type] if job.gpu_type is not None else list(capacity)
    return {t: float(job.throughput) for t in types if capacity.get(t, 0) >= job.num_gpus and job.throughput > 0}


def max_min_het(jobs, capacity) -> dict:
    """{job: {type: X}}: the lexicographic max-min of the normalised effective throughputs (module docstring)."""
    types = sorted(capacity)
    total = float(sum(capacity.values()))
    out = {j.job_id: {t: 0.0 for t in types} for j in jobs}
    pairs, coef, rows = [], [], []               # variable k = (job row, type); coef[k] = its objective weight
    for j in jobs:
        thr = speeds(j, capacity)
        prop = sum(x * capacity[t] for t, x in thr.items())
        if not thr or prop <= 0:
            continue
        r = len(rows)
        rows.append(j)
        for t in types:
            if t in thr:
                pairs.append((r, t))
                coef.append(j.num_gpus / max(float(j.weight), 1e-9) * thr[t] * total / prop)
    n, m = len(rows), len(pairs)
    if not n:
        return out
    C = np.zeros((n, m))
    for k, (r, _t) in enumerate(pairs):
        C[r, k] = coef[k]
    cap_rows = np.zeros((len(types), m + 1))
    one_rows = np.zeros((n, m + 1))
    for k, (r, t) in enumerate(pairs):
        cap_rows[types.index(t), k] = rows[r].num_gpus
        one_rows[r, k] = 1.0
    base_A = np.vstack([cap_rows, one_rows])
    base_b = np.concatenate([[capacity[t] for t in types], np.ones(n)])
    level = np.full(n, np.nan)                   # the frozen level of each job (nan: still rising)
    x = np.zeros(m)
    for _ in range(n):
        free = np.isnan(level)
        if not free.any():
            break
        lvl = np.zeros((n, m + 1))
        lvl[:, :m] = -C
        lvl[free, m] = 1.0                       # t - c_i . x_i <= 0 for a rising job
        b_lvl = np.where(free, 0.0, -np.nan_to_num(level))           # c_i . x_i >= its level when frozen
        res = linprog(np.concatenate([np.zeros(m), [-1.0]]), A_ub=np.vstack([base_A, lvl]),
                      b_ub=np.concatenate([base_b, b_lvl]), bounds=[(0, 1)] * m + [(0, None)], method="highs")
        if res.status != 0:
            break
        x, t_star = res.x[:m], res.x[m]
        duals = -res.ineqlin.marginals[len(base_b):]
        stuck = free & (duals > TOL)
        if not stuck.any():                      # numerically flat duals: freeze the jobs at the level
            stuck = free & (C @ x <= t_star * (1 + 1e-6) + TOL)
        level[stuck] = t_star
    for (r, t), v in zip(pairs, x):             # rounded: equal shares stay equal (ties go to the deficits)
        out[rows[r].job_id][t] = round(float(min(max(v, 0.0), 1.0)), 9)
    return out


class MaxMinFairnessHet(Policy):
    name = "max_min_fairness_het"
    label = "Gavel-het"
    aliases = ("gavel-het", "max_min_fairness_perf")
    description = ("Gavel's heterogeneity-aware max-min fairness: per-GPU-type time shares maximising the least "
                   "normalised effective throughput (LP), played per type in rounds.")
    baseline = True
    order = 11

    def __init__(self, config=None):
        super().__init__(config)
        self.allocation: dict = {}        # job -> {type: X}
        self.job_time: dict = {}          # job -> {type: seconds since the reset (from half a round)}
        self.worker_time: dict = {}       # type -> seconds any job ran on it since the reset
        self.deficits: dict = {}          # job -> {type: seconds owed}
        self.placed: dict = {}            # job -> the type it was given last round
        self.last_reset = 0.0
        self.need_update = False
        self.order: list = []
        self.origin: float | None = None

    def decide(self, view: ClusterView) -> RoundDecision:
        if self.origin is None:
            self.origin = float(view.now)
        now, half, types = float(view.now) - self.origin, view.round_length / 2.0, sorted(view.capacity)
        for job_id, seconds in view.last_round_run_time.items():
            t = self.placed.get(job_id)
            if job_id in self.job_time and t is not None:
                self.job_time[job_id][t] = self.job_time[job_id].get(t, half) + seconds
                self.worker_time[t] = self.worker_time.get(t, 0.0) + seconds
        active = {j.job_id: j for j in view.jobs}
        for job_id in [j for j in self.order if j not in active]:
            self.order.remove(job_id)
            for table in (self.job_time, self.deficits, self.allocation):
                table.pop(job_id, None)
            self.need_update = True
        for job_id in active:
            if job_id not in self.job_time:
                self.order.append(job_id)
                self.job_time[job_id] = {t: half for t in types}
                self.deficits[job_id] = {t: 0.0 for t in types}
                self.need_update = True
        if self.need_update and (now - self.last_reset >= TimeFractionPolicy.reset_interval or self.last_reset == 0):
            self._reset(now, half, types)
            self.allocation = max_min_het(view.jobs, view.capacity)
            self.need_update = False
        placement = self._select(view, active, types)
        self.placed = {j: next(iter(p)) for j, p in placement.items()}
        return RoundDecision(run=tuple(placement), placement=placement,
                             plans={j: JobPlan(j, rule="policy") for j in placement})

    def _reset(self, now: float, half: float, types: list) -> None:
        elapsed = now - self.last_reset
        for t in types:
            self.worker_time[t] = 0.0
            for job_id in self.order:
                received = self.job_time[job_id].get(t, half) - half
                should = self.allocation.get(job_id, {}).get(t, 0.0) * elapsed
                self.deficits[job_id][t] = self.deficits[job_id].get(t, 0.0) + should - received
                self.job_time[job_id][t] = half
                self.worker_time[t] += half
        self.last_reset = now

    def priority(self, job, t: str, thr: dict) -> float:
        x = self.allocation.get(job.job_id, {}).get(t)
        if not x or thr.get(t, 0.0) <= 0:
            return 0.0
        worker = self.worker_time.get(t, 0.0)
        fraction = self.job_time[job.job_id].get(t, 0.0) / worker if worker else 0.0
        return x / fraction if fraction > 0 else x * 1e9

    def _select(self, view: ClusterView, active: dict, types: list) -> dict:
        thr = {j: speeds(active[j], view.capacity) for j in self.order}
        norm = {j: sum(x * view.capacity[t] for t, x in thr[j].items()) for j in self.order}
        fast = {t: sum(thr[j].get(t, 0.0) / norm[j] for j in self.order if norm[j] > 0) for t in types}
        queue = []
        for t in sorted(types, key=lambda t: (-fast[t], t)):
            entries = [(self.priority(active[j], t, thr[j]), self.deficits[j].get(t, 0.0),
                        self.allocation.get(j, {}).get(t, 0.0), j, t) for j in self.order]
            queue += sorted(entries, key=lambda e: e[:3], reverse=True)
        free = {t: int(view.capacity[t]) for t in types}
        taken, placement = set(), {}
        for *_key, job_id, t in queue:
            job = active[job_id]
            if job_id in taken or thr[job_id].get(t, 0.0) <= 0 or job.num_gpus > free[t]:
                continue
            free[t] -= job.num_gpus
            taken.add(job_id)
            if job_id in self.allocation:
                placement[job_id] = {t: job.num_gpus}
        return placement

    def state_dict(self) -> dict:
        return {"allocation": [[k, v] for k, v in self.allocation.items()],
                "job_time": [[k, v] for k, v in self.job_time.items()], "worker_time": dict(self.worker_time),
                "deficits": [[k, v] for k, v in self.deficits.items()],
                "placed": [[k, v] for k, v in self.placed.items()],
                "last_reset": self.last_reset, "need_update": self.need_update, "order": list(self.order),
                "origin": self.origin}

    def load_state_dict(self, state: dict) -> None:
        self.allocation = {k: dict(v) for k, v in state["allocation"]}
        self.job_time = {k: dict(v) for k, v in state["job_time"]}
        self.deficits = {k: dict(v) for k, v in state["deficits"]}
        self.placed = {k: v for k, v in state["placed"]}
        self.worker_time = dict(state["worker_time"])
        self.last_reset, self.need_update = state["last_reset"], state["need_update"]
        self.order, self.origin = list(state["order"]), state["origin"]
