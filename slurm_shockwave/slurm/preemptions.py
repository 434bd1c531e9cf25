"""What the controller's preemptions cost and whether each one paid, counted from what Slurm shows.

Every checkpoint signal the controller sends opens a preemption (job, restart count, the work it had left); the
next round's observation is its round boundary (rounds may start early, when GPUs are freed); the preemption is
closed when the job is seen running again at a higher restart count (it restarted at Slurm's start time, whole
seconds: compared with the boundary's whole second) or leaves the queue.  A preemption is wasted by the one rule of
solver/preemption.py (`wasted`): at most one round of work left, or restarted before the next round boundary.
The counts (preempted, kept, wasted and why) are kept in the controller state ("preemptions"), so they add up
over restarts of the controller, and exported as the metric ``shockwave_preemptions_total{outcome}``.
"""

from __future__ import annotations

import logging
import math

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
