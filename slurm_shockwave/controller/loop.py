"""RoundLoop: cluster state -> policy -> decision -> backend, once per round.

The simulator is this loop on a SimulatedCluster; the Slurm controller is this loop on the Slurm backend.
A policy that raises does not stop the loop: the round falls back to a safe greedy decision (oldest
job first, whole gangs, never over capacity) and the error is logged.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from solver.types import ClusterView, RoundDecision

from ..backends.base import ClusterBackend

log = logging.getLogger("slurm_shockwave.loop")


@dataclass
class RoundRecord:
    round_index: int
    now: float
    active: int
    run: tuple
    decide_seconds: float
    fallback: bool = False
    info: dict = field(default_factory=dict)


def greedy_fallback(view: ClusterView) -> RoundDecision:
    free, run = view.num_gpus, []
    for job in sorted(view.jobs, key=lambda j: (j.arrival_time, str(j.job_id))):
        if job.num_gpus <= free:
            run.append(job.job_id)
            free -= job.num_gpus
    return RoundDecision(run=tuple(run), info={"fallback": "greedy"})


class RoundLoop:
    def __init__(self, backend: ClusterBackend, policy, on_round=None, keep_info: bool = False,
                 on_decision=None):
        self.backend = backend
        self.policy = policy
        self.on_round = on_round
        self.on_decision = on_decision     # called before enactment (the controller journals the plan)
        self.keep_info = keep_info
        self.records: list[RoundRecord] = []
        self.decide_seconds = 0.0

    def run_round(self) -> RoundRecord:
        view = self.backend.observe()
        started = time.perf_counter()
        fallback = False
        try:
            decision = self.policy.decide(view)
        except Exception:  # noqa: BLE001 - the loop must survive any policy failure
            log.exception("policy %s failed in round %d; using the greedy fallback",
                          getattr(self.policy, "name", "?"), view.round_index)
            decision, fallback = greedy_fallback(view), True
        elapsed = time.perf_counter() - started
        self.decide_seconds += elapsed
        if self.on_decision is not None:
            self.on_decision(view, decision, elapsed, fallback)
        self.backend.apply(decision)
        record = RoundRecord(view.round_index, view.now, len(view.jobs), tuple(decision.run), elapsed, fallback,
                             dict(decision.info) if self.keep_info else {})
        self.records.append(record)
        if self.on_round is not None:
            self.on_round(record, view)
        self.backend.advance()
        return record

    def run(self, max_rounds: int | None = None) -> None:
        n = 0
        while not self.backend.done() and (max_rounds is None or n < max_rounds):
            self.run_round()
            n += 1
