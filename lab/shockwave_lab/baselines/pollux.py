"""Pollux (Qiao et al., OSDI '21) as its published artifact allocates GPUs, with the batch sizes the trace gives.

Read, not copied: petuum/adaptdl, branch osdi21-artifact (commit c793c70): simulator/pollux.py (`Problem.__init__`
re-bases every speedup on the fair-share allocation; `Problem._evaluate` is the fitness below),
simulator/speedup.py (speedup = goodput / base goodput, 0 on no GPUs) and simulator/simulator.py (`Job.reallocate`
counts restarts; `get_pollux_job_info`: age = now - submission, every job preemptible, min 0 replicas).

Each round every active job j gets a GPU count n_j: 0 or a count its view has a throughput for
(`JobView.throughput_by_gpus`; a job without them: its own gang), all on one GPU type (its requested one; one it
can run on, `JobView.throughput_by_type`), within each type's GPUs, maximising the power mean of the speedups

    fitness = ((1/J) * sum_j (s_j(n_j) + 1e-3)^p)^(1/p),   p = -1 ("more negative = more fair")
    s_j(n)  = (thr_j(n) / thr_j(n_fair)) / gpus_per_node * R_j      (s_j(0) = 0)
    n_fair  = ceil(G / J)                the fair share (the artifact's fair_replicas, one GPU per replica)
    R_j     = max(age_j - 30 r_j, 0) / (age_j + 30) when n_j differs from the job's current count, else 1
              (the restart factor; age_j = now - arrival, r_j = its reallocations after its first allocation)

On a cluster of several GPU types thr_j(n) is on the type considered (`JobView.rate`) and the base stays the
job's reference type's, so a slower type gives a smaller speedup: the artifact has one GPU type; this is the
simplest heterogeneity-aware reading of its fitness (ours).

The artifact scales speedups by dominant share x nodes = 1 / GPUs per node (16 nodes x 4 GPUs there); a common
factor, it only weighs the 1e-3 floor.  thr_j(n_fair) between profiled counts is interpolated linearly, below
the smallest scaled linearly from it, above the largest is the largest's (a share a job cannot use is the part
it can).

Batch sizes stay the trace's (the job's current one): Pollux's goodput is throughput x statistical efficiency
and the efficiency depends only on the batch size, so with the batch size fixed the speedup is this throughput
ratio.  Adapting the batch size belongs to the user here; this is Pollux's allocation without its batch-size
tuning.

Search: the artifact runs an unseeded NSGA-II genetic search (population 100, 100 generations, every 60 s) and
picks the best fitness.  With p < 0 maximising the power mean is minimising sum_j (s_j + 1e-3)^p, a sum of
per-job terms under per-type capacity sums, so a dynamic programme over the free GPUs of each type finds the
exact optimum the genetic search looks for, deterministically (tests/test_pollux.py checks it against brute
force).  Equal fitness goes to the larger sum of speedups (the artifact's second objective, cluster utility, is
that sum over the GPUs of the nodes in use, so such a solution dominates), then to the job's current count.
Here it decides once per round (120 s), and the simulator charges its own restart penalty (20 s).
"""
from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from solver.types import ClusterView, JobPlan, RoundDecision
from solver.policies.base import Policy

FLOOR = 1e-3        # the artifact's floor inside the power mean


