"""Moves to a faster GPU type: on a cluster of several types, a running job goes to a faster type when that pays.

A running job's view asks for the type it runs on (`JobView.gpu_type`; on Slurm slurm/gpu_types.py, in the simulator
with the controller's rounds the same): the policies keep it there, since a move is a checkpoint and requeue.  A job
started on a slow type when nothing faster was free (a long job backfilled onto K80s) would then stay there until
it ends.  This stage, after the policy, the gate and the elastic counts (`RoundLoop`, under the gate), moves such a
job to a faster type when the time it saves pays for its restarts, like a count change (solver/elastic.py `pays`):

* *Who*: a job that ran last round and runs in this one on the type and count it ran on, that may be preempted, is
  not stopping, and whose view lists its speed on more than one type (`JobView.throughput_by_type`: the types it can
  run on, its user's type only when its user asked for one: such a job never moves).
* *What it saves*: its work left on the GPUs it keeps (`preemption.work_left_s`) times 1 - (its rate there / its
  rate on the faster type).  A move pays when that exceeds two restarts (`elastic.pays`: the move and one more), its
  restarts stay within the gate's bound (one per `rounds_per_restart` rounds of its run), and it is not within its
  last round of work (`preemption.wasted`).
* *Where*: the faster type's GPUs the round leaves idle, else those of jobs the round *starts* there, which then
  start on another type with room instead (the fastest for them): a swap pays only when the mover's saving, less
  the time those starts lose on the slower type, still exceeds two restarts.  A running job is never displaced.
  The largest saving first; each job moves at most once a round.

Every move is recorded on the job's plan (`JobPlan.resize`: one human line, "moves to v100 (from k80): ...").
Pure: numbers in, decision out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Set
from dataclasses import replace
from typing import Any

from solver.elastic import pays
from solver.placement import Packer, free_gpus
from solver.preemption import ROUNDS_PER_RESTART, remaining_s, wasted, work_left_s
from solver.types import ClusterView, JobPlan, JobView, RoundDecision


def _rate(job: JobView, gpu_type: str, n: int) -> float:
    r = job.rate(gpu_type, n)
    return r if isinstance(r, (int, float)) and math.isfinite(r) and r > 0 else 0.0


def _start_left(job: JobView, plan: JobPlan | None, gpu_type: str, n: int) -> float:
    """A start's predicted run time on `n` GPUs of `gpu_type` (inf: unknown, or it cannot run there)."""
    base, rate = remaining_s(job, plan), _rate(job, gpu_type, n)
    if base is None or not math.isfinite(base) or rate <= 0 or job.throughput <= 0:
        return math.inf
    return base * job.throughput / rate


def _candidates(
    view: ClusterView,
    decision: RoundDecision,
    fixed: Set[Any],
    rounds_per_restart: int,
) -> list[tuple[float, Any, str, str, int]]:
    """(seconds saved, job, its type, a faster type, its GPUs) of every running job that may move (module docstring)."""
    jobs = {j.job_id: j for j in view.jobs}
    out = []
    for jid in decision.run:
        j, p = jobs.get(jid), decision.placement.get(jid) or {}
        if j is None or not j.ran_last_round or not j.preemptible or jid in fixed or len(p) != 1:
            continue
        ((a, n),) = p.items()
        if a != j.running_type or n != (j.running_gpus or j.num_gpus) or len(j.throughput_by_type) < 2:
            continue
        if (j.restarts + 1) * rounds_per_restart * view.round_length > j.run_time:
            continue
        left = work_left_s(j, decision.plans.get(jid))
        if left is None or not math.isfinite(left) or wasted(left, view.round_length) is not None:
            continue
        ra = _rate(j, a, n)
        for b in j.throughput_by_type:
            rb = _rate(j, b, n)
            if b != a and ra > 0 and rb > ra and b in view.capacity:
                out.append((left * (1.0 - ra / rb), jid, a, b, n))
    out.sort(key=lambda c: (-c[0], str(c[1]), c[3]))
    return out


