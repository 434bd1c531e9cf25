"""OSSP / min total duration: the smallest makespan T for which every job can finish its remaining steps
at its allocated rate (sum_i sf_i X_i <= G, X_i <= 1, thr_i X_i >= R_i / T).

T is bisected exactly as the reference does (from [100 s, 1e6 s] until within 5%, widening by 10x when
nothing is feasible).  The LP has no objective, so an interior-point solver returns the analytic centre
of the feasible set; we compute that centre directly (a Newton-free nested bisection on the barrier's
optimality conditions).
"""
from __future__ import annotations

import numpy as np

from shockwave_lab.baselines.center import analytic_center
from shockwave_lab.baselines.time_fraction import TimeFractionPolicy


def _feasible(lower, sf, capacity):
    return bool(np.all(lower <= 1.0)) and float(np.sum(sf * lower)) <= capacity


def min_makespan_allocation(R, thr, sf, capacity):
    max_t, min_t = 1e6, 100.0
    last_max, best_t = max_t, None
    while best_t is None:
        while 1.05 * min_t < max_t:
            T = (min_t + max_t) / 2.0
            if _feasible(R / (thr * T), sf, capacity):
                best_t, max_t = T, T
            else:
                min_t = T
        max_t, min_t = last_max * 10.0, last_max
        last_max *= 10
        if last_max > 1e15:
            return np.minimum(1.0, capacity / (len(R) * sf))
    return analytic_center(R / (thr * best_t), sf, capacity)


class MinTotalDuration(TimeFractionPolicy):
    name = "min_total_duration"
    label = "OSSP"
    aliases = ("ossp",)
    reference_name = "min_total_duration"
    description = "min total duration, the smallest makespan every job can meet."
    baseline = True
    order = 50

    def allocate(self, view):
        jobs = list(view.jobs)
        if not jobs:
            return {}
        R = np.array([max(j.steps_remaining, 0.0) for j in jobs], float)
        thr = np.array([max(j.throughput, 1e-12) for j in jobs], float)
        sf = np.array([j.num_gpus for j in jobs], float)
        x = min_makespan_allocation(R, thr, sf, float(view.num_gpus))
        return {j.job_id: float(np.clip(x[k], 0.0, 1.0)) for k, j in enumerate(jobs)}
