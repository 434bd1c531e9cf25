"""Each round's market budgets on Slurm, and what status shows of them (per user and per account: shares, decayed
usage, budget, GPU-time in the window).

Once per round (observe): one sshare call (shares.py), the budgets of the associations with managed jobs
(budgets.py), times the config's [weights]; a job's JobView.weight is its association's budget, so a user's jobs
share the user's budget.  Reading shares never stops a round: when sshare fails, answers nothing (no accounting)
or ``[weights] from_slurm = false``, the weights alone are the budgets and the context says why.  GPU-time: the
GPU-seconds each user's and account's managed jobs held, measured from squeue's start/end times at each round
over the last ``[weights] window_seconds`` (time a preempted job ran after the round's look is not seen).
"""

from __future__ import annotations

import logging
from collections import deque

from slurm_shockwave.journal.context import FairShare, Share
from slurm_shockwave.slurm.budgets import Budgets, compute
from slurm_shockwave.slurm.shares import read_shares

log = logging.getLogger("slurm_shockwave.slurm")


class FairShareRound:
    def __init__(self, cli):
        self.cli = cli
        self.budgets = Budgets()
        self.source, self.note = "config", "not read yet"
        self._weights = None
        self._counted: dict = {}  # (job, restart count) -> time its GPU-time is counted to
        self._buckets: deque = deque()  # (time, {(account, user): GPU-seconds})
        self._last_error = ""
        self._jobs: dict = {}  # (account, user) -> its managed jobs this round

    # ------------------------------------------------------------------ per round
    def refresh(self, weights, jobs, now: float) -> None:
        """Read the shares and compute this round's budgets for the managed ``jobs`` (SlurmJobs; the active ones
        are those not finished), then add their GPU-time since the last round.  ``weights``: the config's
        WeightsSection."""
        self._weights = weights
        self._jobs = {}
        for j in jobs:
            if not j.finished:
                key = (j.account or "", j.user)
                self._jobs[key] = self._jobs.get(key, 0) + 1
        active = set(self._jobs)
        self.budgets, self.source, self.note = Budgets(), "config", ""
        if not weights.from_slurm:
            self.note = "[weights] from_slurm = false"
        elif active:
            try:
                rows = read_shares(self.cli)
                if not rows:
                    self.note = "Slurm lists no associations (accounting is off)"
                else:
                    self.budgets, self.source = compute(rows, active), "slurm"
                    if self.budgets.missing:
                        self.note = "not in sshare (budget 1): " + ", ".join(
                            f"{u}/{a or '-'}" for a, u in self.budgets.missing[:5]
                        )
                self._last_error = ""
            except Exception as e:  # noqa: BLE001 - reading shares never stops a round (SharesError, SlurmError, ...)
                self.note = f"cannot read shares: {str(e).splitlines()[0][:300] if str(e) else type(e).__name__}"
                if self.note != self._last_error:
                    log.warning("market budgets from the config's weights: %s", self.note)
                self._last_error = self.note
        self._count(jobs, now, float(weights.window_seconds))

    def weight(self, user: str, account: str) -> float:
        """A job's market budget: its association's (1 when unknown) times the config's weights."""
        w = self._weights
        base = float(w.users.get(user, 1.0)) * float(w.accounts.get(account, 1.0)) if w is not None else 1.0
        return base * (self.budgets.of(account or "", user) or 1.0)

    # ------------------------------------------------------------------ GPU-time
    def _count(self, jobs, now: float, window: float) -> None:
        added: dict = {}
        seen = set()
        for j in jobs:
            if not j.start_time or j.gpus <= 0 or (j.state != "RUNNING" and not j.finished):
                continue
            run = (j.job_id, j.restart_count)
            seen.add(run)
            end = min(float(j.end_time), now) if j.finished and j.end_time else now
            start = max(float(j.start_time), self._counted.get(run, float(j.start_time)))
            if end > start:
                key = (j.account or "", j.user)
                added[key] = added.get(key, 0.0) + (end - start) * j.gpus
                self._counted[run] = end
        self._counted = {k: v for k, v in self._counted.items() if k in seen}
        if added:
            self._buckets.append((now, added))
        while self._buckets and self._buckets[0][0] <= now - window:
            self._buckets.popleft()

    def gpu_seconds(self) -> dict:
        """{(account, user): GPU-seconds held in the window}."""
        out: dict = {}
        for _t, added in self._buckets:
            for key, v in added.items():
                out[key] = out.get(key, 0.0) + v
        return out

    # ------------------------------------------------------------------ status
    def context(self) -> FairShare:
        """What the round record keeps for status (the round context's ``fairshare``)."""
        jobs_by_association = self._jobs
        gpu = self.gpu_seconds()
        weights = {k: self.weight(k[1], k[0]) for k in jobs_by_association}
        total = sum(weights.values()) or 1.0
        slurm = {(ln.account, ln.user): ln for ln in self.budgets.users}
        users = []
        for (account, user), n in sorted(jobs_by_association.items()):
            ln = slurm.get((account, user))
            users.append(
                Share(
                    user=user,
                    account=account,
                    jobs=n,
                    raw_shares=ln.raw_shares if ln else None,
                    share=ln.share if ln else None,
                    usage=ln.usage if ln else None,
                    raw_usage=ln.raw_usage if ln else None,
                    budget=weights[(account, user)] / total,
                    weight=weights[(account, user)],
                    gpu_s=gpu.get((account, user), 0.0),
                )
            )
        budget = {(u.account, u.user): u.budget for u in users}
        accounts = [
            Share(
                account=ln.account,
                raw_shares=ln.raw_shares,
                share=ln.share,
                usage=ln.usage,
                raw_usage=ln.raw_usage,
                budget=sum(budget.get(k, 0.0) for k in ln.members),
                gpu_s=sum(gpu.get(k, 0.0) for k in ln.members),
            )
            for ln in self.budgets.accounts
        ]
        if self.source != "slurm":
            for a in sorted({u.account for u in users}):
                mine = [k for k in budget if k[0] == a]
                accounts.append(
                    Share(account=a, budget=sum(budget[k] for k in mine), gpu_s=sum(gpu.get(k, 0.0) for k in mine))
                )
        window = float(self._weights.window_seconds) if self._weights is not None else 0.0
        return FairShare(
            source=self.source, note=self.note, window_s=window, users=tuple(users), accounts=tuple(accounts)
        )