def move(
    view: ClusterView,
    decision: RoundDecision,
    cost_s: float,
    costs: Mapping[Any, Any] | None = None,
    fixed: Set[Any] = frozenset(),
    rounds_per_restart: int = ROUNDS_PER_RESTART,
) -> tuple[RoundDecision, dict[Any, tuple[str, str]]]:
    """(the decision with the moves that pay, {job: (from type, to type)}); the decision itself when none does.
    `cost_s`: a restart's cost (`costs`: measured per job); `fixed`: jobs that stay where they are (stopping ones,
    count changes of this round)."""
    if len(view.capacity) < 2:
        return decision, {}
    costs = costs or {}
    jobs = {j.job_id: j for j in view.jobs}
    placement = {jid: dict(p) for jid, p in decision.placement.items()}
    plans = dict(decision.plans)
    moved: dict[Any, tuple[str, str]] = {}
    settled: set[Any] = set()  # moved jobs and starts moved for them: not moved again this round
    for gain, jid, a, b, n in _candidates(view, decision, fixed, rounds_per_restart):
        cost = costs.get(jid)
        cost = float(cost) if isinstance(cost, (int, float)) and math.isfinite(cost) and cost >= 0 else cost_s
        if jid in moved or not pays(gain, cost, True):
            continue
        swap = _make_room(view, jobs, placement, plans, settled, jid, a, b, n)
        if swap is None:
            continue
        lost, starts = swap
        if not pays(gain - lost, cost, True):
            continue
        for s, t in starts.items():
            placement[s] = {t: sum(placement[s].values())}
            settled.add(s)
        placement[jid] = {b: n}
        moved[jid] = (a, b)
        settled.add(jid)
        text = (
            f"moves to {b} (from {a}): saves {gain - lost:.0f} s of its run, more than 2 restarts ({cost:.0f} s each)"
        )
        plans[jid] = replace(plans.get(jid) or JobPlan(jid), resize=text)
    if not moved:
        return decision, {}
    return replace(decision, placement=placement, plans=plans), moved


def _make_room(
    view: ClusterView,
    jobs: Mapping[Any, JobView],
    placement: Mapping[Any, dict[str, int]],
    plans: Mapping[Any, Any],
    settled: Set[Any],
    jid: Any,
    a: str,
    b: str,
    n: int,
) -> tuple[float, dict[Any, str]] | None:
    """Room for `jid`'s `n` GPUs on `b` once it leaves `a`: (seconds the starts moved for it lose, {start: its new
    type}), the starts that lose the least per GPU first (never one its user pinned to a type or to nodes); None when
    the idle GPUs and the starts on `b` do not make enough."""
    free = free_gpus(view, placement)
    free[a] = free.get(a, 0) + n
    free[b] = free.get(b, 0) - n
    if free[b] >= 0:
        return 0.0, {}
    starts = []
    for s, p in placement.items():
        j = jobs.get(s)
        if j is None or j.ran_last_round or s in settled or s == jid or set(p) != {b}:
            continue
        if j.gpu_type == b or j.allowed_nodes:  # its user's type or nodes
            continue
        m = sum(p.values())
        here = _start_left(j, plans.get(s), b, m)
        if math.isfinite(here):
            starts.append((here, m, s))
    moved: dict[Any, str] = {}
    lost = 0.0
    for here, m, s in sorted(starts, key=lambda x: (x[0] / x[1], str(x[2]))):
        if free[b] >= 0:
            break
        j = jobs[s]
        speeds = {t: v for t, v in j.throughput_by_type.items() if t != b} if j.throughput_by_type else None
        packer = Packer({t: k for t, k in free.items() if t != b})
        t = packer.take(m, j.gpu_type, speeds) if speeds is None or speeds else None
        if t is None:
            continue
        there = _start_left(j, plans.get(s), t, m)
        if not math.isfinite(there):
            continue
        lost += there - here
        free[t] -= m
        free[b] += m
        moved[s] = t
    return (lost, moved) if free[b] >= 0 else None


def unpinned(view: ClusterView, moved: Set[Any]) -> ClusterView:
    """The view a decision with moves is checked against: each moved job may run on any type of its
    `throughput_by_type` (its user's limit; its view's `gpu_type` is the type it runs on)."""
    if not moved:
        return view
    return replace(view, jobs=tuple(replace(j, gpu_type=None) if j.job_id in moved else j for j in view.jobs))