class PolluxConfig(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid", frozen=True)

    p: float = Field(-1.0, lt=0.0, ge=-100.0, description="exponent of the power mean of speedups (the "
                     "artifact's -1; more negative: more fair)")
    restart_delay_s: float = Field(30.0, ge=0.0, le=86400.0, description="seconds a reallocation costs in the "
                                   "restart factor (the artifact's 30 s rescale time)")
    gpus_per_node: int = Field(4, ge=1, le=1024, description="GPUs per node of the speedup scale 1 / GPUs per "
                               "node (the artifact's 4-GPU nodes); only weighs the 1e-3 floor")


def throughput_at(points: dict, n: float) -> float:
    """A job's throughput at `n` GPUs from its profiled {count: it/s}: linear between counts, linear through 0
    below the smallest, the largest count's above it."""
    counts = sorted(points)
    if n <= counts[0]:
        return points[counts[0]] * n / counts[0]
    if n >= counts[-1]:
        return points[counts[-1]]
    return float(np.interp(n, counts, [points[c] for c in counts]))


def best_allocation(options: list, caps: list[int]) -> list[int]:
    """The exact optimum of a separable allocation: per job a list of options (type index, GPUs, cost, tie), one
    option taken per job, the GPUs per type within `caps`, the sum of costs least, then the sum of ties, then the
    earlier option of each job.  Returns the option index per job.  A dynamic programme over the GPUs left per
    type (dimension = number of types)."""
    shape = tuple(c + 1 for c in caps)
    cost, tie = np.zeros(shape), np.zeros(shape)
    picks, scale = [], 1.0
    for opts in options:
        scale += max(abs(c) for _t, _n, c, _s in opts)
        tol = 1e-9 * scale           # sums of floats: equal within rounding is a tie
        best_c, best_s = np.full(shape, np.inf), np.full(shape, np.inf)
        pick = np.full(shape, -1, dtype=np.int32)
        for k, (t, n, c, s) in enumerate(opts):
            if n >= shape[t]:
                continue
            cand_c, cand_s = np.full(shape, np.inf), np.full(shape, np.inf)
            dst = [slice(None)] * len(shape)
            src = list(dst)
            dst[t], src[t] = slice(n, None), slice(0, shape[t] - n)
            cand_c[tuple(dst)] = cost[tuple(src)] + c
            cand_s[tuple(dst)] = tie[tuple(src)] + s
            better = (cand_c < best_c - tol) | ((cand_c <= best_c + tol) & (cand_s < best_s))
            best_c, best_s = np.where(better, cand_c, best_c), np.where(better, cand_s, best_s)
            pick = np.where(better, k, pick)
        cost, tie = best_c, best_s
        picks.append(pick)
    left, out = list(caps), []
    for opts, pick in zip(reversed(options), reversed(picks)):
        k = int(pick[tuple(left)])
        t, n, _c, _s = opts[k]
        left[t] -= n
        out.append(k)
    return out[::-1]


class Pollux(Policy):
    name = "pollux"
    label = "Pollux"
    description = "Pollux's allocation (OSDI '21 artifact): GPU counts maximising a p = -1 power mean of speedups."
    config_model = PolluxConfig
    baseline = True
    order = 62

    def __init__(self, config: PolluxConfig | None = None):
        super().__init__(config)
        self._alloc: dict = {}       # job -> [GPU type, count] it was given last round
        self._restarts: dict = {}    # job -> reallocations after its first allocation (-1: never allocated)

    def decide(self, view: ClusterView) -> RoundDecision:
        jobs = sorted(view.jobs, key=lambda j: (j.arrival_time, str(j.job_id)))
        if not jobs:
            return RoundDecision()
        cfg = self.config
        types = sorted(view.capacity)
        caps = [int(view.capacity[t]) for t in types]
        n_fair = math.ceil(view.num_gpus / len(jobs))
        options, current = [], {}
        for j in jobs:
            points = {int(n): float(x) for n, x in j.throughput_by_gpus.items() if x > 0} or \
                ({j.num_gpus: float(j.throughput)} if j.throughput > 0 else {})
            cur = tuple(self._alloc.get(j.job_id, ())) if j.ran_last_round else ()
            if j.ran_last_round and not cur:                    # running before this policy saw it: its gang
                cur = (j.gpu_type or types[0], j.num_gpus)
            current[j.job_id] = cur
            base = throughput_at(points, n_fair) if points else 0.0
            age = max(0.0, view.now - j.arrival_time)
            r = max(0, self._restarts.get(j.job_id, -1))
            restart = max(age - cfg.restart_delay_s * r, 0.0) / (age + cfg.restart_delay_s) \
                if age + cfg.restart_delay_s > 0 else 0.0
            opts = [(0, 0, FLOOR ** cfg.p, 0.0)]
            for ti, t in enumerate(types):
                if j.gpu_type is not None and t != j.gpu_type or j.throughput_by_type and t not in j.throughput_by_type:
                    continue
                for n, thr in sorted(points.items()):
                    thr = j.rate(t, n) if j.throughput_by_type else thr
                    if n > caps[ti] or base <= 0 or thr <= 0:
                        continue
                    speedup = thr / base
                    s = speedup / cfg.gpus_per_node * (1.0 if (t, n) == cur else restart)
                    opt = (ti, n, (s + FLOOR) ** cfg.p, -speedup)
                    if (t, n) == cur:
                        opts.insert(0, opt)          # equal on both objectives: keep the current count
                    else:
                        opts.append(opt)
            options.append(opts)
        picks = best_allocation(options, caps)
        run, placement = [], {}
        for j, opts, k in zip(jobs, options, picks):
            ti, n, _c, _s = opts[k]
            got = (types[ti], n) if n else ()
            if got and got != current[j.job_id]:
                self._restarts[j.job_id] = self._restarts.get(j.job_id, -1) + 1
            if got:
                run.append(j.job_id)
                placement[j.job_id] = {types[ti]: n}
                self._alloc[j.job_id] = list(got)
            else:
                self._alloc.pop(j.job_id, None)
        active = {j.job_id for j in jobs}
        self._alloc = {k: v for k, v in self._alloc.items() if k in active}
        self._restarts = {k: v for k, v in self._restarts.items() if k in active}
        return RoundDecision(run=tuple(run), placement=placement,
                             plans={jid: JobPlan(jid, rule="policy") for jid in run})

    def state_dict(self) -> dict:
        return {"alloc": [[k, v] for k, v in self._alloc.items()],
                "restarts": [[k, v] for k, v in self._restarts.items()]}

    def load_state_dict(self, state: dict) -> None:
        self._alloc = {k: list(v) for k, v in state["alloc"]}
        self._restarts = {k: int(v) for k, v in state["restarts"]}
