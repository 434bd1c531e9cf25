"""What the controller's preemptions cost and whether each one paid, counted from what Slurm shows.

Every checkpoint signal the controller sends opens a preemption (job, restart count, the work it had left); the
next round's observation is its round boundary (rounds may start early, when GPUs are freed); the preemption is
closed when the job is seen running again at a higher restart count (it restarted at Slurm's start time, whole
seconds: compared with the boundary's whole second) or leaves the queue.  A preemption is wasted by the one rule of
solver/preemption.py (`wasted`): at most one round of work left, or restarted before the next round boundary.
The counts (preempted, kept, wasted and why) are kept in the controller state ("preemptions"), so they add up
over restarts of the controller, and exported as the metric ``shockwave_preemptions_total{outcome}``.

The signals themselves (the backend's `signalled` state: job -> [time, restart count], and a third item, 1, once a
later round planned the job again while it still ran): `signal_time`, `replanned`, `settle`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

from solver.preemption import wasted

log = logging.getLogger("slurm_shockwave.slurm")

OUTCOMES = ("preempted", "kept", "wasted", "wasted_last_round", "wasted_restarted_early")


class PreemptionLog:
    def __init__(self, state, metrics=None):
        self.state, self.metrics = state, metrics
        saved = state.get("preemptions", {}) or {}
        self.counts = {k: int((saved.get("counts") or {}).get(k, 0)) for k in OUTCOMES}
        self.open: dict[str, dict] = {str(k): dict(v) for k, v in (saved.get("open") or {}).items()}

    def _count(self, outcome: str, n: int = 1) -> None:
        if n <= 0:
            return
        self.counts[outcome] += n
        if self.metrics is not None:
            self.metrics.preemptions.labels(outcome).inc(n)

    def kept(self, n: int) -> None:
        """Running jobs the preemption gate kept running this round."""
        self._count("kept", n)

    def signalled(self, job_id, restart: int, now: float, left_s: float | None, round_length: float) -> None:
        """A checkpoint signal was sent to this run of the job (a preemption starts)."""
        key = str(job_id)
        if key in self.open and self.open[key]["restart"] == restart:
            return  # the same run signalled again (after a restart)
        self._count("preempted")
        why = wasted(left_s, round_length)
        if why:
            self._wasted(job_id, why, f"{left_s:.0f} s of work left")
        self.open[key] = {"restart": restart, "t": now, "boundary": None, "wasted": bool(why)}

    def observe(self, jobs: dict, round_length: float, now: float) -> None:
        """At the start of a round: close the preemptions whose job runs again (at a higher restart count) or
        left the queue.  `jobs`: job id -> SlurmJob of the jobs in the queue."""
        for key, entry in list(self.open.items()):
            if entry.get("boundary") is None:
                entry["boundary"] = now  # the first round after the signal starts now
            j = jobs.get(int(key))
            if j is None or j.finished:
                del self.open[key]
                continue
            if j.state != "RUNNING" or j.restart_count <= entry["restart"]:
                continue
            del self.open[key]
            why = (
                None if entry.get("wasted") else wasted(None, round_length, j.start_time, math.floor(entry["boundary"]))
            )
            if why:
                self._wasted(key, why, f"restarted {j.start_time - entry['t']:.0f} s after its signal")

    def _wasted(self, job_id, why: str, detail: str) -> None:
        self._count("wasted")
        self._count(f"wasted_{why}")
        log.warning("job %s: wasted preemption (%s: %s)", job_id, why.replace("_", " "), detail)

    def save(self) -> None:
        self.state.put("preemptions", {"counts": self.counts, "open": self.open})


def signal_time(entry, restart_count: int):
    """When this run of the job got its preemption signal; a signal sent to an earlier run (the job was requeued and
    restarted since) does not count for this one."""
    if isinstance(entry, (list, tuple)):
        if len(entry) not in (2, 3) or entry[1] != restart_count:
            return None
        entry = entry[0]
    return entry if isinstance(entry, (int, float)) else None


def replanned(entry) -> bool:
    """A signalled run that a later round planned again while it still ran: its signal may still requeue it, so it
    is not released while it runs; it is signalled afresh if it loses a later round (enact.py `reconcile`)."""
    return isinstance(entry, (list, tuple)) and len(entry) == 3 and bool(entry[2])


def settle(signalled: dict, observed: Mapping, run: set, moves: Mapping) -> set:
    """After a round's enactment: forget the signals of jobs gone, off their GPUs or restarted since; mark as
    overruled (`replanned`) those of jobs the round runs again as they are.  Returns the jobs the round runs whose
    requeue it waits for (a resize, a move, or planned again after its signal): back in the queue, they start the
    next round early, to be released then (timing.py `wait_for_round`)."""
    for j, entry in list(signalled.items()):
        ob = observed.get(j)
        if ob is None or ob.state != "RUNNING" or signal_time(entry, ob.restart_count) is None:
            signalled.pop(j, None)
        elif j in run and not ob.wanted_gpus and j not in moves and not replanned(entry):
            signalled[j] = [*entry[:2], 1]
    return {j for j in signalled if j in run}


def stopping(signalled: dict, observed: Mapping) -> frozenset:
    """The jobs on their way off their GPUs: running, signalled at their restart count, not planned again since."""
    return frozenset(
        j
        for j, entry in signalled.items()
        if j in observed
        and observed[j].state == "RUNNING"
        and signal_time(entry, observed[j].restart_count) is not None
        and not replanned(entry)
    )
