"""The preemption gate: a running job that lost its round is preempted only when the preemption pays.

A preemption costs the job a checkpoint, a requeue and a restart (`cost_s`: measured per job from its own events by the
backend, a default before the first measurement).  It pays only when the plan keeps the job off its GPUs for longer than
that cost; a job within its last round of work is not preempted (it would be done before the cost is recovered; while
its steps left halve every LAST_ROUND_SLACK + 1 rounds, `LastRounds`: an estimate that never grows past a round keeps
no job forever), nor one that would then have restarted more than once per ROUNDS_PER_RESTART rounds of the time
it has run so far (3 restarts per hour at the default 120 s rounds; what is left is only a prediction, so it does not
count): a job is not thrashed.  A job the gate keeps takes its GPUs back from the jobs the decision starts this round
(the last of the run order first: policies list their run set in priority order; a job the restart bound keeps, its own
user's first, then those of users who would still hold at least as many GPUs for their weight: the bound never buys a
user GPUs), and a job the restart bound keeps never from the first job its policy's starvation guard starts (rule
"guard", the longest wait: a reservation, so a gang as large as the cluster starts at last; the bound on a job's wait
comes before the bound on another's restarts; a keep that saves a waste, a job in its last round or back sooner than
its cost, delays that job a round at most), nor from a start past its latest fair start (its plan's
`fair_finish_in_s` <= 0) when the kept job's own slack to its latest fair start covers that job's predicted remaining
time (it can wait for it without becoming late itself, so two late jobs do not take turns); when those do not free
enough GPUs of its type it is preempted after all. A job whose preemption would pay but whose GPUs then go to no
job because a start went back out for a kept one is kept too: its preemption would buy nothing (`IDLE`; a policy's
own choice to leave GPUs idle stands). An elastic job that runs on fewer GPUs than it asked (lent idle ones,
solver/elastic.py) is not kept by the restart bound, and one the gate keeps for a waste it saves keeps only those GPUs
(`held`).

A preemption is *wasted* when the job had at most one round of work left, or when it restarted before the next round
boundary (it freed its GPUs for less than a round): `wasted`, for the simulator's loop and the controller alike, of the
work left `work_left_s` (on the GPUs it keeps). The round loop keeps a `LastRounds`; the rest is pure (no I/O).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Set
from dataclasses import dataclass, replace
from typing import Any

from solver.placement import Packer, free_gpus
from solver.types import ClusterView, JobPlan, JobView, RoundDecision

#: a preemption may bring a job to at most one restart per this many rounds of the time it has run (at 120 s
#: rounds: 3 per hour; a job is first preempted after 20 minutes of run, its n-th after 20 n); in rounds, so a
#: replay at a shorter round keeps the same proportion.  A preemption the gate cannot avoid (its GPUs went to
#: running jobs) may pass it.  The controller's `rounds_per_restart` (ControllerConfig) defaults to it
ROUNDS_PER_RESTART = 10


#: why the gate keeps a job whose preemption would leave its GPUs idle (the start it made room for went back out)
IDLE = "its GPUs would idle: nothing starts there"

#: the last-round rule keeps a job in its first round there and this many more (a round's slack for its end: its last
#: report, Slurm's completion), later only while its steps left halve every this many rounds plus one
LAST_ROUND_SLACK = 1


@dataclass(frozen=True)
class Verdict:
    """Whether preempting one job pays, and why (one human line)."""

    pays: bool
    why: str
    cost_s: float
    off_s: float | None  # seconds the plan keeps it off its GPUs (None: beyond the planned window)
    remaining_s: float | None
    bound: bool = False  # kept by the restart bound (not to save a preemption's waste)


def remaining_s(job: JobView, plan: JobPlan | None) -> float | None:
    """The job's predicted remaining run time: its plan's, else its view's steps left at its throughput."""
    if plan is not None and plan.predicted_remaining_s is not None and math.isfinite(plan.predicted_remaining_s):
        return max(0.0, float(plan.predicted_remaining_s))
    if job.throughput > 0 and math.isfinite(job.throughput):
        return job.steps_remaining / job.throughput
    return None


