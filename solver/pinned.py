"""Jobs that may not be preempted: once running, such a job keeps its GPUs, its count and its nodes until it ends.

A job's view says so (`JobView.preemptible` False: a job-spec's `preemptible: false`, such as an imported trace's
high-priority job; on Slurm a job submitted with `--no-requeue`, which no checkpoint and requeue can stop and bring
back).  Whatever a policy decides, `pin` puts every such running job back in the round, on the GPU type and count it
runs on (rule "pinned"), taking the GPUs from the round's other jobs: first those the round starts (the last of the
run order first: policies list their run set in priority order), then running jobs that may be preempted (the last
first); never another pinned job.  The jobs it takes out wait (a preemption, for a running one, which the gate then
judges like any other).  Since the pinned jobs ran together in the last round, there is always room for them unless
the cluster lost GPUs; a pinned job that still does not fit (its GPUs are gone) is left out.  Before the job runs it
is scheduled like any other: only a start is decided for it.  The elastic stage never changes a pinned job's count
(`fixed`) and the node stage never moves it (solver/nodes.py).  Not preempting is a constraint, not a priority:
the policy still decides who starts, and the pinned job's run counts in its user's share as any other's.

Pure: numbers in, decision out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from solver.placement import Packer, free_gpus
from solver.types import ClusterView, JobPlan, JobView, RoundDecision

WHY = "it may not be preempted: it runs until it ends"


def pinned(view: ClusterView) -> frozenset[Any]:
    """The running jobs that may not be preempted."""
    return frozenset(j.job_id for j in view.jobs if j.ran_last_round and not j.preemptible)


def _count(job: JobView) -> int:
    """The GPUs it runs on (an elastic job may run on another count than it asked)."""
    n = job.running_gpus
    return n if n is not None and n > 0 else job.num_gpus


def pin(view: ClusterView, decision: RoundDecision) -> RoundDecision:
    """The decision with every running job that may not be preempted running on its type and count (see the module
    docstring); the decision itself when there is none, or when each already runs as it did."""
    ids = pinned(view)
    keep = [j for j in view.jobs if j.job_id in ids]
    if not keep:
        return decision
    jobs = {j.job_id: j for j in view.jobs}

    def as_it_ran(j: JobView) -> bool:
        p = decision.placement.get(j.job_id)
        return p is not None and sum(p.values()) == _count(j) and (j.running_type is None or j.running_type in p)

    if all(as_it_ran(j) for j in keep):
        return decision
    run = [x for x in decision.run if x not in ids]
    placement = {x: dict(p) for x, p in decision.placement.items() if x not in ids}
    plans = dict(decision.plans)
    for j in sorted(keep, key=lambda j: (-_count(j), str(j.job_id))):  # the widest first
        n = _count(j)
        out = _make_room(view, jobs, run, placement, j)
        if out is None:
            continue
        for x in out:
            run.remove(x)
            placement.pop(x)
            old = plans.get(x) or JobPlan(x)
            plans[x] = replace(old, rule="", next_offset=old.next_offset or 1, gpus=None, resize="")
        t = _type(j, free_gpus(view, placement))
        run.insert(0, j.job_id)
        placement[j.job_id] = {t: n}
        old = plans.get(j.job_id) or JobPlan(j.job_id)
        plans[j.job_id] = replace(
            old, rule="pinned", next_offset=0, reason=WHY, gpus=n if n != j.num_gpus else None, resize=""
        )
    return replace(decision, run=tuple(run), placement=placement, plans=plans)


def _type(job: JobView, free: dict[str, int]) -> str | None:
    """Where it runs: the type it runs on when the cluster has it, else any type that fits it (its own first)."""
    if job.running_type is not None and job.running_type in free:
        return job.running_type if free[job.running_type] >= _count(job) else None
    return Packer(free).take(_count(job), job.gpu_type, job.throughput_by_type)


def _make_room(
    view: ClusterView, jobs: dict[Any, JobView], run: list[Any], placement: dict[Any, dict[str, int]], job: JobView
) -> list[Any] | None:
    """The jobs to take out of the round (starts first, then running jobs that may be preempted; the last of the
    run order first) so that `job` fits on its type; None when even all of them would not make room."""
    order = list(reversed(run))
    movable = [x for x in order if not jobs[x].ran_last_round] + [
        x for x in order if jobs[x].ran_last_round and jobs[x].preemptible
    ]
    free = free_gpus(view, placement)
    out: list[Any] = []
    while _type(job, free) is None:
        if not movable:
            return None
        x = movable.pop(0)
        if job.running_type is not None and job.running_type in free and job.running_type not in placement[x]:
            continue  # frees nothing of its type
        out.append(x)
        for t, k in placement[x].items():
            free[t] = free.get(t, 0) + k
    return out
