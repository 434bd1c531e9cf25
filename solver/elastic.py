"""Elastic GPU counts: the count each job with a declared range (`JobView.gpus_range`) runs on this round.

An elastic job's fair share is defined on its *base* count (`num_gpus`: what its user asked for): the policy's
order, the per-user caps, the fair-finish targets, the starvation guard and the preemption gate all count it there,
so declaring a range buys no priority.  This stage runs after the policy and the gate (`RoundLoop`, for a policy
with `Policy.sizes_elastic_jobs`) and uses only GPUs the round leaves idle; it never stops a job the round runs:

1. **Back to base when the queue grows.**  A job that ran on more than its base count keeps its extra GPUs only
   while the round at base counts leaves them idle; where the jobs the policy runs need them, the grown jobs that
   lose the least speed per lent GPU give them back first (a forced change, like a preemption the gate cannot
   avoid).
2. **Fewer GPUs rather than none.**  An elastic job the round does not run (waiting, or one that lost its round: it
   then shrinks instead of stopping) whose base count does not fit the idle GPUs runs on the largest of its smaller
   counts that fits (its range's), in the policy's order (planned start, then fair-finish deadline, then arrival);
   a job that ran below its base count goes back up to it when the policy runs it and the change pays (the gate
   keeps it on its smaller count, `preemption.held`).
3. **Idle GPUs.**  What is still idle goes to the elastic jobs of the round, one step at a time (the next count of
   `throughput_by_gpus` within the range, on the type the job runs on), each to the job whose speed rises the most
   per added GPU (Pollux's spreading: with sublinear scaling that does the most work; ties: the shortest remaining).
4. **A change pays for itself.**  Any count other than the one a job ran on is kept only when the time it saves
   over the loan (`horizon`: until the policy plans to start a waiting job, at most its window) exceeds its
   restarts: the change itself for a running job, and the way back (`pays`); a running job grows only within the
   gate's restart bound (one restart per `rounds_per_restart` rounds of its run, solver/preemption.py; its first
   change free: a job that never restarted has no thrash to bound), but for one that no round started (`begun`: on
   Slurm, a job starts on its own count when GPUs are free, before the round); 3 lends no GPU to a job the bound
   keeps (it would idle).
   A job's new count is else the one it ran on, or its base count; a running job whose count changed less than a
   round ago (`recent`) is not grown, nor taken back up to its base: that change would be wasted (`wasted_change`).
   A job without a range never changes count.

Every count other than the base is recorded on the job's plan (`JobPlan.gpus`, `JobPlan.resize`: one human line
for `status` and `explain`, e.g. "4 GPUs (asked 2): idle capacity; back to 2 when the queue grows"), and a job this
stage starts gets the rule "elastic".  Pure: numbers in, decision out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from solver.placement import free_gpus
from solver.preemption import ROUNDS_PER_RESTART, remaining_s
from solver.types import ClusterView, JobPlan, JobView, RoundDecision

#: the saving a count change must buy, in restarts' costs: the change and the way back
RESTARTS_PER_CHANGE = 2
#: the loan's horizon when the policy gives no window (rounds)
DEFAULT_WINDOW = 20


@dataclass(frozen=True)
class Sizing:
    """What this stage did to one job: from `before` (the count it ran on, or its base count) to `after`."""

    before: int
    after: int
    why: str


def counts(job: JobView) -> list[int]:
    """The counts an elastic job may run on: its base count and its profiled counts within its range, ascending;
    [] for a rigid job."""
    if job.gpus_range is None:
        return []
    lo, hi = job.gpus_range
    return sorted({job.num_gpus} | {int(n) for n, thr in job.throughput_by_gpus.items() if lo <= n <= hi and _ok(thr)})


def _ok(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def pays(gain_s: float, cost_s: float, running: bool) -> bool:
    """A count change pays when it saves more than the restarts it costs (the way back, and now when running)."""
    return gain_s > cost_s * (RESTARTS_PER_CHANGE if running else RESTARTS_PER_CHANGE - 1)


def wasted_change(ran_from: float | None, now: float, round_length: float) -> bool:
    """A count change is wasted when the job changes count again (at `now`) before it ran a round at its new count:
    it never ran at it (`ran_from` None), or less than `round_length` after the start of the round in which it first
    ran there (`ran_from`: that round's start, not the moment its restart ended; in the simulator the change's own
    round).  The controller's ResizeLog and the simulator's count both use this rule."""
    return ran_from is None or now - ran_from < round_length


def horizon(view: ClusterView, decision: RoundDecision) -> float:
    """Seconds lent GPUs are expected to stay idle: until the plan's first start of a job the round does not run
    (its next offset), at most the decision's window."""
    window = int(decision.window_rounds or DEFAULT_WINDOW)
    run = set(decision.run)
    offsets: list[int] = [
        int(p.next_offset)
        for jid, p in decision.plans.items()
        if jid not in run and p.next_offset and p.next_offset > 0
    ]
    return float(view.round_length) * min([window, *offsets])


