"""Gavel max-min fairness (heterogeneity-agnostic): maximise min_i sf_i X_i / w_i.

With all throughputs set to 1 (as Gavel's MaxMinFairnessPolicy does) the LP is solved exactly by water
filling: X_i = min(1, t w_i / sf_i) with the level t raised until the GPUs are used up.
"""
from __future__ import annotations

from shockwave_lab.baselines.time_fraction import TimeFractionPolicy


def water_fill(demands: dict, weights: dict, capacity: float) -> dict:
    """Level t with sum_i min(cap_i, t w_i) = capacity, where cap_i = demands[i] (the GPUs of X_i = 1).

    Returns per job the GPU share min(cap_i, t w_i)."""
    if sum(demands.values()) <= capacity:
        return dict(demands)
    remaining, active = capacity, dict(weights)
    share = {}
    while active:
        level = remaining / sum(active.values())
        capped = {j for j, w in active.items() if demands[j] <= level * w}
        if not capped:
            for j, w in active.items():
                share[j] = level * w
            break
        for j in capped:
            share[j] = demands[j]
            remaining -= demands[j]
            del active[j]
    return share


class MaxMinFairness(TimeFractionPolicy):
    name = "max_min_fairness"
    label = "Gavel"
    aliases = ("gavel",)
    reference_name = "max_min_fairness"
    description = "max-min fairness, every job an equal (weighted) share of GPU time."
    baseline = True
    order = 10

    def allocate(self, view):
        demands = {j.job_id: float(j.num_gpus) for j in view.jobs}
        weights = {j.job_id: float(j.weight) for j in view.jobs}
        share = water_fill(demands, weights, float(view.num_gpus))
        return {j.job_id: min(1.0, share[j.job_id] / j.num_gpus) for j in view.jobs}
