"""Nodes: on which nodes a placed round runs, on a cluster whose view lists its nodes (`ClusterView.nodes`).

Placement (placement.py) decides each gang's GPU type; this stage decides its nodes.  A gang runs on one node of its
type, a gang larger than any node on whole free nodes of its type (as many as it needs, all of one size dividing it).  A
running job stays where it runs (`JobView.nodes`) while it keeps its type and count, a job the policy gave nodes
(`RoundDecision.nodes`, plain Slurm's backfill plans on nodes) goes there when they have room; the others go, the
largest gang first, to the node with the fewest free GPUs that fits them (best fit keeps whole nodes free for big
gangs).  When no node has room for a gang, smaller one-node jobs on the node that needs the fewest GPUs moved are moved
to other nodes (by best fit) to make room: a move is a restart, as a preemption, and happens only when `moves` allows it
(a policy that never preempts, such as plain Slurm, keeps its running jobs where they run).  Under the preemption gate
(`gated`) a job within its last round of work is not moved: the move would be wasted by the gate's own rule
(solver/preemption.py `wasted`), and the gang waits at most that round for its GPUs (and its slack: a job `outlived` its
last round, `preemption.LastRounds`, may be moved).  (The gate's restart bound is not applied to moves: what each rule
costs, measured, `docs/guarantees.md` section 6.) A job that may not be preempted (solver/pinned.py) is never moved.  A
job whose user asked for its nodes (`JobView.allowed_nodes`, Slurm's --nodelist) is placed after the running jobs, on
exactly those nodes (no moves to make room), and never moved.  A job that still fits no node is left out of the round
with a reason; the rest of the round runs.

* `assign_nodes(view, decision, moves=True, gated=True, outlived=frozenset())`: the decision with `nodes` (job ->
  node names), the jobs that fit no node dropped from `run`, `placement` and their plan's rule (the reason names a
  running job a move would have made room with, had it not been in its last round); the decision itself when the
  view has no nodes.  `gated`: False for the reference's semantics (no preemption gate); `outlived`: jobs past
  their last round (`preemption.LastRounds`), which may be moved.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import replace
from typing import Any

from solver import pinned, preemption
from solver.types import ClusterView, JobPlan, RoundDecision

NO_NODE = "no node has room for its {n}-GPU gang this round"
KEPT = "; job {job} stays where it runs, a move within its last round of work ({left:.0f} s left) would be wasted"
USER_NODES = "the nodes its user asked for ({nodes}) have no room for its {n}-GPU gang this round"


_Nodes = tuple[str, ...]


def _fit(
    free: dict[str, int],
    sizes: dict[str, int],
    types: dict[str, str],
    gpu_type: str,
    gpus: int,
    prefer: _Nodes = (),
) -> _Nodes | None:
    """Nodes for a gang of `gpus` GPUs of `gpu_type` on the nodes' `free` GPUs: `prefer` (its current nodes) when
    they still have room, else the best fit of one node, else whole free nodes; None when nothing fits."""
    if prefer and all(types.get(n) == gpu_type for n in prefer):
        share = gpus // len(prefer)
        if share * len(prefer) == gpus and all(free.get(n, 0) >= share for n in prefer):
            return tuple(prefer)
    one = [n for n in free if types[n] == gpu_type and free[n] >= gpus]
    if one:
        return (min(one, key=lambda n: (free[n], n)),)
    whole = sorted(n for n in free if types[n] == gpu_type and free[n] == sizes[n] and sizes[n] > 0)
    for size in sorted({sizes[n] for n in whole}, reverse=True):
        same = [n for n in whole if sizes[n] == size]
        if gpus % size == 0 and len(same) >= gpus // size:
            return tuple(same[: gpus // size])
    return None


def _take(free: dict[str, int], nodes: _Nodes, gpus: int) -> None:
    for n in nodes:
        free[n] -= gpus // len(nodes)


def _pack(
    view: ClusterView,
    order: list[Any],
    gangs: dict[Any, int],
    kinds: dict[Any, str],
    current: dict[Any, _Nodes],
    moves: bool,
    required: dict[Any, _Nodes],
    stay: dict[Any, float],
    blocked: dict[Any, Any],
) -> dict[Any, _Nodes]:
    free = {n: int(g) for n, (_t, g) in view.nodes.items()}
    sizes = dict(free)
    types = {n: t for n, (t, _g) in view.nodes.items()}
    out: dict[Any, _Nodes] = {}
    for want in (current, required):  # running jobs stay where they run; then the nodes a user asked for
        for jid in order:
            if jid not in out and want.get(jid) and required.get(jid, want[jid]) == want[jid]:
                got = _fit(free, sizes, types, kinds[jid], gangs[jid], want[jid])
                if got == want[jid]:
                    out[jid] = got
                    _take(free, got, gangs[jid])
    rest = [j for j in order if j not in out and j not in required]
    fixed = set(required) | pinned.pinned(view)  # a pinned job is never moved either
    for jid in sorted(rest, key=lambda j: -gangs[j]):  # then best fit, largest first
        got = _fit(free, sizes, types, kinds[jid], gangs[jid])
        if got is None and moves and gangs[jid] <= max(sizes.values()):
            got = _evict(free, sizes, types, out, gangs, kinds, jid, fixed, set(stay), blocked)
        if got is not None:
            out[jid] = got
            _take(free, got, gangs[jid])
    return out


def _evict(
    free: dict[str, int],
    sizes: dict[str, int],
    types: dict[str, str],
    out: dict[Any, _Nodes],
    gangs: dict[Any, int],
    kinds: dict[Any, str],
    jid: Any,
    fixed: set[Any],
    kept: set[Any],
    blocked: dict[Any, Any],
) -> _Nodes | None:
    """Room for `jid`'s gang on one node by moving the fewest GPUs of smaller one-node jobs placed there (not the
    `fixed` ones, nor the `kept` ones: a move would not pay) to other nodes (each by best fit, no further moves); the
    node (with `free` and `out` updated for the moved jobs), or None (nothing changed; `blocked[jid]` then names a
    kept job that would have made room)."""
    tries: list[tuple[int, int, str, list[Any]]] = []
    gang, kind = gangs[jid], kinds[jid]
    for n in free:
        if types[n] != kind or sizes[n] < gang:
            continue
        movable = [j for j, on in out.items() if on == (n,) and gangs[j] < gang and j not in fixed]
        there = sorted((j for j in movable if j not in kept), key=lambda j: (gangs[j], str(j)))
        if free[n] + sum(gangs[j] for j in movable) >= gang > free[n] + sum(gangs[j] for j in there):
            blocked.setdefault(jid, min((j for j in movable if j in kept), key=str))
        pick: list[Any] = []
        room = free[n]
        for j in there:
            if room >= gang:
                break
            pick.append(j)
            room += gangs[j]
        if room >= gang:
            tries.append((sum(gangs[j] for j in pick), len(pick), n, pick))
    for _moved, _count, n, pick in sorted(tries, key=lambda t: t[:3]):
        trial = dict(free)
        for j in pick:
            trial[n] += gangs[j]
        trial[n] -= gang  # the node is the gang's now; the moved jobs go elsewhere
        placed: dict[Any, _Nodes] = {}
        for j in sorted(pick, key=lambda j: -gangs[j]):
            others = {m: f for m, f in trial.items() if m != n}
            got = _fit(others, sizes, types, kinds[j], gangs[j])
            if got is None:
                break
            placed[j] = got
            _take(trial, got, gangs[j])
        if len(placed) == len(pick):
            trial[n] += gang  # taken by the caller
            free.update(trial)
            out.update(placed)
            return (n,)
    return None


def unmovable(view: ClusterView, decision: RoundDecision, outlived: Set[Any] = frozenset()) -> dict[Any, float]:
    """{running job: its seconds of work left} of each running job a move would waste (preemption.wasted: within
    its last round of work, and not `outlived` it)."""
    out = {}
    for j in view.jobs:
        if j.ran_last_round and j.nodes and j.job_id not in outlived:
            left = preemption.work_left_s(j, decision.plans.get(j.job_id))
            if left is not None and preemption.wasted(left, view.round_length):
                out[j.job_id] = left
    return out


def assign_nodes(
    view: ClusterView,
    decision: RoundDecision,
    moves: bool = True,
    gated: bool = True,
    outlived: Set[Any] = frozenset(),
) -> RoundDecision:
    """See the module docstring."""
    if not view.nodes:
        return decision
    jobs = {j.job_id: j for j in view.jobs}
    order = list(decision.run)
    gangs = {jid: sum(decision.placement[jid].values()) for jid in order}
    kinds = {jid: next(iter(decision.placement[jid])) for jid in order}
    current = {jid: tuple(jobs[jid].nodes) for jid in order if jobs[jid].nodes and jobs[jid].ran_last_round}
    asked = {jid: tuple(n) for jid, n in decision.nodes.items() if jid in gangs and n}  # the policy's own nodes
    required = {jid: tuple(jobs[jid].allowed_nodes) for jid in order if jobs[jid].allowed_nodes}
    stay = unmovable(view, decision, outlived) if moves and gated else {}
    blocked: dict[Any, Any] = {}
    best = _pack(view, order, gangs, kinds, {**current, **asked}, moves, required, stay, blocked)
    if not moves:  # a job that runs stays where it runs, or does not run
        best = {j: n for j, n in best.items() if j not in current or n == current[j]}
    dropped = [j for j in order if j not in best]
    if not dropped:
        return replace(decision, nodes=best)
    plans = dict(decision.plans)
    for j in dropped:
        old = plans.get(j) or JobPlan(j)
        reason = (
            USER_NODES.format(nodes=",".join(required[j])[:200], n=gangs[j])
            if j in required
            else NO_NODE.format(n=gangs[j])
        )
        if j in blocked:
            reason += KEPT.format(job=blocked[j], left=stay[blocked[j]])
        plans[j] = replace(old, rule="", next_offset=1 if not old.next_offset else old.next_offset, reason=reason)
    return replace(
        decision,
        run=tuple(j for j in order if j in best),
        nodes=best,
        plans=plans,
        placement={j: p for j, p in decision.placement.items() if j in best},
    )


def moved(view: ClusterView, decision: RoundDecision) -> list[Any]:
    """The jobs that ran last round and run this round on other nodes (a restart)."""
    jobs = {j.job_id: j for j in view.jobs}
    return [
        jid
        for jid, n in decision.nodes.items()
        if jobs[jid].ran_last_round and jobs[jid].nodes and tuple(jobs[jid].nodes) != tuple(n)
    ]
