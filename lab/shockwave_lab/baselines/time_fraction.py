"""Gavel's round mechanism: turn a time-fraction allocation X (job -> share of time on its GPUs) into the
set of jobs to run each round (docs/reference.md §7.1; Gavel's `_update_priorities` semantics).

- The allocation is recomputed when jobs arrived or left, but at most every `reset_interval` seconds (1000).
  At each recomputation the time accounts are reset (each job restarts at half a round) and the
  deficits accumulate `X_i x elapsed - time received`.
- Each round, priority_i = X_i / (time job i ran since the reset / total job time since the reset), or
  X_i x 1e9 before any time was accounted; jobs are taken greedily by (priority, deficit, X), highest
  first, while their gang fits.  A job that arrived after the last recomputation has no X yet: it is
  counted against the free GPUs when reached (last, with priority 0) but not started, as in Gavel.
- Several GPU types: X is for the cluster's total (type-unaware); each gang goes to the fastest type with room
  for it, in priority order (solver/placement.py).  gavel_het.py is Gavel's per-type form.
- Times are measured from the first round this policy saw (Gavel's simulated clock starts at 0), so the
  decisions do not depend on the clock's origin (Unix times in the controller).
"""
from __future__ import annotations

from solver.placement import Packer
from solver.types import ClusterView, JobView, RoundDecision
from solver.policies.base import Policy


class TimeFractionPolicy(Policy):
    name = "time_fraction"
    reset_interval = 1000.0

    def __init__(self, config=None):
        super().__init__(config)
        self.allocation: dict = {}
        self.job_time: dict = {}
        self.worker_time = 0.0
        self.deficits: dict = {}
        self.last_reset = 0.0
        self.need_update = False
        self._order: list = []
        self.origin: float | None = None     # view.now of the first round: the policy's clock starts there

    # subclasses: X_i in [0, 1] per active job
    def allocate(self, view: ClusterView) -> dict:  # pragma: no cover - interface
        raise NotImplementedError

    def decide(self, view: ClusterView) -> RoundDecision:
        if self.origin is None:
            self.origin = float(view.now)
        now = float(view.now) - self.origin
        half = view.round_length / 2.0
        for job_id, seconds in view.last_round_run_time.items():
            if job_id in self.job_time:
                self.job_time[job_id] += seconds
                self.worker_time += seconds
        active = {j.job_id: j for j in view.jobs}
        for job_id in [j for j in self._order if j not in active]:
            self._order.remove(job_id)
            self.job_time.pop(job_id, None)
            self.deficits.pop(job_id, None)
            self.need_update = True
        for job_id in active:
            if job_id not in self.job_time:
                self._order.append(job_id)
                self.job_time[job_id] = half
                self.deficits[job_id] = 0.0
                self.need_update = True
        if self.need_update and (now - self.last_reset >= self.reset_interval or self.last_reset == 0):
            self._reset(now, half)
            self.allocation = dict(self.allocate(view))
            self.need_update = False
        placement = self._select(view, active)
        return RoundDecision(run=tuple(placement), placement=placement)

    def _reset(self, now: float, half: float) -> None:
        elapsed = now - self.last_reset
        self.worker_time = 0.0
        for job_id in self._order:
            received = self.job_time[job_id] - half
            should = self.allocation.get(job_id, 0.0) * elapsed
            self.deficits[job_id] = self.deficits.get(job_id, 0.0) + should - received
            self.job_time[job_id] = half
            self.worker_time += half
        self.last_reset = now

    def priority(self, job: JobView) -> float:
        x = self.allocation.get(job.job_id)
        if x is None or x == 0.0 or job.throughput <= 0:
            return 0.0
        fraction = self.job_time[job.job_id] / self.worker_time if self.worker_time else 0.0
        return x / fraction if fraction > 0 else x * 1e9

    def _select(self, view: ClusterView, active: dict) -> dict:
        """{job: {type: GPUs}} of the round, in priority order."""
        entries = [(self.priority(active[j]), self.deficits[j], self.allocation.get(j, 0.0), j) for j in self._order]
        entries.sort(key=lambda e: e[:3], reverse=True)
        packer, run = Packer(view.capacity), {}
        for *_key, job_id in entries:
            if packer.total == 0:
                break
            job = active[job_id]
            t = packer.take_job(job) if job.throughput > 0 else None
            if t is not None and job_id in self.allocation:
                run[job_id] = {t: job.num_gpus}
        return run

    def state_dict(self) -> dict:
        return {"allocation": [[k, v] for k, v in self.allocation.items()],
                "job_time": [[k, v] for k, v in self.job_time.items()], "worker_time": self.worker_time,
                "deficits": [[k, v] for k, v in self.deficits.items()], "last_reset": self.last_reset,
                "need_update": self.need_update, "order": list(self._order), "origin": self.origin}

    def load_state_dict(self, state: dict) -> None:
        self.allocation = {k: v for k, v in state["allocation"]}
        self.job_time = {k: v for k, v in state["job_time"]}
        self.deficits = {k: v for k, v in state["deficits"]}
        self.worker_time = state["worker_time"]
        self.last_reset = state["last_reset"]
        self.need_update = state["need_update"]
        self._order = list(state["order"])
        self.origin = state.get("origin", 0.0)    # older states kept absolute times (origin 0)
