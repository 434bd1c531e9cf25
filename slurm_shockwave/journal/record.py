"""The record of one round: the views decided on, the decision with its plan record per job, and what the
backend knows beside them (`ClusterBackend.round_context`).  The round loop makes it, the controller's
journal writes it once per round (`StateStore.record_round`), and `status`, `explain` and the metrics read
it back as the same type (`RoundRecord.from_json`).

Serialised as strict JSON (strict_json.dumps): a non-finite number (nan, inf) is written as null, never as
`Infinity`.  The backend's context is a typed `RoundContext` (journal/context.py); a record whose context is of the
older dict form reads tolerantly (missing fields at their defaults).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_shockwave.journal.context import JobContext, RoundContext
from solver.types import ClusterView, JobPlan, JobView, RoundDecision


@dataclass(frozen=True)
class RoundRecord:
    view: ClusterView
    decision: RoundDecision
    decide_seconds: float = 0.0
    fallback: bool = False  # the loop replaced the policy's decision by the fallback
    policy: str = ""
    context: RoundContext = field(default_factory=RoundContext)  # the backend's (a mapping: its dict form)

    def __post_init__(self):
        if not isinstance(self.context, RoundContext):
            object.__setattr__(self, "context", RoundContext.coerce(self.context))

    @property
    def round_index(self) -> int:
        return self.view.round_index

    @property
    def run(self) -> tuple:
        return tuple(self.decision.run)

    def plan(self, job_id) -> JobPlan:
        return self.decision.plans.get(job_id) or JobPlan(job_id)

    def job_context(self, job_id) -> JobContext:
        return self.context.job(job_id)

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict:
        """Plain JSON types; non-finite numbers are left to `strict_json.dumps`, which writes them as null."""
        v, d = self.view, self.decision
        jobs = {}
        for j in v.jobs:
            jobs[str(j.job_id)] = {
                "view": view_to_json(j),
                "plan": _plan_json(self.plan(j.job_id)),
                "context": self.job_context(j.job_id).to_json(),
            }
        return {
            "round": v.round_index,
            "now": v.now,
            "round_length": v.round_length,
            "capacity": v.num_gpus,
            "capacity_by_type": dict(v.capacity),
            "cluster_nodes": {n: list(tg) for n, tg in v.nodes.items()},
            "total_jobs": v.total_jobs,
            "run": [str(j) for j in d.run],
            "path": d.path,
            "solve_time_s": d.solve_time_s,
            "solver_status": d.solver_status,
            "window_rounds": d.window_rounds,
            "fallback_reason": d.fallback_reason,
            "placement": {str(j): dict(p) for j, p in d.placement.items()},
            "nodes": {str(j): list(n) for j, n in d.nodes.items()},
            "decide_seconds": self.decide_seconds,
            "fallback": self.fallback,
            "policy": self.policy,
            "cluster": self.context.cluster_json(),
            "jobs": jobs,
        }

    @classmethod
    def from_json(cls, d: Mapping) -> RoundRecord:
        jobs = d.get("jobs") or {}
        views = tuple(view_from_json(j["view"]) for j in jobs.values())
        by_key = {str(v.job_id): v.job_id for v in views}
        plans = {}
        for key, j in jobs.items():
            p = {k: x for k, x in (j.get("plan") or {}).items() if k in _PLAN_FIELDS}
            p["job_id"] = by_key.get(key, key)
            plans[p["job_id"]] = JobPlan(**p)
        run = tuple(by_key.get(str(x), x) for x in d.get("run") or ())
        by_type = {str(t): int(n) for t, n in (d.get("capacity_by_type") or {}).items()}
        view = ClusterView(
            now=float(d.get("now") or 0.0),
            round_index=int(d.get("round") or 0),
            round_length=float(d.get("round_length") or 0.0),
            num_gpus=int(d.get("capacity") or 0),
            jobs=views,
            total_jobs=int(d.get("total_jobs") or 0),
            capacity=by_type,
            nodes={str(n): (str(tg[0]), int(tg[1])) for n, tg in (d.get("cluster_nodes") or {}).items()},
        )
        decision = RoundDecision(
            run=run,
            plans=plans,
            path=d.get("path") or "",
            solve_time_s=float(d.get("solve_time_s") or 0.0),
            solver_status=d.get("solver_status") or "",
            window_rounds=d.get("window_rounds"),
            fallback_reason=d.get("fallback_reason") or "",
            placement={by_key.get(k, k): dict(p) for k, p in (d.get("placement") or {}).items()},
            nodes={by_key.get(k, k): tuple(map(str, n)) for k, n in (d.get("nodes") or {}).items()},
        )
        context = RoundContext.from_json(d.get("cluster"), {k: j.get("context") for k, j in jobs.items()})
        return cls(
            view,
            decision,
            float(d.get("decide_seconds") or 0.0),
            bool(d.get("fallback")),
            d.get("policy") or "",
            context,
        )


#: longest batch-size history shown (and kept in the jobs table) as a plain list
SHORT_HISTORY = 1000
_PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(JobPlan))


def _plan_json(plan: JobPlan) -> dict:
    """A JobPlan's fields (all plain values: a shallow copy is dataclasses.asdict, without its recursive walk)."""
    return {name: getattr(plan, name) for name in _PLAN_FIELDS}


_VIEW_FIELDS = {f.name for f in dataclasses.fields(JobView)}


def view_to_json(v: JobView) -> dict:
    """Everything needed to rebuild the exact JobView; the batch-size history run-length encoded (bounded
    whatever a job reports)."""
    out = {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
    out["epoch_duration_by_bs"] = {str(k): d for k, d in v.epoch_duration_by_bs.items()}
    out["throughput_by_gpus"] = {str(k): t for k, t in v.throughput_by_gpus.items()}
    # itertools.groupby runs in C: 10x faster than a Python loop over 1000-epoch histories
    out["bs_history"] = [[b, sum(1 for _ in g)] for b, g in itertools.groupby(v.bs_history)]
    return out


def view_from_json(d: Mapping) -> JobView:
    full = {k: x for k, x in d.items() if k in _VIEW_FIELDS}
    full["epoch_duration_by_bs"] = {
        int(k): float(x) for k, x in (full.get("epoch_duration_by_bs") or {}).items() if x is not None
    }
    full["throughput_by_gpus"] = {
        int(k): float(x) for k, x in (full.get("throughput_by_gpus") or {}).items() if x is not None
    }
    full["throughput_by_type"] = {
        str(k): float(x) for k, x in (full.get("throughput_by_type") or {}).items() if x is not None
    }
    for key in ("nodes", "allowed_nodes"):
        full[key] = tuple(map(str, full.get(key) or ()))
    rng = full.get("gpus_range")
    full["gpus_range"] = (int(rng[0]), int(rng[1])) if isinstance(rng, (list, tuple)) and len(rng) == 2 else None
    full["bs_history"] = tuple(b for b, n in (full.get("bs_history") or ()) for _ in range(int(n)))
    for key in ("steps_done", "total_steps", "throughput", "run_time", "arrival_time"):
        if full.get(key) is None and key in full:
            full[key] = 0.0
    return JobView(**full)
