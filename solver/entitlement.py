"""What each active job is owed: its entitlement so far, and the default's fair-finish deadline built on it.

While a job is active (arrived, unfinished) it is entitled at each moment to min(1, G / D) of its gang, D the GPUs
the active jobs ask for: the contention it actually sees.  Summed over its life so far that is E (seconds of
exclusive run it was owed).  A job that finishes with E owed and T seconds of exclusive run time has the dynamic
finish-time fairness rho = E / T (Themis's, docs/fairness.md): the metric the study judges.

The deadline: a job started now and run to its end (rem seconds) reaches rho = (E + e rem) / T, e = the
entitlement rate now (the same for every job).  Its *latest fair start* is the time from now after which it
would pass rho* even if it ran to its end without a pause:

    latest_i = (rho* T_i - E_i) / e - rem_i,        rho* = max(1, the largest (E_j + e rem_j) / T_j now)

rho* is the worst fairness an active job would get if it started now: no job is asked to do better than that, and
every job's deadline is on that one scale, so jobs that arrive together are compared by what they are owed (a
short job's fairness falls fastest while it waits), not by when their targets were estimated.  Earliest latest
fair start first is the default's order (solver/policies/shockwave_edf.py).

Pure: numbers in, numbers out; the state (E per job) is kept over controller restarts (state_dict).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from solver.market.fairshare import gpu_share
from solver.types import ClusterView


def rate(view: ClusterView) -> float:
    """The entitlement rate now: min(1, G / D), D = the GPUs the active jobs ask for (fairshare.gpu_share)."""
    return gpu_share(view.num_gpus, [j.num_gpus for j in view.jobs if j.num_gpus > 0])


def _number(v: Any) -> float:
    """A stored value as a float; nan for anything that is not a number (dropped by the caller)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


class EntitlementTracker:
    """E per active job, accumulated at each round's view with the rate of the view before."""

    def __init__(self) -> None:
        self.owed: dict[str, float] = {}  # job key -> seconds of exclusive run owed so far
        self.last: tuple[float, float] | None = None  # (now, rate) at the last update

    def update(self, view: ClusterView) -> float:
        """Add what each active job was owed since the last view (a new job: since its arrival, at today's rate);
        forget jobs that left.  Returns the rate now."""
        now, e = float(view.now), rate(view)
        for j in view.jobs:
            key = str(j.job_id)
            if key not in self.owed:
                self.owed[key] = e * max(0.0, now - float(j.arrival_time))
            elif self.last is not None:
                self.owed[key] += self.last[1] * max(0.0, now - self.last[0])
        keys = {str(j.job_id) for j in view.jobs}
        for key in [k for k in self.owed if k not in keys]:
            del self.owed[key]
        self.last = (now, e)
        return e

    def latest_starts(
        self, view: ClusterView, total: Mapping[Any, float], remaining: Mapping[Any, float]
    ) -> dict[Any, float]:
        """{job: seconds from now to its latest fair start} (module docstring); inf for a job without a finite,
        positive total.  `total`: each job's exclusive run time (done + remaining), `remaining`: what is left."""
        e = rate(view)
        ok = {
            j.job_id
            for j in view.jobs
            if math.isfinite(total.get(j.job_id, math.nan))
            and total[j.job_id] > 0
            and math.isfinite(remaining.get(j.job_id, math.nan))
        }
        owed = {i: self.owed.get(str(i), 0.0) for i in ok}
        worst = max([1.0] + [(owed[i] + e * remaining[i]) / total[i] for i in ok])
        return {
            j.job_id: (worst * total[j.job_id] - owed[j.job_id]) / e - remaining[j.job_id]
            if j.job_id in ok
            else math.inf
            for j in view.jobs
        }

    def state_dict(self) -> dict[str, Any]:
        return {"owed": dict(self.owed), "last": list(self.last) if self.last is not None else None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        owed = {str(k): _number(v) for k, v in dict(state.get("owed", {})).items()}
        self.owed = {k: v for k, v in owed.items() if math.isfinite(v) and v >= 0}
        last = state.get("last")
        self.last = (float(last[0]), float(last[1])) if last else None
