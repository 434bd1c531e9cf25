"""`shockwave-paper`: Shockwave as published (Zheng et al., NSDI '23): the volatile Fisher market decides what runs.

Every re-solve plans a window of W rounds with the reference's relaxed program (docs/reference.md §2.4):
maximise (1/(N W)) sum_i w_i g_i log(progress_i + a_i) - k max_i (predicted time left after the window), with
the market weights w_i = B_i * rho_i^lambda for jobs projected to finish later than their fair share (rho^100 for
jobs about to finish), the Bayesian predictor's remaining times, and the makespan regulariser k.  The rounds are
ordered by Smith's rule (the reference's rank step) and idle GPUs are backfilled longest predicted remaining
first.  Only what the formulation itself implies is pinned: a finishing job (every epoch reported, still running)
keeps its GPUs until it ends.

This project's fixes that are not a change of mechanism, each named (shockwave_base.py has the shared ones):
* arrival-relative clock: F-bar and rho-hat are relative to each job's own arrival;
* no starvation: the guard (shockwave_base.py) bounds how long any job waits;
* gangs in GPU-time: the welfare weight is multiplied by the gang size g_i, so the market's equilibrium gives
  every job an equal *time* share (a g-GPU gang gets g times a 1-GPU job's GPU-time) instead of an equal GPU-time
  share that gives a gang 1/g of a 1-GPU job's time.
The hyperparameters are ShockwaveConfig's (shockwave_config.py); `explain` shows per job which rule placed it
(finishing, market, backfill, guard) and `RoundLoop.decided_by` measures the share of each.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from solver.market.backends import Backend, make_backend
from solver.market.fairshare import priority_weight
from solver.market.plan import backfill, pack_rounds
from solver.market.program import WindowJob, WindowProblem, make_window_job, solve_window
from solver.policies.shockwave_base import ShockwaveBase
from solver.policies.shockwave_config import ShockwaveConfig
from solver.types import ClusterView

log = logging.getLogger("solver.market")


class ShockwavePaper(ShockwaveBase):
    name = "shockwave-paper"
    label = "Shockwave (paper)"
    aliases = ("shockwave",)
    reference_name = "shockwave"
    description = (
        "the paper's mechanism: a windowed Nash-social-welfare (volatile Fisher) market over the "
        "Bayesian predictor's remaining times decides who runs (NSDI '23)."
    )
    config_model = ShockwaveConfig
    order = 1
    config: ShockwaveConfig

    def __init__(
        self, config: ShockwaveConfig | Mapping[str, Any] | None = None, backend: Backend | None = None
    ) -> None:
        super().__init__(config)
        self.backend = (
            backend if backend is not None else make_backend(self.config.solver, self.config.solver_num_threads)
        )

    def _fill_order(self, view: ClusterView, est: dict[Any, Any], r: int) -> tuple[list[Any], dict[Any, Any]]:
        """GPUs freed mid-plan and idle GPUs: longest predicted remaining first (the reference's backfill)."""
        G = int(view.num_gpus)
        due = self._due(view, r)
        fresh = {jid: {"fair_finish_in_s": d if math.isfinite(d) else None} for jid, d in due.items()}
        order = sorted(
            (j.job_id for j in view.jobs if 0 < j.num_gpus <= G), key=lambda i: (-est[i]["remaining"], str(i))
        )
        return order, fresh

    def _plan_window(
        self, view: ClusterView, est: dict[Any, Any], share: dict[Any, Any], fill: list[Any], fresh: dict[Any, Any]
    ) -> None:
        cfg = self.config
        r, G, D, W = int(view.round_index), int(view.num_gpus), float(view.round_length), cfg.future_rounds
        rho = self._rho_hat(view, est, share, r)
        wjobs: list[WindowJob] = []
        meta: dict[Any, dict[str, float]] = {}
        for j in view.jobs:
            e = est[j.job_id]
            lw, w = priority_weight(rho[j.job_id], e["remaining"], D, cfg.rhomax, cfg.lambda_, self.budgets[j.job_id])
            meta[j.job_id] = {"rho_hat": rho[j.job_id], "weight": w, "log_weight": lw}
            if 0 < j.num_gpus <= G:
                E, P = e["epochs"], e["progress"]
                d_future = e["remaining"] / max(E - P, 1e-9)  # predicted regimes' mean epoch duration
                offset = 0.0 if cfg.log_bases is not None else 1.0 / E
                wjobs.append(
                    make_window_job(
                        j.job_id,
                        j.num_gpus,
                        w * j.num_gpus,
                        P,
                        E,
                        d_future,
                        e["remaining"],
                        W,
                        D,
                        cfg.log_bases,
                        offset,
                    )
                )
        k = cfg.k if cfg.k_norm is None else cfg.k_norm / (max(len(wjobs), 1) * W * D)
        # a finishing job keeps its GPUs until it ends (oldest first while their gangs fit in one round)
        forced, used = set(), 0
        arrival = {j.job_id: j.arrival_time for j in view.jobs}
        for wj in sorted(
            (wj for wj in wjobs if est[wj.job_id]["finishing"]), key=lambda wj: (arrival[wj.job_id], str(wj.job_id))
        ):
            if used + wj.gpus <= G:
                wj.min_rounds = wj.nmax
                forced.add(wj.job_id)
                used += wj.gpus
        sol = solve_window(WindowProblem(wjobs, G, W, D, k), self.backend, cfg.solver_timeout, cfg.solver_rel_gap)
        counts = sol.counts
        gpus = {j.job_id: j.num_gpus for j in view.jobs}

        # jobs planned in every round first (they are in every round anyway, fewer fragments), then Smith's rule
        # w/n (the exchange-optimal order of the reference's rank objective), larger gangs first, shorter first
        def prio(i: Any) -> float:
            return meta[i]["log_weight"] - math.log(max(counts[i], 1))

        order = sorted(
            counts, key=lambda i: (i not in forced, counts[i] < W, -prio(i), -gpus[i], est[i]["remaining"], str(i))
        )
        rounds, short = pack_rounds(order, gpus, counts, G, W, pinned=forced)
        if short:
            log.info("%s: round %d packing left %d job-rounds unplaced (backfilled)", self.name, r, sum(short.values()))
        packed = [set(ids) for ids in rounds]
        rounds = backfill(rounds, fill, gpus, G)
        self.plan = {r + t: ids for t, ids in enumerate(rounds)}
        self.plan_rules = {
            r + t: {i: "finishing" if i in forced else "market" if i in packed[t] else "backfill" for i in ids}
            for t, ids in enumerate(rounds)
        }
        for jid, m in meta.items():
            m["rounds_planned"] = int(counts.get(jid, 0))
        self.plan_meta = meta
        self.last_solve_time = sol.solve_time
        self.last_status = sol.status
