"""Fair-share finish-time estimates F-bar and the projected ratio rho-hat (docs/reference.md §2.4-§2.6).

Whenever the set of active jobs changes, every active job gets a new estimate of its fair-share finish time
**relative to its own arrival**, ``FT_i = (done_i + R_i) / s`` (the reference adds ``submit_i``: an absolute
timestamp, which with Unix times makes rho-hat 1 + 1e-7 for every job), appended to its series as
``(round, FT_i)``.  The policy uses the reference's share ``s = min(1, G/N)`` (N counts jobs, as the paper's rho
does); ``gpu_share`` (``min(1, G / sum_j g_j)``, the equal time share when gangs count by their GPUs) is kept for
comparison: as the target it made 36-44% of jobs unfair on generated traces (docs/performance.md), so gangs get
their GPU-time through the market's weights instead (solver/policies/shockwave_paper.py).  The smoothed target is

    F-bar_i = 0.9 * sum_j pi_j * FT_i^(j) + 0.1 * FT_i^(latest)

where pi_j is the fraction of rounds since the job's first estimate during which estimate j was in force
(``finish_time_momentumed_average`` in the reference).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from solver.types import JobView

MOMENTUM = 0.9


def uniform_share(num_gpus: int, num_jobs: int) -> float:
    """The reference's s = min(1, G/N) (jobs, not GPUs)."""
    if num_jobs <= 0:
        return 1.0
    return min(1.0, max(num_gpus, 1) / num_jobs)


def user_shares(num_gpus: int, jobs: Iterable[JobView]) -> tuple[dict[Any, float], dict[Any, float]]:
    """Fair shares between users, not jobs: ({job: share s_i}, {job: market budget B_i}).

    Each user u (all jobs with the same JobView.user) holds the budget B_u = the mean weight of its jobs (the
    Slurm backend gives every job its user's and account's shares; 1 by default) and gets the part
    p_u = B_u / sum_v B_v of the cluster, split among its active jobs by their weights (equally when equal):
    s_i = min(1, G p_u w_i / W_u) and the market budget B_i = N p_u w_i / W_u (W_u: the weights of u's jobs;
    N active jobs, so budgets average 1).  A user who splits one job into ten gets ten jobs of a tenth of the
    share each: splitting buys nothing.  With one user and equal weights this is the reference's
    s = min(1, G/N) and B_i = 1."""
    jobs = list(jobs)
    if not jobs:
        return {}, {}
    per_user: dict[str, list[JobView]] = {}
    for j in jobs:
        per_user.setdefault(j.user, []).append(j)
    weight = {j.job_id: max(float(j.weight), 1e-9) for j in jobs}
    budget = {u: sum(weight[j.job_id] for j in js) / len(js) for u, js in per_user.items()}
    total, n = sum(budget.values()), len(jobs)
    shares: dict[Any, float] = {}
    budgets: dict[Any, float] = {}
    for u, js in per_user.items():
        part, w_u = budget[u] / total, sum(weight[j.job_id] for j in js)
        for j in js:
            shares[j.job_id] = min(1.0, max(num_gpus, 1) * part * weight[j.job_id] / w_u)
            budgets[j.job_id] = n * part * weight[j.job_id] / w_u
    return shares, budgets


def gpu_share(num_gpus: int, gangs: Iterable[int]) -> float:
    """GPU-weighted equal time share s = min(1, G / sum_j g_j) (``gangs``: GPUs of every active job)."""
    demand = sum(max(int(g), 1) for g in gangs)
    if demand <= 0:
        return 1.0
    return min(1.0, max(num_gpus, 1) / demand)


def momentum_average(series: list[Any], round_index: int, momentum: float = MOMENTUM) -> float:
    """The reference's finish_time_momentumed_average (verbatim maths)."""
    if not series:
        raise ValueError("empty finish-time series")
    rounds = [int(r) for r, _ in series]
    # estimates made "in the future" (a controller whose round counter went back) count as made now
    rounds = [min(r, round_index) for r in rounds] + [int(round_index)]
    windows = [b - a for a, b in itertools.pairwise(rounds)]
    vals = [float(v) for _, v in series]
    if max(windows) <= 0:
        probs = [0.0] * (len(vals) - 1) + [1.0]
    else:
        tot = float(sum(windows))
        probs = [w / tot for w in windows]
    avg = sum(p * v for p, v in zip(probs, vals, strict=False))
    return momentum * avg + (1.0 - momentum) * vals[-1]


class FairShareTracker:
    """Per-job series of fair-share finish-time estimates."""

    def __init__(self) -> None:
        self.series: dict[str, list[Any]] = {}

    @staticmethod
    def key(job_id: object) -> str:
        return str(job_id)

    def reestimate(self, round_index: int, estimates: Mapping[object, float]) -> None:
        """Append ``(round_index, FT_i)`` for every job in ``estimates`` (job id -> FT_i)."""
        for jid, ft in estimates.items():
            if not math.isfinite(ft):
                continue
            s = self.series.setdefault(self.key(jid), [])
            if s and s[-1][0] == round_index:
                s[-1] = [int(round_index), float(ft)]
            else:
                s.append([int(round_index), float(ft)])

    def forget(self, keep: Iterable[Any]) -> None:
        keep_keys = {self.key(j) for j in keep}
        for k in list(self.series):
            if k not in keep_keys:
                del self.series[k]

    def has(self, job_id: object) -> bool:
        return self.key(job_id) in self.series

    def fbar(self, job_id: object, round_index: int) -> float | None:
        s = self.series.get(self.key(job_id))
        if not s:
            return None
        return momentum_average(s, round_index)

    def state_dict(self) -> dict[Any, Any]:
        return {"series": {k: [list(x) for x in v] for k, v in self.series.items()}}

    def load_state_dict(self, state: Mapping[Any, Any]) -> None:
        self.series = {
            str(k): [[int(r), float(v)] for r, v in vals] for k, vals in dict(state.get("series", {})).items()
        }


def rho_hat(age: float, remaining: float, share: float, fbar: float | None) -> float:
    """Projected finish-time-fairness ratio (age + R/s) / F-bar.

    ``age``: seconds since the job's arrival; ``fbar``: its smoothed fair-share finish time, also relative to
    its arrival.  Both relative, so the ratio does not depend on the clock's origin.
    """
    if fbar is None or fbar <= 0:
        return 1.0
    return (max(age, 0.0) + remaining / share) / fbar


def priority_weight(
    rho: float,
    remaining: float,
    round_length: float,
    rhomax: float,
    lam: float,
    budget: float = 1.0,
    power_m: float = 100.0,
) -> tuple[float, float]:
    """(log of w_i, w_i) with w_i = B_i * rho^lambda (rho^100 if the job finishes within a round), 1*B_i if rho<=rhomax.

    The log is returned separately because rho^100 overflows floats quickly; callers clip w for the solver and
    rank by the log.
    """
    lb = math.log(budget) if budget > 0 else -math.inf
    if rho > rhomax and rho > 0:
        p = power_m if remaining < round_length else lam
        lw = lb + p * math.log(rho)
    else:
        lw = lb
    return lw, math.exp(min(lw, 700.0)) if lw > -math.inf else 0.0
