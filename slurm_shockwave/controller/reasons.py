"""One human reason per job, from this round's decision (never from an older plan).

`annotate(view, decision, mode)` returns the decision with every active job's plan record (solver.types.JobPlan)
completed with `reason` and `expected_start` (view clock seconds; None = not in the planned window); nothing is
mutated.  The controller journals these,
`status`/`explain` print them, and the enactor may copy the reason into the job's AdminComment so a user of
plain `squeue -O admincomment` sees e.g. "shockwave: deferred, planned at 14:32".
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from solver import pinned
from solver.types import ClusterView, JobPlan, RoundDecision


def _at(t: float, now: float) -> str:
    """Wall clock (HH:MM) for real clocks, "+N s" for a simulated one."""
    if now > 1e9:
        return time.strftime("%H:%M", time.localtime(t))
    return f"t+{t:.0f}s"


def reason_for(
    running: bool,
    planned_now: bool,
    offset: int | None,
    path: str | None,
    mode: str | None,
    round_length: float,
    now: float,
    window: int | None = None,
    gate: str = "",
    kept: bool = False,
) -> tuple[str, float | None]:
    """(reason, expected start) of one job; `gate`: the preemption gate's line on a running job
    (solver/preemption.py), `kept`: the gate kept it running."""
    if planned_now:
        if running and kept:
            return f"kept running: {gate}; preempting it would not pay", now
        return ("running (planned this round)" if running else "released this round: starting now"), now
    if running:
        if mode == "advisory":
            return "running; not planned this round (advisory mode: left running)", None
        start = now + offset * round_length if offset else None
        when = f"released at {_at(start, now)} (round +{offset})" if start else "released when a round plans it"
        why = f": {gate}" if gate else ""
        return f"being stopped{why}; checkpoint signal, then requeued and held; {when}", start
    if offset is not None and offset > 0:
        start = now + offset * round_length
        why = f" ({gate})" if gate else ""  # e.g. no node has room for its gang (solver/nodes.py)
        return f"deferred{why}, planned at {_at(start, now)} (round +{offset})", start
    if path == "fallback":
        return "waiting: fallback round (least attained service first)", None
    span = f" ({window} rounds)" if window else ""
    return f"deferred: not planned in the window{span}; fair share of others comes first", None


def annotate(view: ClusterView, decision: RoundDecision, mode: str | None = None) -> RoundDecision:
    """The decision with a plan record for every active job, each with its reason and expected start."""
    run = set(decision.run)
    plans: dict[Any, JobPlan] = {}
    for j in view.jobs:
        plan = decision.plans.get(j.job_id) or JobPlan(j.job_id)
        planned_now = j.job_id in run
        offset = 0 if planned_now else plan.next_offset
        text, start = reason_for(
            j.ran_last_round,
            planned_now,
            offset,
            decision.path,
            mode,
            view.round_length,
            view.now,
            decision.window_rounds,
            plan.reason,
            plan.rule == "kept",
        )
        if planned_now and plan.rule == "pinned":  # solver/pinned.py
            text = f"running; {pinned.WHY}"
        if planned_now and plan.resize:  # an elastic job on another count than it asked (solver/elastic.py)
            text = f"{text}; {plan.resize}"
        rule = plan.rule or ("policy" if planned_now else "")  # a baseline: its own rule placed the job
        plans[j.job_id] = replace(plan, rule=rule, reason=text, expected_start=start, next_offset=offset)
    return replace(decision, plans=plans)