class _Round:
    """One round's elastic jobs: their types, counts, rates and remaining times."""

    def __init__(self, view: ClusterView, decision: RoundDecision, H: float) -> None:
        self.jobs = {j.job_id: j for j in view.jobs}
        self.plans = decision.plans
        self.H = H
        self.type: dict[Any, str] = {}
        self.options: dict[Any, list[int]] = {}

    def add(self, jid: Any, gpu_type: str) -> None:
        self.type[jid] = gpu_type
        self.options[jid] = counts(self.jobs[jid])

    def rate(self, jid: Any, n: int) -> float:
        r = self.jobs[jid].rate(self.type[jid], n)
        return r if _ok(r) else 0.0

    def left(self, jid: Any, n: int) -> float:
        """Predicted remaining seconds on n GPUs (from the plan's, or the view's, on its base count)."""
        j = self.jobs[jid]
        base = remaining_s(j, self.plans.get(jid))
        r0, rn = self.rate(jid, j.num_gpus), self.rate(jid, n)
        if base is None or not math.isfinite(base) or r0 <= 0 or rn <= 0:
            return math.inf
        return base * r0 / rn

    def gain(self, jid: Any, a: int, b: int) -> float:
        """Seconds saved by running on b instead of a, over at most the loan's horizon (negative: lost)."""
        la, lb = self.left(jid, a), self.left(jid, b)
        if not (math.isfinite(la) and math.isfinite(lb)):
            return 0.0
        if lb >= la:
            return -min(lb - la, min(lb, self.H) * (1.0 - la / lb))
        return min(la - lb, min(la, self.H) * (la / lb - 1.0))

    def speedup(self, jid: Any, a: int, b: int) -> float:
        ra, rb = self.rate(jid, a), self.rate(jid, b)
        return (rb / ra - 1.0) / (b - a) if ra > 0 and b > a else 0.0