def work_left_s(job: JobView, plan: JobPlan | None) -> float | None:
    """What the last-round rule reads: the least of the plan's prediction and the job's steps left at its throughput
    (the view's own estimate, the one the controller counts waste by, slurm/preemptions.py), at its rate on the GPUs
    it keeps (`held`, of the type it runs on: an elastic job lent 2 of its 16 GPUs has 8 times the work left its
    throughput says).  The plan predicts whole epochs at the batch sizes it expects; a job whose last epoch runs faster
    than that has less left (the replay of 2026-12-06 08:46 preempted one with 3 s of its 4-s round left)."""
    both = [x for x in (remaining_s(job, plan), remaining_s(job, None)) if x is not None]
    now = job.rate(job.running_type, held(job)) if job.ran_last_round else 0.0
    slower = job.throughput / now if now > 0 and math.isfinite(now) and job.throughput > 0 else 1.0
    return min(both) * slower if both else None


def verdict(
    off_s: float | None,
    cost_s: float,
    left_s: float | None,
    round_length: float,
    measured: bool = True,
    restarts: int = 0,
    run_s: float = 0.0,
    rounds_per_restart: int = ROUNDS_PER_RESTART,
    outlived: bool = False,
) -> Verdict:
    """Does preempting a job pay?  `off_s`: how long the plan keeps it off (None: not in the planned window);
    `restarts`, `run_s`: its restarts and seconds of run so far (ROUNDS_PER_RESTART); `outlived`: past its last round
    (`LastRounds`)."""
    source = "measured" if measured else "default"
    if not outlived and wasted(left_s, round_length) is not None:
        return Verdict(False, f"within its last round of work ({left_s:.0f} s left)", cost_s, off_s, left_s)
    if off_s is not None and off_s <= cost_s:
        return Verdict(
            False,
            f"planned again in {off_s:.0f} s, sooner than its preemption cost ({cost_s:.0f} s, {source})",
            cost_s,
            off_s,
            left_s,
        )
    if (restarts + 1) * rounds_per_restart * round_length > run_s:
        return Verdict(
            False,
            f"{restarts} restarts in {run_s:.0f} s of run: at most one per {rounds_per_restart} rounds of run",
            cost_s,
            off_s,
            left_s,
            bound=True,
        )
    off = f"off for {off_s:.0f} s" if off_s is not None else "not planned in the window"
    past = f"ran past the last round of work it was kept for ({left_s or 0:.0f} s said left); " if outlived else ""
    why = f"{past}{off}, more than its preemption cost ({cost_s:.0f} s, {source})"
    return Verdict(True, why, cost_s, off_s, left_s)


def wasted(
    left_s: float | None, round_length: float, restarted_at: float | None = None, boundary: float | None = None
) -> str | None:
    """Why a preemption was wasted ("last_round", "restarted_early"), or None when it was not."""
    if left_s is not None and left_s <= round_length:
        return "last_round"
    if restarted_at is not None and boundary is not None and restarted_at < boundary:
        return "restarted_early"
    return None


