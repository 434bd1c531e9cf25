"""What the two Shockwave policies share (ShockwavePaper: the paper's market decides; ShockwaveEDF: the default,
earliest fair-finish deadline first).  Not a policy itself (no label, so the registry does not list it).

* Estimates: the Bayesian predictor's remaining time per job (its predicted batch-size regimes' epoch durations,
  solver/predictor.py); the finished part of the current epoch counts as done; a finishing job (every epoch
  reported, still running: evaluation, final checkpoint) has its measured remaining time, else half a round.
* Fair-finish targets: F-bar, Shockwave's momentum-smoothed fair-share finish time (solver/market/fairshare.py),
  re-estimated when jobs arrive or leave, relative to each job's own arrival (this project's clock fix:
  shifting the clock's origin changes nothing).  rho-hat = (age + R/s) / F-bar.  Shares are between users, not
  jobs (fairshare.user_shares: a user's jobs split the user's share and budget, so splitting a job buys
  nothing); with one user, the reference's s = min(1, G/N).
* The window plan: a plan of W rounds made when jobs arrive or leave and every ``reopt_rounds`` rounds, played
  from a cache in between, with the rule that placed each job in each round (types.RULES); GPUs freed since the
  plan was made go to the policy's own fill order.
* No starvation (this project's fix, kept by both): a job that has not run for B = ``starvation_rounds`` rounds
  (default 2W) runs first, longest wait first, head of line never skipped; it waits at most
  B + ceil((N - 1) / floor(G / g_max)) rounds between two runs (docs/performance.md).  A round counts as run when
  this policy decided to run the job, except the rounds in which it decided so and the job did not run (the
  preemption gate gave its GPUs to jobs the restart bound keeps, or the placement found it no node): those count as
  waited (`kept_out`, until the job runs; a round in which it was not decided does not restart that count), so such
  a job becomes overdue too, and the guard's first job is a reservation the gate keeps (an 8-GPU job waited 140
  rounds without the count, docs/elastic.md; one undecided round restarted it, and an 8-GPU job of the held-out
  gen150j_16g_s304 reached 39 of 40 rounds twice and first ran 122 rounds after it arrived, docs/results_notes.md).
* No fallback of its own: when there is neither a plan nor a solution, `decide` raises PlanUnavailable and the round
  loop runs the one fallback (slurm_shockwave/controller/loop.py) and counts it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from solver.market.fairshare import FairShareTracker, rho_hat, user_shares
from solver.placement import Packer
from solver.policies.base import Policy
from solver.predictor import RegimeSummary, done_duration_from_summary, predict_remaining
from solver.types import ClusterView, JobPlan, RoundDecision

log = logging.getLogger("solver.market")


_Table = dict[Any, Any]  # job id -> a value or a dict of details


class _WindowSettings(Protocol):
    """What the shared part reads of either policy's settings (ShockwaveConfig, ShockwaveEDFConfig)."""

    future_rounds: int
    reopt_rounds: int

    @property
    def starvation_bound_rounds(self) -> int: ...


class PlanUnavailable(RuntimeError):
    """The window cannot be planned this round and no earlier plan covers it: the caller's fallback decides."""


