"""RoundLoop: cluster state -> policy -> decision -> check -> backend, once per round.

The simulator is this loop on a SimulatedCluster; the Slurm controller is this loop on the Slurm backend.
Every decision is checked against the view before enactment (known jobs, no job twice, capacity) on every
backend.  A policy that raises, or whose decision fails the check, does not stop the loop: the round uses
THE fallback (`fallback_decision`: least attained service per weight first, whole gangs, never over
capacity; the same rule the Shockwave policy uses when it has neither a solution nor a cached plan) and the
error is logged.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from solver.market.plan import max_min_round
from solver.types import ClusterView, RoundDecision

from ..backends.base import ClusterBackend, check_decision
from .reasons import annotate

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


def fallback_decision(view: ClusterView, why: str = "policy failed") -> RoundDecision:
    """The one fallback: max-min fairness in attained run time (solver.market.plan.max_min_round)."""
    rows = [(j.job_id, j.num_gpus, j.run_time, j.weight, j.arrival_time) for j in view.jobs]
    run = max_min_round(rows, view.num_gpus)
    return RoundDecision(run=tuple(run), info={"path": "fallback", "fallback": why, "jobs": {}})


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

    def decide(self, view: ClusterView) -> tuple[RoundDecision, bool]:
        """The policy's decision, checked; the fallback (and True) when the policy fails or the check does."""
        try:
            decision = self.policy.decide(view)
        except Exception:  # noqa: BLE001 - the loop must survive any policy failure
            log.exception("policy %s failed in round %d; using the fallback",
                          getattr(self.policy, "name", "?"), view.round_index)
            return fallback_decision(view, "policy raised"), True
        try:
            check_decision(view, decision)
        except ValueError as e:
            log.error("policy %s: rejected decision (%s); using the fallback", getattr(self.policy, "name", "?"), e)
            return fallback_decision(view, f"decision rejected: {e}"), True
        if not isinstance(decision.info, dict):
            decision = RoundDecision(run=tuple(decision.run), info=dict(decision.info or {}))
        return decision, False

    def run_round(self) -> RoundRecord:
        view = self.backend.observe()
        started = time.perf_counter()
        decision, fallback = self.decide(view)
        elapsed = time.perf_counter() - started
        self.decide_seconds += elapsed
        record_plan = getattr(self.backend, "record_plan", None)
        if record_plan is not None or self.on_decision is not None:     # someone reads the explanations
            mode = getattr(getattr(self.backend, "cfg", None), "mode", None)
            try:
                annotate(view, decision, mode)
            except Exception:  # noqa: BLE001 - explanations never stop a round
                log.exception("round %d: could not annotate the decision", view.round_index)
        if self.on_decision is not None:
            self.on_decision(view, decision, elapsed, fallback)
        if record_plan is not None:
            record_plan(view, decision, fallback)
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