def gate(
    view: ClusterView,
    decision: RoundDecision,
    costs: Mapping[Any, Any],
    default_cost_s: float,
    stopping: Set[Any] = frozenset(),
    rounds_per_restart: int = ROUNDS_PER_RESTART,
    outlived: Set[Any] = frozenset(),
    fresh: Set[Any] = frozenset(),
) -> tuple[RoundDecision, dict[Any, Any]]:
    """(the decision with the jobs whose preemption would not pay kept running, {job: Verdict} of every job
    that lost its round).  The plan of each judged job carries the verdict's line in `reason` (the controller's
    annotations complete it).  `costs`: measured preemption cost per job (seconds); `stopping`: jobs whose
    preemption is already under way (neither kept nor judged again); `rounds_per_restart`: the restart bound
    (ROUNDS_PER_RESTART; 0: none); `outlived`: jobs past the last round of work they were kept for (`LastRounds`);
    `fresh`: jobs that restarted in the round before (the guard's reservation does not take them out again)."""
    run = list(decision.run)
    placement = {j: dict(p) for j, p in decision.placement.items()}
    plans = dict(decision.plans)
    jobs = {j.job_id: j for j in view.jobs}
    lost = [j for j in view.jobs if j.ran_last_round and j.job_id not in set(run) and j.job_id not in stopping]
    verdicts = {}
    evicted: set[Any] = set()  # the starts the keeps take out
    late = {x for x in run if not jobs[x].ran_last_round and _due(plans, x) <= 0}  # starts past their fair start
    for j in lost:
        plan = plans.get(j.job_id)
        off = plan.next_offset * view.round_length if plan is not None and plan.next_offset else None
        measured = j.job_id in costs and costs[j.job_id] is not None
        cost = float(costs[j.job_id]) if measured else float(default_cost_s)
        # a job on fewer GPUs than it asked runs on idle ones lent to it (solver/elastic.py): the restart bound does
        # not keep it from the jobs the round runs
        lent = held(j) < j.num_gpus
        verdicts[j.job_id] = verdict(
            off,
            cost,
            work_left_s(j, plan),
            view.round_length,
            measured,
            j.restarts,
            j.run_time,
            0 if lent else rounds_per_restart,
            j.job_id in outlived,
        )
    # the jobs closest to their end first: they lose the most by a preemption
    order = sorted(
        lost,
        key=lambda j: (verdicts[j.job_id].remaining_s is None, verdicts[j.job_id].remaining_s or 0.0, str(j.job_id)),
    )
    for j in order:
        v = verdicts[j.job_id]
        if v.pays:
            continue
        # the guard's first job (it lists the longest wait first) keeps what it was given from the restart bound: a
        # reservation; a keep that saves a waste (a last round, a job back sooner than its cost) delays it a round, and
        # so does a job that restarted in the round before (its restart would be wasted), unless the guard's job asks
        # for more than half the GPUs (where small jobs keep restarting it would never start)
        guard = next((x for x in run if (plans.get(x) or JobPlan(x)).rule == "guard"), None)
        wide = guard is not None and 2 * jobs[guard].num_gpus > view.num_gpus
        reserved = {guard} if guard is not None and v.bound and (wide or j.job_id not in fresh) else set()
        # nor, from the restart bound, a start past its latest fair start when the kept job's own slack covers that
        # job's remaining time (it can wait for it and not become late itself: two late jobs do not take turns)
        if v.bound:
            slack = _due(plans, j.job_id)
            reserved |= {x for x in late if slack >= _left(plans, x)}
        evict = _make_room(view, jobs, run, placement, j, reserved, fair=v.bound)
        if evict is None:
            why = "a job past its latest fair start" if reserved else "running jobs or other users"
            why = "the job that waited the starvation bound longest" if guard in reserved else why
            verdicts[j.job_id] = replace(v, pays=True, why=f"{v.why}, but its GPUs went to {why}")
            continue
        evicted |= set(evict)
        for e in evict:
            run.remove(e)
            placement.pop(e)
            old = plans.get(e) or JobPlan(e)
            plans[e] = replace(old, rule="", next_offset=1 if not old.next_offset else old.next_offset)
        t = _home(j) or Packer(free_gpus(view, placement)).take(held(j), j.gpu_type, j.throughput_by_type)
        run.append(j.job_id)
        placement[j.job_id] = {t: held(j)}
        plans[j.job_id] = replace(plans.get(j.job_id) or JobPlan(j.job_id), rule="kept", next_offset=0, reason=v.why)
    # a preemption pays only for the job that takes its GPUs: one whose start the keeps above took out leaves them idle
    # (a policy's own decision to leave GPUs idle stands)
    for j in order if evicted else ():
        free, here = free_gpus(view, placement), _home(j)
        if not verdicts[j.job_id].pays or j.job_id in run or not _fits(free, here, j):
            continue
        v = verdicts[j.job_id] = replace(verdicts[j.job_id], pays=False, why=IDLE)
        run.append(j.job_id)
        placement[j.job_id] = {here or Packer(free).take(held(j), j.gpu_type, j.throughput_by_type): held(j)}
        plans[j.job_id] = replace(plans.get(j.job_id) or JobPlan(j.job_id), rule="kept", next_offset=0, reason=v.why)
    for jid, v in verdicts.items():
        if v.pays:
            plans[jid] = replace(plans.get(jid) or JobPlan(jid), reason=v.why)
    return replace(decision, run=tuple(run), placement=placement, plans=plans), verdicts


class LastRounds:
    """{running job: its steps left in each round since they said it was within its last round}, forgotten when it stops
    running.  `outlived`: the steps left did not halve in LAST_ROUND_SLACK + 1 rounds (no progress reported, or past its
    declared work).  A job whose plan alone says it is ending is kept while it does (docs/results_notes.md)."""

    def __init__(self) -> None:
        self._left: dict[Any, list[float]] = {}

    def outlived(self, view: ClusterView) -> frozenset[Any]:
        jobs = {j.job_id: j for j in view.jobs if j.ran_last_round}
        self._left, n = {j: s for j, s in self._left.items() if j in jobs}, LAST_ROUND_SLACK + 1
        return frozenset(j for j, s in self._left.items() if len(s) >= n and jobs[j].steps_remaining >= s[-n] / 2)

    def note(self, view: ClusterView) -> None:
        for j in (j for j in view.jobs if j.ran_last_round):
            if j.job_id in self._left or wasted(work_left_s(j, None), view.round_length) == "last_round":
                left = [*self._left.get(j.job_id, []), float(j.steps_remaining)]
                self._left[j.job_id] = left[-LAST_ROUND_SLACK - 1 :]