def size(
    view: ClusterView,
    decision: RoundDecision,
    cost_s: float,
    costs: Mapping[Any, Any] | None = None,
    fixed: frozenset[Any] = frozenset(),
    rounds_per_restart: int = ROUNDS_PER_RESTART,
    begun: frozenset[Any] = frozenset(),
    recent: frozenset[Any] = frozenset(),
) -> tuple[RoundDecision, dict[Any, Sizing]]:
    """(the decision with each elastic job on its count, {job: Sizing} of every job not on its base count or moved
    off the count it ran on).  `cost_s`: a count change's cost (a restart; `costs`: measured per job); `fixed`: jobs
    left on their base count and not started small (jobs whose preemption is under way; the round loop's retry when
    a gang fits no node); `rounds_per_restart`: the gate's restart bound, which a running job's growth keeps too;
    `begun`: running jobs no round started (on Slurm, a job starts on its own count as soon as GPUs are free, before
    the round): their growth is a start's, not bounded; `recent`: jobs whose count changed less than a round ago, not
    grown while they run (the change would be wasted: `wasted_change`)."""
    costs = costs or {}
    rd = _Round(view, decision, horizon(view, decision))
    jobs = rd.jobs
    run = list(decision.run)
    placement = {jid: dict(p) for jid, p in decision.placement.items()}
    free = free_gpus(view, placement)
    size_of: dict[Any, int] = {}
    for jid in run:
        j, p = jobs.get(jid), placement.get(jid, {})
        if j is None or jid in fixed or len(p) != 1 or len(counts(j)) < 2 or sum(p.values()) not in counts(j):
            continue
        rd.add(jid, next(iter(p)))
        size_of[jid] = sum(p.values())  # its base count, or the fewer GPUs the gate kept it on (preemption.held)

    def was(jid: Any) -> int | None:
        j = jobs[jid]
        return j.running_gpus if j.ran_last_round and j.running_gpus in rd.options[jid] else None

    why: dict[Any, str] = {}
    # 1. a job keeps a count above its base while the round leaves its extra GPUs idle; one below its base keeps it
    # unless going back up pays
    for jid in size_of:
        w, base = was(jid), jobs[jid].num_gpus
        if w is None or w == size_of[jid] or size_of[jid] != base:
            continue
        # above its base: it keeps its count (given back below when needed); below (it started small): up to its base
        # when that pays for the restart, else it stays on its count
        if w > base or jid in recent or not pays(rd.gain(jid, w, base), _cost(costs, jid, cost_s), True):
            free[rd.type[jid]] -= w - base
            size_of[jid] = w
    for t in list(free):
        while free[t] < 0:
            grown = [x for x in size_of if rd.type[x] == t and size_of[x] > jobs[x].num_gpus]
            if not grown:
                break
            x = min(grown, key=lambda x: (rd.speedup(x, _down(rd, x, size_of[x]), size_of[x]), str(x)))
            lower = _down(rd, x, size_of[x])
            free[t] += size_of[x] - lower
            size_of[x] = lower
            why[x] = "the jobs the round runs need the GPUs"
    # 2. elastic jobs the round does not run go on fewer GPUs, in the policy's order, where idle ones fit them
    started: list[Any] = []
    for j in sorted(
        (j for j in view.jobs if j.job_id not in placement and j.job_id not in fixed and len(counts(j)) > 1),
        key=lambda j: _order(decision.plans.get(j.job_id), j),
    ):
        smaller = [n for n in counts(j) if n < j.num_gpus]
        types = [
            t
            for t in free
            if (j.gpu_type is None or t == j.gpu_type) and (not j.throughput_by_type or t in j.throughput_by_type)
        ]
        best = max(((n, t) for n in smaller for t in types if n <= free[t]), default=None)
        if best is None:
            continue
        n, t = best
        rd.add(j.job_id, t)
        size_of[j.job_id] = n
        free[t] -= n
        started.append(j.job_id)

    def bound(jid: Any) -> bool:
        """A running job the restart bound keeps on its count: one restart per `rounds_per_restart` rounds of its
        run, a job's first change free (a job that never restarted has no thrash to bound); none for one no round
        started (`begun`)."""
        j = jobs[jid]
        return jid not in begun and j.restarts * rounds_per_restart * view.round_length > j.run_time

    # 3. idle GPUs: the largest speed-up per added GPU first, one step at a time, to the jobs 4 lets grow (not to a
    # running one the restart bound keeps: its GPUs would idle)
    while True:
        step = None
        for jid, n in size_of.items():
            up = _up(rd, jid, n)
            if up is None or up - n > free.get(rd.type[jid], 0):
                continue
            w = was(jid)
            if w is not None and (jid in recent or (up > w and bound(jid))):
                continue
            key = (rd.speedup(jid, n, up), -rd.left(jid, n), str(jid))
            if key[0] > 0 and (step is None or key > step[0]):
                step = (key, jid, up)
        if step is None:
            break
        _key, jid, up = step
        free[rd.type[jid]] -= up - size_of[jid]
        size_of[jid] = up
    # 4. a change from the count it ran on (or, starting, from its base) must pay for its restarts
    out: dict[Any, Sizing] = {}
    plans = dict(decision.plans)
    for jid, n in size_of.items():
        j, before = jobs[jid], was(jid)
        start = before if before is not None else j.num_gpus
        back_up = before is not None and before < j.num_gpus == n  # decided in 1
        if before is not None and n > before and jid in recent:
            n = before  # changed less than a round ago: growing it again now would waste that change
        elif n > start and jid not in started and not back_up:  # noqa: SIM102 (the cheap test first)
            if not pays(rd.gain(jid, start, n), _cost(costs, jid, cost_s), before is not None) or (
                before is not None and bound(jid)
            ):
                n = start
        if n == j.num_gpus and before in (None, n):
            continue
        if n > j.num_gpus:
            text = f"{n} GPUs (asked {j.num_gpus}): idle capacity; back to {j.num_gpus} when the queue grows"
        elif n < j.num_gpus:
            text = (
                f"{n} GPUs (asked {j.num_gpus}): on idle GPUs rather than none; up to {j.num_gpus} when the round "
                "has room"
            )
        else:
            text = f"back to its {j.num_gpus} GPUs: {why.get(jid, 'the round has room for its asked count')}"
        out[jid] = Sizing(before or j.num_gpus, n, text)
        placement[jid] = {rd.type[jid]: n}
        rule = "elastic" if jid in started else (plans.get(jid) or JobPlan(jid)).rule
        plans[jid] = replace(plans.get(jid) or JobPlan(jid), gpus=n, resize=text, rule=rule, next_offset=0)
    run += [jid for jid in started if jid in placement]
    return replace(decision, run=tuple(run), placement=placement, plans=plans), out


def _cost(costs: Mapping[Any, Any], jid: Any, default: float) -> float:
    c = costs.get(jid)
    return float(c) if c is not None and _ok(c) else float(default)


def _up(rd: _Round, jid: Any, n: int) -> int | None:
    o = rd.options[jid]
    i = o.index(n)
    return o[i + 1] if i + 1 < len(o) else None


def _down(rd: _Round, jid: Any, n: int) -> int:
    o = rd.options[jid]
    return o[max(o.index(n) - 1, 0)]


def _order(plan: JobPlan | None, job: JobView) -> tuple[float, float, float, str]:
    """The policy's order of a waiting job: its planned start, its fair-finish deadline, its arrival."""
    off = float(plan.next_offset) if plan is not None and plan.next_offset else math.inf
    due = plan.fair_finish_in_s if plan is not None and plan.fair_finish_in_s is not None else math.inf
    return off, float(due), float(job.arrival_time), str(job.job_id)
