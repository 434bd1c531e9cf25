"""AlloX (docs/reference.md §7.2): among the jobs not holding an allocation, the max(int(alpha m), n)
longest-waiting ones are matched to (GPU, k-th-from-last position) slots by a min-cost bipartite matching
(Hungarian method, scipy's linear_sum_assignment) with cost k x remaining processing time + time waited;
the first job of each GPU gets X = 1/sf.  Jobs that hold a whole allocation keep it (effectively
non-preemptive for 1-GPU jobs, as in the reference)."""
from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import linear_sum_assignment

from shockwave_lab.baselines.time_fraction import TimeFractionPolicy


class AlloXConfig(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid", frozen=True)

    # share of the waiting jobs that enter each matching (the reference's alpha, utils.py:608)
    alpha: float = Field(0.2, ge=0.0, le=1.0)


class AlloX(TimeFractionPolicy):
    name = "allox"
    label = "AlloX"
    reference_name = "allox"
    description = "waiting jobs matched to GPU slots by least total completion time; non-preemptive."
    config_model = AlloXConfig
    baseline = True
    order = 30

    def __init__(self, config: AlloXConfig | None = None):
        super().__init__(config)
        self._prev: dict = {}

    def allocate(self, view):
        jobs = {j.job_id: j for j in view.jobs}
        unallocated, holding = [], []
        for job_id in jobs:
            (holding if self._prev.get(job_id) == 1.0 else unallocated).append(job_id)
        n = view.num_gpus - len(holding)
        since = {j: view.now - jobs[j].arrival_time for j in jobs}
        unallocated.sort(key=lambda j: -since[j])
        chosen = unallocated[: max(int(self.config.alpha * len(unallocated)), n)]
        alloc = {j: self._prev.get(j, 0.0) for j in jobs}
        m = len(chosen)
        if m and n > 0:
            proc = np.array([jobs[j].steps_remaining / (jobs[j].throughput or 1e-10) for j in chosen])
            wait = np.array([since[j] for j in chosen])
            k = np.repeat(np.arange(1, m + 1), n)                       # column c = (k-1) * n + gpu
            cost = proc[:, None] * k[None, :] + wait[:, None]
            rows, cols = linear_sum_assignment(cost)
            per_gpu: dict[int, list] = {}
            for r, c in zip(rows, cols):
                per_gpu.setdefault(c % n, []).append((chosen[r], c // n))
            for gpu, lst in per_gpu.items():
                first = max(lst, key=lambda e: e[1])[0]               # largest k runs first
                alloc[first] = 1.0 / jobs[first].num_gpus
        self._prev = dict(alloc)
        return alloc