def held(job: JobView) -> int:
    """The GPUs a kept job keeps: its asked count, or fewer when it is an elastic job that ran on fewer (started small,
    solver/elastic.py; one that ran on more gives the extra back)."""
    n = job.running_gpus
    return n if job.gpus_range is not None and n is not None and 0 < n < job.num_gpus else job.num_gpus


def _home(job: JobView) -> str | None:
    """The type a kept job stays on: the one it runs on (a move is a restart too) while it may still run there (its
    requested type; a throughput there at its batch size); None: unknown, or it must move (any type it can run on)."""
    t = job.running_type
    if t is None or (job.gpu_type is not None and t != job.gpu_type):
        return None
    return t if not job.throughput_by_type or t in job.throughput_by_type else None


def _fits(free: Mapping[str, int], here: str | None, job: JobView) -> bool:
    """Do the GPUs it keeps fit `free`: on `here` (the type it runs on), else on any type it can run on?"""
    n = held(job)
    return free.get(here, 0) >= n if here is not None else Packer(free).fits(n, job.gpu_type, job.throughput_by_type)


def _held(
    view: ClusterView, jobs: Mapping[Any, JobView], run: list[Any], placement: Mapping[Any, Any]
) -> tuple[dict[str, float], dict[str, float]]:
    """({user: GPUs its jobs of the run set hold}, {user: its weight, the mean of its active jobs' weights})."""
    held: dict[str, float] = {}
    for x in run:
        held[jobs[x].user] = held.get(jobs[x].user, 0.0) + sum(placement[x].values())
    ws: dict[str, list[float]] = {}
    for j in view.jobs:
        w = float(j.weight)
        ws.setdefault(j.user, []).append(w if math.isfinite(w) and w > 0 else 1.0)
    return held, {u: sum(v) / len(v) for u, v in ws.items()}


def _due(plans: Mapping[Any, JobPlan], jid: Any) -> float:
    """Seconds to a job's latest fair start (its plan's `fair_finish_in_s`; none or not finite: never)."""
    d = (plans.get(jid) or JobPlan(jid)).fair_finish_in_s
    return float(d) if d is not None and math.isfinite(d) else math.inf


def _left(plans: Mapping[Any, JobPlan], jid: Any) -> float:
    """A job's predicted remaining seconds (none or not finite: unbounded)."""
    r = (plans.get(jid) or JobPlan(jid)).predicted_remaining_s
    return float(r) if r is not None and math.isfinite(r) else math.inf


def _make_room(
    view: ClusterView,
    jobs: Mapping[Any, JobView],
    run: list[Any],
    placement: Mapping[Any, Any],
    job: JobView,
    reserved: Set[Any] = frozenset(),
    fair: bool = False,
) -> list[Any] | None:
    """The newly started jobs to take out of the run set (last first; never a `reserved` one; with `fair`, a job
    the restart bound keeps, its own user's before others', and never from a user who would then hold fewer GPUs
    for its weight than its user) so that `job` fits, on the type it runs on when that is known; None if it
    cannot."""
    free = free_gpus(view, placement)
    evict = []
    newcomers = [x for x in reversed(run) if not jobs[x].ran_last_round and x not in reserved]
    here = _home(job)
    if here is not None:
        newcomers = [x for x in newcomers if here in placement[x]]
    # fairness between users before the restart bound: its own user's newcomers, then only those of users who would
    # still hold at least as many GPUs for their weight as its user then does (the bound never buys a user GPUs)
    if fair:
        held_by, weight = _held(view, jobs, run, placement)
        u = job.user
        mine = held_by.get(u, 0.0) + held(job)
        newcomers = [x for x in newcomers if jobs[x].user == u] + [
            x
            for x in newcomers
            if jobs[x].user != u
            and (held_by[jobs[x].user] - sum(placement[x].values())) / weight[jobs[x].user] >= mine / weight[u] - 1e-9
        ]

    while not _fits(free, here, job):
        if not newcomers:
            return None
        e = newcomers.pop(0)
        evict.append(e)
        for t, n in placement[e].items():
            free[t] = free.get(t, 0) + n
    return evict
