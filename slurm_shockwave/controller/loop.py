"""RoundLoop: cluster state -> policy -> decision -> placement and check -> record -> backend, once per round.

The simulator is this loop on a SimulatedCluster; the controller is this loop on a service backend (Slurm).
Every decision is placed (solver/placement.py) and checked against the view before enactment (known jobs,
no job twice, every gang on GPUs of its type within capacity) on every backend.  A policy that raises, or
whose decision fails the check, does not stop the loop: the round uses THE fallback (`fallback_decision`:
least attained service per weight first, whole gangs, never over capacity; the same rule the Shockwave policy
uses when it has neither a solution nor a cached plan) and the error is logged.

Whatever the policy decides, a running job that may not be preempted (`JobView.preemptible` False) runs on as it ran
(solver/pinned.py, rule "pinned"): it is never preempted, resized or moved, on every backend and for every policy.
With `preemption_cost_s` set (the controller; a simulation that charges the same restart cost), the decision
goes through the preemption gate (solver/preemption.py) before it is annotated: a running job whose preemption
would not pay keeps its GPUs (rule "kept").  Preemptions are counted either way (`preemptions`: preempted,
kept, wasted), so a simulation without the gate reports what it wastes.

For a policy that sizes elastic jobs (`Policy.sizes_elastic_jobs`, the default) and with `preemption_cost_s` set, the
gated decision's elastic jobs get their counts (solver/elastic.py: idle GPUs lent, given back when the queue grows,
a change only when it pays for its restarts); counted in `resizes` (grown, shrunk).  A running job whose count changed
less than a round ago (`_changed_at`; 5% of a round is left for the jitter of the controller's reads) is not grown
again: that change would be wasted (solver/elastic.py `wasted_change`).  A grown gang that then fits no node runs on
its asked count instead.

On a cluster whose view lists its nodes, the gated decision is then given its nodes (solver/nodes.py): a running job
moves only for a policy that moves running jobs (`Policy.moves_running_jobs`) and, under the gate, never within its
last round of work; moves are counted (`moves`).

Each round makes one `RoundRecord` (journal/record.py).  With `explain=True` (the controller) the decision's
plan records are completed with one human reason per job (reasons.py) before the record is made; the
`on_decision` hook sees the record before enactment (the controller journals it there), `on_round` after.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from slurm_shockwave.backends.base import ClusterBackend, check_decision
from slurm_shockwave.controller.reasons import annotate
from slurm_shockwave.journal.record import RoundRecord
from solver import elastic, pinned, preemption, type_moves
from solver.market.plan import max_min_round
from solver.nodes import assign_nodes, moved
from solver.policies.base import Policy
from solver.types import ClusterView, JobPlan, RoundDecision

log = logging.getLogger("slurm_shockwave.loop")


def fallback_decision(view: ClusterView, why: str = "policy failed") -> RoundDecision:
    """The one fallback: max-min fairness in attained run time (solver.market.plan.max_min_round), older jobs
    first on ties, each gang on the fastest type with room.  No policy has one of its own: a failure at any depth
    of a policy reaches `RoundLoop.decide`, which runs this and counts it."""
    rows = [
        (j.job_id, j.num_gpus, j.run_time, j.weight, j.arrival_time - view.now, j.gpu_type, j.throughput_by_type)
        for j in view.jobs
    ]
    run = tuple(max_min_round(rows, view.capacity))
    return RoundDecision(
        run=run, plans={j: JobPlan(j, rule="fallback") for j in run}, path="fallback", fallback_reason=why
    )


#: a count change less than this share of a round ago is recent (the rest: the jitter of a controller's reads)
RECENT = 0.95


class RoundLoop:
    def __init__(
        self,
        backend: ClusterBackend,
        policy: Policy,
        on_round: Callable[[RoundRecord], object] | None = None,
        keep_records: bool = False,
        on_decision: Callable[[RoundRecord], object] | None = None,
        explain: bool = False,
        mode: str | None = None,
        preemption_cost_s: float | None = None,
        rounds_per_restart: int = preemption.ROUNDS_PER_RESTART,
    ) -> None:
        self.backend = backend
        self.policy = policy
        self.on_round = on_round
        self.on_decision = on_decision  # called with the record before enactment (the controller journals it)
        self.keep_records = keep_records
        self.explain = explain
        self.mode = mode  # advisory | authoritative: how a running job's reason reads
        self.preemption_cost_s = preemption_cost_s  # None: no gate (the reference's semantics)
        self.rounds_per_restart = rounds_per_restart  # the gate's restart bound (solver/preemption.py)
        self.preemptions = {"preempted": 0, "kept": 0, "wasted": 0}
        self.moves = 0  # running jobs placed on other nodes (solver/nodes.py)
        self.type_moves = 0  # running jobs moved to a faster GPU type (solver/type_moves.py)
        self.last_type_moves: dict[Any, tuple[str, str]] = {}
        self.resizes = {"grown": 0, "shrunk": 0}  # count changes of elastic jobs (solver/elastic.py)
        self._last_run: set[Any] | None = None  # the previous round's run set (None: no round yet)
        self._run_before: set[Any] | None = None  # the run set of the round before that
        self.last_resizes: dict[Any, elastic.Sizing] = {}
        self._changed_at: dict[Any, float] = {}  # job -> `now` of the round that last changed its count
        self._last_rounds, self._outlived = preemption.LastRounds(), frozenset[Any]()  # past their last round
        # this round's {"preempted": [...], "kept": [...], "wasted": {job: why}}
        self.last_preemptions: dict[str, Any] = {}
        self.records: list[RoundRecord] = []
        self.rounds = 0
        self.fallbacks = 0
        self.decide_seconds = 0.0
        # GPU-rounds placed by each rule (types.RULES), in every round and in contested rounds (more GPUs
        # asked for than the cluster has): what decides, measured, not advertised
        self.gpu_rounds: dict[str, dict[str, int]] = {"all": {}, "contested": {}}

    def decide(self, view: ClusterView) -> tuple[RoundDecision, bool]:
        """The policy's decision, placed and checked; the fallback (and True) when the policy fails or the check
        does."""
        name = self.policy.name
        try:
            decision = self.policy.decide(view)
        except Exception as e:  # the loop survives any policy failure: logged with its traceback, counted
            log.exception("policy %s failed in round %d; using the fallback", name, view.round_index)
            return check_decision(view, fallback_decision(view, f"policy raised {type(e).__name__}: {e}")), True
        try:
            return check_decision(view, decision), False
        except (ValueError, TypeError, AttributeError) as e:  # not a valid decision for this view: logged, counted
            log.error("policy %s: rejected decision (%s); using the fallback", name, e)
            return check_decision(view, fallback_decision(view, f"decision rejected: {e}")), True

    def run_round(self) -> RoundRecord:
        view = self.backend.observe()
        started = time.perf_counter()
        decision, fallback = self.decide(view)
        decision = self._gate(view, decision)
        decision = self._place(view, decision)
        elapsed = time.perf_counter() - started
        self.decide_seconds += elapsed
        if self.explain:
            try:
                decision = annotate(view, decision, self.mode)
            except Exception:
                log.exception("round %d: could not annotate the decision", view.round_index)
        record = RoundRecord(view, decision, elapsed, fallback, self.policy.name, self.backend.round_context())
        if self.on_decision is not None:
            self.on_decision(record)
        self.backend.apply(decision)
        self._run_before, self._last_run = self._last_run, set(decision.run)
        self.rounds += 1
        self.fallbacks += int(fallback)
        self._count_rules(view, decision)
        if self.keep_records:
            self.records.append(record)
        if self.on_round is not None:
            self.on_round(record)
        self.backend.advance()
        return record

    def _gate(self, view: ClusterView, decision: RoundDecision) -> RoundDecision:
        """The preemption gate (when on), and this round's preemptions (`_place` counts them)."""
        stopping = self.backend.stopping()
        held = pinned.pin(view, decision)
        if held is not decision:  # the policy's decision was checked; only a changed one is checked again
            decision = check_decision(view, held)
        self._outlived = self._last_rounds.outlived(view)
        if self.preemption_cost_s is not None:
            costs = self.backend.preemption_costs()
            # restarted in the round before: ran in it, not in the one before it, and not for the first time
            before = self._run_before if self._run_before is not None else {j.job_id for j in view.jobs}
            fresh = frozenset(j.job_id for j in view.jobs if j.ran_last_round and j.restarts and j.job_id not in before)
            gated, _verdicts = preemption.gate(
                view, decision, costs, self.preemption_cost_s, stopping, self.rounds_per_restart, self._outlived, fresh
            )
            decision = check_decision(view, gated)
        self._last_rounds.note(view)
        run = set(decision.run)
        lost = [j for j in view.jobs if j.ran_last_round and j.job_id not in run and j.job_id not in stopping]
        wasted: dict[Any, str] = {}
        for j in lost:
            why = preemption.wasted(preemption.work_left_s(j, decision.plans.get(j.job_id)), view.round_length)
            if why:
                wasted[j.job_id] = why
        kept = [j for j, p in decision.plans.items() if p.rule == "kept" and j in run]
        self.last_preemptions = {"preempted": [j.job_id for j in lost], "kept": kept, "wasted": wasted}  # _place counts
        return decision

    def _place(self, view: ClusterView, decision: RoundDecision) -> RoundDecision:
        """Elastic jobs' counts (when the policy sizes them and a restart cost is known), then nodes (when the view
        lists them): a grown gang that fits no node runs on its asked count instead."""
        sized, self.last_resizes, costs, self.last_type_moves = decision, {}, {}, {}
        fixed = pinned.pinned(view)  # a pinned job keeps its count; a stopping one its base
        # running jobs no round started (Slurm starts a job on its own count when GPUs are free, before the round)
        last = self._last_run
        begun = frozenset(j.job_id for j in view.jobs if j.ran_last_round and last is not None and j.job_id not in last)
        recent = frozenset(j for j, t in self._changed_at.items() if view.now - t < RECENT * view.round_length)
        sizing = self.preemption_cost_s is not None and getattr(self.policy, "sizes_elastic_jobs", False)
        if sizing:
            costs = self.backend.preemption_costs()
            fixed |= frozenset(self.backend.stopping())
            sized, self.last_resizes = elastic.size(
                view, decision, self.preemption_cost_s or 0.0, costs, fixed, self.rounds_per_restart, begun, recent
            )
            sized = check_decision(view, sized)
        sized, view = self._move_types(view, sized, costs, fixed)
        if view.nodes:
            moves = getattr(self.policy, "moves_running_jobs", True)
            gated = self.preemption_cost_s is not None  # a move is a restart: the gate's last-round rule holds
            placed = assign_nodes(view, sized, moves, gated, self._outlived)
            lost = frozenset(j for j in self.last_resizes if j in sized.run and j not in placed.run)
            if lost:
                sized, self.last_resizes = elastic.size(
                    view,
                    decision,
                    self.preemption_cost_s or 0.0,
                    costs,
                    lost | fixed,
                    self.rounds_per_restart,
                    begun,
                    recent,
                )
                sized = check_decision(view, sized)
                sized, view = self._move_types(view, sized, costs, fixed)
                placed = assign_nodes(view, sized, moves, gated, self._outlived)
            self.moves += len(moved(view, placed))
            sized = placed
        # a job that lost its round but runs on fewer GPUs was resized, not preempted; then the preemptions count
        running, round_ = set(sized.run), self.last_preemptions
        if running & set(round_.get("preempted", [])):
            round_["preempted"] = [j for j in round_["preempted"] if j not in running]
            round_["wasted"] = {j: w for j, w in round_["wasted"].items() if j not in running}
        for key, items in round_.items():
            self.preemptions[key] += len(items)
        self.type_moves += len(self.last_type_moves)
        self._changed_at = {j: t for j, t in self._changed_at.items() if j in recent}
        for j, s in self.last_resizes.items():
            if s.after != s.before:
                self.resizes["grown" if s.after > s.before else "shrunk"] += 1
                self._changed_at[j] = view.now
        return sized

    def _move_types(
        self, view: ClusterView, decision: RoundDecision, costs: dict[Any, Any], fixed: frozenset[Any]
    ) -> tuple[RoundDecision, ClusterView]:
        """Running jobs moved to a faster GPU type where that pays (under the gate; solver/type_moves.py), with the
        view the moved decision is checked against."""
        if self.preemption_cost_s is None or len(view.capacity) < 2:
            return decision, view
        costs = costs or self.backend.preemption_costs()
        changed = {j for j, s in self.last_resizes.items() if s.after != s.before}
        stay = fixed | changed | frozenset(self.backend.stopping())
        out, self.last_type_moves = type_moves.move(
            view, decision, self.preemption_cost_s, costs, stay, self.rounds_per_restart
        )
        if not self.last_type_moves:
            return decision, view
        view = type_moves.unpinned(view, set(self.last_type_moves))
        return check_decision(view, out), view

    def _count_rules(self, view: ClusterView, decision: RoundDecision) -> None:
        contested = sum(j.num_gpus for j in view.jobs) > view.num_gpus
        asked = {j.job_id: j.num_gpus for j in view.jobs}
        for jid in decision.run:
            plan = decision.plans.get(jid)
            rule = (plan.rule if plan is not None else "") or "policy"
            placed = sum(decision.placement[jid].values())  # an elastic job may run on other counts
            lent = max(0, placed - asked[jid]) if plan is not None and plan.gpus else 0
            for scope in ("all", "contested") if contested else ("all",):
                counts = self.gpu_rounds[scope]
                counts[rule] = counts.get(rule, 0) + placed - lent
                if lent:
                    counts["elastic"] = counts.get("elastic", 0) + lent

    def decided_by(self) -> dict[str, dict[str, float]]:
        """{scope: {rule: share of the GPU-rounds it placed}} for scope "all" and "contested"."""
        out: dict[str, dict[str, float]] = {}
        for scope, counts in self.gpu_rounds.items():
            total = sum(counts.values())
            out[scope] = {rule: round(n / total, 4) for rule, n in sorted(counts.items())} if total else {}
        return out

    def run(self, max_rounds: int | None = None) -> None:
        n = 0
        while not self.backend.done() and (max_rounds is None or n < max_rounds):
            self.run_round()
            n += 1