class ShockwaveBase(Policy):
    """Subclasses give `_fill_order` (who takes GPUs freed since the plan was made, with per-job details for
    explain) and `_plan_window` (sets plan, plan_rules, plan_meta; may raise: the cached plan is used, else
    `decide` raises PlanUnavailable).  ``restate``: the predictor's restatement rule (solver/predictor.py), the
    reference's by default."""

    restate = "reference"
    config: _WindowSettings  # Policy.__init__ validates it; each subclass names its model

    if TYPE_CHECKING:  # given by the subclasses

        def _fill_order(self, view: ClusterView, est: _Table, r: int) -> tuple[list[Any], _Table]: ...
        def _plan_window(
            self, view: ClusterView, est: _Table, share: _Table, fill: list[Any], fresh: _Table
        ) -> None: ...

    def __init__(self, config: object = None) -> None:
        super().__init__(config)
        self.fairshare = FairShareTracker()
        self.known_jobs: set[Any] = set()
        self.plan: dict[int, list[Any]] = {}  # absolute round -> job ids
        self.plan_rules: dict[int, dict[Any, Any]] = {}  # absolute round -> {job id: the rule that placed it}
        self.plan_meta: dict[Any, Any] = {}  # job id -> details from the last plan (rho-hat, weight, rounds)
        self.last_solve_round: int | None = None
        self.last_solve_time = 0.0
        self.last_status = ""
        self.summaries: dict[str, RegimeSummary] = {}  # per job: running regime counts (O(1) per new epoch)
        self.last_ran: dict[str, int] = {}  # per job: last round it ran (or first seen - 1)
        self.kept_out: dict[str, int] = {}  # per job: rounds this policy ran it and it did not run, since it ran
        self.budgets: dict[Any, Any] = {}  # per job: its market budget this round (user_shares)

    # ------------------------------------------------------------------ state (a controller restart keeps it)
    def state_dict(self) -> dict[Any, Any]:
        return {
            "version": 2,
            "policy": self.name,
            "fairshare": self.fairshare.state_dict(),
            "known_jobs": sorted(self.known_jobs, key=str),
            "plan": [[r, list(ids)] for r, ids in sorted(self.plan.items())],
            "plan_rules": [
                [r, [[j, rule] for j, rule in rules.items()]] for r, rules in sorted(self.plan_rules.items())
            ],
            "plan_meta": [[jid, dict(m)] for jid, m in self.plan_meta.items()],
            "last_solve_round": self.last_solve_round,
            "last_ran": dict(self.last_ran),
            "kept_out": dict(self.kept_out),
        }

    def load_state_dict(self, state: Mapping[Any, Any]) -> None:
        self.fairshare.load_state_dict(state.get("fairshare", {}))
        self.known_jobs = set(state.get("known_jobs", []))
        self.last_ran = {str(k): int(v) for k, v in dict(state.get("last_ran", {})).items()}
        self.kept_out = {str(k): int(v) for k, v in dict(state.get("kept_out", {})).items()}
        self.summaries = {}
        if state.get("policy", self.name) == self.name:  # another policy's plan is not this one's
            self.plan = {int(r): list(ids) for r, ids in state.get("plan", [])}
            self.plan_rules = {int(r): {j: rule for j, rule in rules} for r, rules in state.get("plan_rules", [])}
            self.plan_meta = {jid: dict(m) for jid, m in state.get("plan_meta", [])}
            lsr = state.get("last_solve_round")
            self.last_solve_round = None if lsr is None else int(lsr)
        if int(state.get("version", 1)) < 2:
            # version 1 kept F-bar as absolute times: start the targets again (relative to arrival)
            self.fairshare = FairShareTracker()
            self.known_jobs = set()

    # ------------------------------------------------------------------ decide
    def decide(self, view: ClusterView) -> RoundDecision:
        """This round's decision.  A failure raises (PlanUnavailable when the window cannot be planned and no
        earlier plan covers the round): the round loop runs the one fallback and counts it."""
        return self._decide(view)

    def _decide(self, view: ClusterView) -> RoundDecision:
        r = int(view.round_index)
        self._track(view, r)
        est = self._estimates(view)
        share, self.budgets = user_shares(view.num_gpus, view.jobs)  # {job: s_i}, {job: market budget B_i}
        changed = self._targets(view, est, share, r)
        if not view.jobs:
            self.plan, self.plan_meta, self.plan_rules = {}, {}, {}
            return RoundDecision((), path="idle")
        fill, fresh = self._fill_order(view, est, r)
        need = (
            changed
            or r not in self.plan
            or self.last_solve_round is None
            or r - self.last_solve_round >= self.config.reopt_rounds
            or r < self.last_solve_round
        )
        path, solve_time = "cached", 0.0
        if need:
            t0 = time.perf_counter()
            try:
                self._plan_window(view, est, share, fill, fresh)
                self.last_solve_round = r
                path = "solved"
            except Exception as exc:  # the plan of an earlier round still covers this one: keep it (logged)
                if r not in self.plan:
                    raise PlanUnavailable(
                        f"{self.name}: the window cannot be planned in round {r} and no "
                        f"earlier plan covers it ({type(exc).__name__}: {exc})"
                    ) from exc
                log.warning("%s: window plan failed in round %d (%s); the cached plan is kept", self.name, r, exc)
                path = "cached"
            solve_time = time.perf_counter() - t0
        return self._from_plan(view, est, path, solve_time, fill, fresh)

    def _track(self, view: ClusterView, r: int) -> None:
        """When each job last ran, and the rounds in a row it was decided and did not run; forget jobs that left."""
        keys = set()
        for j in view.jobs:
            key = str(j.job_id)
            keys.add(key)
            if key not in self.last_ran:
                self.last_ran[key] = r - 1
                continue
            if j.ran_last_round:
                self.kept_out.pop(key, None)
                self.last_ran[key] = max(self.last_ran[key], r - 1)
            elif self.last_ran[key] == r - 1:  # decided in the round before, and not run
                self.kept_out[key] = self.kept_out.get(key, 0) + 1
        for key in [k for k in self.last_ran if k not in keys]:
            del self.last_ran[key]
        self.kept_out = {k: n for k, n in self.kept_out.items() if k in keys}
        for key in [k for k in self.summaries if k not in keys]:
            del self.summaries[key]

    def _targets(self, view: ClusterView, est: dict[Any, Any], share: dict[Any, float], r: int) -> bool:
        """Re-estimate the fair-finish targets when the active set changed (True) or a job has none yet."""
        active = {j.job_id for j in view.jobs}
        changed = active != self.known_jobs
        missing = [j for j in view.jobs if not self.fairshare.has(j.job_id)]
        if changed or missing:
            targets = view.jobs if changed else missing
            self.fairshare.reestimate(
                r, {j.job_id: (est[j.job_id]["done"] + est[j.job_id]["raw"]) / share[j.job_id] for j in targets}
            )
            self.fairshare.forget(active)
            self.known_jobs = active
        return changed

    def _estimates(self, view: ClusterView) -> dict[Any, Any]:
        est = {}
        D = float(view.round_length)
        for j in view.jobs:
            key = str(j.job_id)
            summ = self.summaries.get(key)
            if summ is None:
                summ = self.summaries[key] = RegimeSummary()
            pred = predict_remaining(j, summary=summ, restate=self.restate)
            E = float(max(j.total_epochs, 1))
            frac = 0.0
            if j.total_steps > 0 and j.total_epochs > 0:
                frac = min(max(j.total_epochs * j.steps_done / j.total_steps - j.epochs_done, 0.0), 1.0)
            if j.epochs_done >= j.total_epochs and j.total_epochs > 0:
                left = j.steps_remaining / j.throughput if j.throughput > 0 and j.total_steps > 0 else 0.0
                raw = rem = left if left > 0 else D / 2
                progress = E - 0.5
            else:
                raw = max(pred.remaining_s, 0.0)
                cur_d = pred.durations.get(int(j.batch_size))
                if cur_d is None:
                    cur_d = raw / max(E - j.epochs_done, 1.0)
                rem = max(raw - frac * cur_d, 1e-3)
                progress = min(j.epochs_done + frac, E - 0.5)
            est[j.job_id] = {
                "raw": raw,
                "remaining": rem,
                "progress": progress,
                "epochs": E,
                "finishing": j.epochs_done >= j.total_epochs > 0,
                "done": done_duration_from_summary(summ, pred.durations),
            }
        return est

    def _due(self, view: ClusterView, r: int) -> dict[Any, Any]:
        """Seconds from now to each job's fair-finish deadline (arrival + F-bar); inf without a target."""
        out = {}
        for j in view.jobs:
            fb = self.fairshare.fbar(j.job_id, r)
            out[j.job_id] = fb - (view.now - j.arrival_time) if fb is not None else math.inf
        return out

    def _rho_hat(self, view: ClusterView, est: dict[Any, Any], share: dict[Any, float], r: int) -> dict[Any, float]:
        return {
            j.job_id: rho_hat(
                view.now - j.arrival_time, est[j.job_id]["remaining"], share[j.job_id], self.fairshare.fbar(j.job_id, r)
            )
            for j in view.jobs
        }

    def _waited(self, jid: Any, r: int) -> int:
        return max(r - self.last_ran.get(str(jid), r - 1) - 1, self.kept_out.get(str(jid), 0))

    def user_caps(self, view: ClusterView) -> dict[Any, Any]:
        """Each user's share of the GPUs: G times its part of the budgets (fairshare.user_shares)."""
        cap: dict[Any, Any] = {}
        for j in view.jobs:
            cap[j.user] = cap.get(j.user, 0.0) + view.num_gpus * self.budgets.get(j.job_id, 1.0) / len(view.jobs)
        return cap

    def _guard(
        self, view: ClusterView, run: list[Any], extra: list[Any], packer: Packer
    ) -> tuple[list[Any], list[Any], Packer]:
        """No-starvation guard: jobs that waited >= B rounds first (longest wait, then oldest), each user up to
        its share of the GPUs (a user's first overdue job always counts: more jobs buy no more guard rounds),
        head of line never skipped; then the planned jobs (``run``), then ``extra``, while they fit.  Returns
        (run, overdue, the Packer that placed run: ``packer`` itself when none is overdue)."""
        r, G, B = int(view.round_index), int(view.num_gpus), self.config.starvation_bound_rounds
        jobs = {j.job_id: j for j in view.jobs}
        overdue = [jid for jid in jobs if 0 < jobs[jid].num_gpus <= G and self._waited(jid, r) >= B]
        if not overdue:
            return run, [], packer
        overdue.sort(key=lambda i: (-self._waited(i, r), -(view.now - jobs[i].arrival_time), str(i)))
        out: list[Any] = []
        taken: dict[str, int] = {}
        packer, cap = Packer(view.capacity, [jobs[i] for i in run]), self.user_caps(view)
        for jid in overdue:
            u, g = jobs[jid].user, jobs[jid].num_gpus
            if taken.get(u, 0) and taken[u] + g > cap[u] + 1e-9:
                continue
            if packer.take_job(jobs[jid]) is None:
                break
            out.append(jid)
            taken[u] = taken.get(u, 0) + g
        chosen = set(out)
        for capped in (True, False):  # then the plan: each user up to its share first, then what fits
            for jid in list(run) + list(extra):
                u, g = jobs[jid].user, jobs[jid].num_gpus
                if jid in chosen or (capped and taken.get(u, 0) + g > cap[u] + 1e-9):
                    continue
                if packer.take_job(jobs[jid]):
                    out.append(jid)
                    chosen.add(jid)
                    taken[u] = taken.get(u, 0) + g
        return out, overdue, packer

    def _from_plan(
        self,
        view: ClusterView,
        est: dict[Any, Any],
        path: str,
        solve_time: float,
        fill: list[Any],
        fresh: dict[Any, Any],
    ) -> RoundDecision:
        """This round of the plan; GPUs freed since it was made go to `fill` (rule "backfill"); then the guard."""
        r = int(view.round_index)
        jobs = {j.job_id: j for j in view.jobs}
        planned_rules = self.plan_rules.get(r, {})
        run, packer, rule = [], Packer(view.capacity, [jobs[i] for i in self.plan.get(r, []) if i in jobs]), {}
        for jid in self.plan.get(r, []):
            j = jobs.get(jid)
            if j is not None and packer.take_job(j):
                run.append(jid)
                rule[jid] = planned_rules.get(jid, "market")
        rest = [jid for jid in fill if jid not in set(run)]
        taken: dict[str, int] = {}
        cap = self.user_caps(view)
        for jid in run:
            taken[jobs[jid].user] = taken.get(jobs[jid].user, 0) + jobs[jid].num_gpus
        for capped in (True, False):  # each user up to its share first, then whatever fits
            for jid in rest:
                u, g = jobs[jid].user, jobs[jid].num_gpus
                if jid in rule or (capped and taken.get(u, 0) + g > cap[u] + 1e-9):
                    continue
                if packer.take_job(jobs[jid]):
                    run.append(jid)
                    rule[jid] = "backfill"
                    taken[u] = taken.get(u, 0) + g
        run, overdue, packer = self._guard(view, run, rest, packer)
        for jid in run:
            self.last_ran[str(jid)] = r
        # a job's next planned round after this one: one the plan lists now but the round does not run (the guard's
        # jobs or its type's GPUs left it no room) is off until then, not "planned this round" (the gate's off time;
        # the replay of 2026-12-07 11:37 read three such jobs as "not planned in the window")
        first: dict[Any, int] = {}
        for t in sorted(self.plan):
            if t > r:
                for jid in self.plan[t]:
                    first.setdefault(jid, t - r)
        chosen, overdue_set = set(run), set(overdue)
        plans = {}
        for jid in jobs:
            m = {**self.plan_meta.get(jid, {}), **fresh.get(jid, {})}
            running = jid in chosen
            plans[jid] = JobPlan(
                jid,
                rule=("guard" if jid in overdue_set else rule.get(jid, "backfill")) if running else "",
                predicted_remaining_s=est[jid]["remaining"],
                rho_hat=m.get("rho_hat"),
                weight=m.get("weight"),
                rounds_planned=int(m.get("rounds_planned") or 0),
                next_offset=0 if running else first.get(jid),
                fair_finish_in_s=m.get("fair_finish_in_s"),
                critical_path=bool(m.get("critical_path")),
                waited_rounds=0 if running else self._waited(jid, r),
                overdue=jid in overdue_set,
            )
        return RoundDecision(
            tuple(run),
            plans,
            placement={jid: {packer.placed[jid]: jobs[jid].num_gpus} for jid in run},
            path=path,
            solve_time_s=solve_time,
            solver_status=self.last_status,
            window_rounds=self.config.future_rounds,
        )
