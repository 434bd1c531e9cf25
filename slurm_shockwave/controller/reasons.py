"""One human reason per job, from this round's decision (never from an older plan).

`annotate(view, decision, mode)` fills decision.info["jobs"][job] with `reason`, `planned_now` and
`expected_start` (view clock seconds; None = not in the planned window).  The controller journals these,
`status`/`explain` print them, and the enactor may copy the reason into the job's AdminComment so a user of
plain `squeue -O admincomment` sees e.g. "shockwave: deferred, planned at 14:32".
"""
from __future__ import annotations

import time


def _at(t: float, now: float) -> str:
    """Wall clock (HH:MM) for real clocks, "+N s" for a simulated one."""
    if now > 1e9:
        return time.strftime("%H:%M", time.localtime(t))
    return f"t+{t:.0f}s"


def reason_for(running: bool, planned_now: bool, offset, path: str | None, mode: str | None, round_length: float,
               now: float, window: int | None = None) -> tuple[str, float | None]:
    """(reason, expected start) of one job."""
    if planned_now:
        return ("running (planned this round)" if running else "released this round: starting now"), now
    if running:
        if mode == "advisory":
            return "running; not planned this round (advisory mode: left running)", None
        return "not planned this round: checkpoint signal, then requeued and held", (
            now + offset * round_length if offset else None)
    if offset is not None and offset > 0:
        start = now + offset * round_length
        return f"deferred, planned at {_at(start, now)} (round +{offset})", start
    if path == "fallback":
        return "waiting: fallback round (least attained service first)", None
    span = f" ({window} rounds)" if window else ""
    return f"deferred: not planned in the window{span}; fair share of others comes first", None


def annotate(view, decision, mode: str | None = None) -> None:
    """Fill decision.info["jobs"][job]["reason" | "planned_now" | "expected_start"] in place."""
    info = decision.info
    jobs = info.setdefault("jobs", {}) if isinstance(info, dict) else {}
    run = set(decision.run)
    path = info.get("path") if isinstance(info, dict) else None
    window = info.get("window_rounds") if isinstance(info, dict) else None
    for j in view.jobs:
        m = jobs.get(j.job_id)
        if not isinstance(m, dict):
            m = jobs[j.job_id] = {}
        planned_now = j.job_id in run
        offset = m.get("next_planned_round_offset")
        if planned_now:
            offset = 0
        text, start = reason_for(j.ran_last_round, planned_now, offset, path, mode, view.round_length, view.now,
                                 window)
        m["reason"], m["planned_now"], m["expected_start"] = text, planned_now, start
