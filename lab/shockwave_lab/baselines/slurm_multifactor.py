"""A well-configured Slurm site: priority/multifactor, sched/backfill, no preemption (a running job keeps its
GPUs until it ends).  slurm_preempt.py is the same site with PreemptMode=REQUEUE.

Sources: Slurm's priority_multifactor and classic_fair_share pages, its sched_config page (backfill), and
src/plugins/priority/multifactor/priority_multifactor.c (read, not copied), checked against sprio and sshare on the
replay's 22.05 cluster (docs/replay.md).  Decided once per round, as every policy here (the replay's rounds are the
cluster's scheduler passes).

Priority (PriorityType=priority/multifactor; weights of the docs' "Configuration Example": PriorityWeightAge=1000,
PriorityWeightFairshare=10000, PriorityWeightJobSize=1000, PriorityMaxAge=14-0, PriorityDecayHalfLife=14-0,
PriorityFavorSmall=NO; one partition and no QOS, so those factors are equal for every job and left out):

    priority = int(1000 * age + 10000 * fairshare + 1000 * size)      (at least 1, as Slurm's)
    age       = min(1, (now - eligible) / PriorityMaxAge); eligible = arrival, reset when requeued
    size      = (nodes / cluster nodes + GPUs / cluster GPUs) / 2: Slurm averages the job's node and CPU shares,
                and a job's CPUs follow its GPUs; nodes = the fewest whole nodes its gang needs (--nodes=1 for a
                gang that fits one), so a 1-GPU job on 4-GPU nodes counts as 1/8 + 1/32.  A view without nodes (one
                pool) counts GPUs alone.  1 - that with PriorityFavorSmall=YES
    fairshare = 2^(-U / S)   (the classic factor, PriorityFlags=NO_FAIR_TREE; every user an association under
                root with one share, where effective usage = usage: S = 1 / (users seen + `idle_shares`), U = the
                user's decayed GPU-seconds / everyone's; `idle_shares` are those of associations that run nothing,
                e.g. the 1 share sacctmgr gives root's own user association beside the accounts under root)
    usage     = usage * 2^(-dt / PriorityDecayHalfLife) + GPU-seconds run (GPUs billed: the TRESBillingWeights a
                GPU site sets), counted as Slurm's RawUsage is: a job that ended adds its run at its end, a running
                job's run is added at each PriorityCalcPeriod tick (`calc_period_s`; 0, the default here, = every
                round; the replay sets its cluster's 1 minute).  The factor is computed at a tick from the usage
                just before that tick adds the running jobs' run since the last one (what sshare shows on 22.05:
                EffectvUsage at a tick = the RawUsage shares of the moment before it)
Jobs are taken by priority, then submission, then id; a running job keeps the priority it started with (Slurm
recalculates pending jobs only, without PriorityFlags=CALCULATE_RUNNING).  A trace with one user (or none)
gives every job the same fair-share factor, which then plays no role (issue 24 adds users to traces).

Backfill (sched/backfill, conservative): every running job is expected to end at its start + its time limit;
pending jobs in priority order each start now when their gang fits on one GPU type for their whole time limit
without touching a reservation, else reserve the earliest such slot (within bf_window, 1440 min); only the first
bf_max_job_test (100) are planned, a later one starts only in strict priority order.  The time limit is the
user's estimate; we assume users ask for `time_limit_factor` (1.5) x the job's run time alone on its gang at its
first batch size (its steps / throughput when first seen), in whole minutes rounded up (`time_limit_unit_s`: sbatch
--time; the replay's is a wall minute in trace seconds): the deadline guard of the simulator ends every job by
1.5 x its exclusive run time, as Slurm ends a job at its limit.  A job past its limit is expected to end within
the round.  On a view with nodes backfill plans on them (a gang on one node), else on GPUs.

Several GPU types: a job starts on the type it asked for (`--gres=gpu:<type>:<n>`), else on any type it can run on
whose GPUs are free earliest (ties: the most free GPUs, then by name), as Slurm places an untyped gres request
without knowing speeds.  Its time limit is its run time on its reference type (JobView.throughput), so a job on a
slower type runs past the end backfill expected (Slurm would cancel it at its limit; the simulator does not).
"""
from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from solver.types import ClusterView, JobPlan, RoundDecision
from solver.policies.base import Policy
from shockwave_lab.baselines.slurm_backfill import Profile

DAY = 86400.0


class SlurmConfig(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid", frozen=True)

    weight_age: int = Field(1000, ge=0, le=2**32 - 1, description="PriorityWeightAge")
    weight_fairshare: int = Field(10000, ge=0, le=2**32 - 1, description="PriorityWeightFairshare")
    weight_job_size: int = Field(1000, ge=0, le=2**32 - 1, description="PriorityWeightJobSize")
    max_age_s: float = Field(14 * DAY, gt=0.0, description="PriorityMaxAge, seconds (the age factor's full value)")
    decay_half_life_s: float = Field(14 * DAY, gt=0.0, description="PriorityDecayHalfLife, seconds (usage decay)")
    calc_period_s: float = Field(0.0, ge=0.0, le=DAY, description="PriorityCalcPeriod, seconds: the fair-share "
                                 "factor sees usage as of its last recalculation (0: every round)")
    idle_shares: int = Field(0, ge=0, le=2**31, description="RawShares of associations under root that run no "
                             "job (sacctmgr gives root's own user association 1): they dilute every user's share")
    favor_small: bool = Field(False, description="PriorityFavorSmall: the smaller job the larger size factor")
    time_limit_factor: float = Field(1.5, ge=1.0, le=1000.0, description="the users' time limits: this x the "
                                     "job's run time alone on its gang when first seen (backfill's estimate)")
    time_limit_unit_s: float = Field(60.0, gt=0.0, le=DAY, description="a time limit is whole units of this "
                                     "(sbatch --time: minutes), rounded up")
    bf_window_s: float = Field(DAY, gt=0.0, description="bf_window, seconds: how far ahead backfill reserves")
    bf_max_job_test: int = Field(100, ge=1, description="bf_max_job_test: pending jobs backfill plans per round")


class SlurmMultifactor(Policy):
    name = "slurm-multifactor"
    label = "Slurm"
    description = "a Slurm site: multifactor priority (age, fair-share, size), backfill, no preemption."
    config_model = SlurmConfig
    baseline = True
    order = 64
    preempt = False               # PreemptMode=REQUEUE (slurm_preempt.py)
    moves_running_jobs = False    # Slurm never moves a running job to other nodes
    runs_under_controller = False  # Slurm's own scheduler: its preemptions pass no controller gate

    def __init__(self, config: SlurmConfig | None = None, limits: dict | None = None):
        """`limits`: {job: seconds} the jobs' own time limits where known (a site's recorded ones, sacct); any
        other job's is the config's assumption (time_limit_factor x its run time)."""
        super().__init__(config)
        self.recorded = {k: float(v) for k, v in (limits or {}).items() if v is not None and v > 0}
        self.usage: dict = {}          # user -> decayed GPU-seconds Slurm has counted (its RawUsage)
        self.uncounted: dict = {}      # running job -> decayed GPU-seconds since the last tick (counted at the next)
        self.users: dict = {}          # job -> [user, GPUs], kept a round after it ends: its last round is charged
        self.limit: dict = {}          # job -> its time limit, s (None: no throughput known, no limit)
        self.eligible: dict = {}       # job -> when it became eligible (arrival, or its last requeue)
        self.started: dict = {}        # running job -> [start of its current run, priority it started with]
        self.last_now: float | None = None
        self.seen: dict = {}           # user -> usage as of the last PriorityCalcPeriod tick (what the factor sees)
        self.last_calc: float | None = None
        self._on_nodes = False         # this round's backfill plans on nodes (_columns)

    # ------------------------------------------------------------------ priority
    @staticmethod
    def key(job):
        """Whose usage a job's run is counted to and whose fair-share factor it gets: its user (a site's model
        keys it by association, whatif/site_model.py)."""
        return job.user

    def _tick(self) -> None:
        """At a PriorityCalcPeriod tick, after the usage the factor sees is taken (a site's model computes its
        factors here)."""

    def _charge(self, view: ClusterView) -> None:
        """Decay the usage to now, count the round that ended, and at a PriorityCalcPeriod tick take the usage the
        factor sees, then count the running jobs' run since the last tick."""
        if self.last_now is not None:
            decay = 2.0 ** (-max(0.0, view.now - self.last_now) / self.config.decay_half_life_s)
            self.usage = {u: x * decay for u, x in self.usage.items()}
            self.uncounted = {k: x * decay for k, x in self.uncounted.items()}
        self.last_now = float(view.now)
        live = set()
        for j in view.jobs:
            live.add(j.job_id)
            key = self.key(j)
            self.users[j.job_id] = [key, j.num_gpus]
            self.usage.setdefault(key, 0.0)
        for jid, seconds in view.last_round_run_time.items():
            if jid in self.users:
                self.uncounted[jid] = self.uncounted.get(jid, 0.0) + seconds * self.users[jid][1]
        for jid in [k for k in self.uncounted if k not in live]:           # ended: counted at its end
            self._count(jid)
        if self.last_calc is None or view.now - self.last_calc >= self.config.calc_period_s:
            self.seen, self.last_calc = dict(self.usage), float(view.now)
            for jid in list(self.uncounted):                # still running: counted at the tick, after the factor
                self._count(jid)
            self._tick()
        else:                                          # a user first seen between two ticks starts at 0
            self.seen = {u: self.seen.get(u, 0.0) for u in self.usage}

    def _count(self, job_id) -> None:
        """Slurm's RawUsage takes a job's run not yet counted (at the job's end or requeue, or at a tick)."""
        user = self.users.get(job_id, [None])[0]
        run = self.uncounted.pop(job_id)
        if user is not None:
            self.usage[user] = self.usage.get(user, 0.0) + run

    def fairshare(self, user: str) -> float:
        total = sum(self.seen.values())
        shares = 1.0 / max(1, len(self.seen) + self.config.idle_shares)
        return 2.0 ** (-(self.seen.get(user, 0.0) / total) / shares) if total > 0 else 1.0

    def priority(self, view: ClusterView, job) -> int:
        cfg = self.config
        age = min(1.0, max(0.0, view.now - self.eligible.get(job.job_id, job.arrival_time)) / cfg.max_age_s)
        size = min(1.0, job.num_gpus / view.num_gpus) if view.num_gpus else 0.0
        if view.nodes:
            per_node = max(g for _t, g in view.nodes.values()) or 1
            size = (min(1.0, math.ceil(job.num_gpus / per_node) / len(view.nodes)) + size) / 2
        if cfg.favor_small:
            size = 1.0 - size
        fs = self.fairshare(self.key(job)) if cfg.weight_fairshare else 0.0
        value = cfg.weight_age * age + cfg.weight_fairshare * fs + cfg.weight_job_size * size
        return max(1, int(value))

    # ------------------------------------------------------------------ one round
    def decide(self, view: ClusterView) -> RoundDecision:
        self._charge(view)
        cfg, now = self.config, float(view.now)
        jobs = {j.job_id: j for j in view.jobs}
        for j in view.jobs:
            self.eligible.setdefault(j.job_id, j.arrival_time)
            if j.job_id not in self.limit:
                assumed = cfg.time_limit_unit_s * math.ceil(
                    cfg.time_limit_factor * j.steps_remaining / j.throughput / cfg.time_limit_unit_s) \
                    if j.throughput > 0 else None
                self.limit[j.job_id] = self.recorded.get(j.job_id, assumed)
        running = [j for j in view.jobs if j.ran_last_round]
        for j in running:
            self.started.setdefault(j.job_id, [now, self.priority(view, j)])
        prio = {j.job_id: self.priority(view, j) for j in view.jobs if not j.ran_last_round}
        pending = sorted(prio, key=lambda i: (-prio[i], jobs[i].arrival_time, str(i)))

        columns, self._on_nodes = self._columns(view)
        profile, placement, ends = Profile(now, columns), {}, {}
        for j in sorted(running, key=lambda j: (self.started[j.job_id][0], str(j.job_id))):
            start = self.started[j.job_id][0]
            ends[j.job_id] = max(start + self._limit(j.job_id), now + view.round_length)
            where = self._types(view, j)
            if self._on_nodes and len(j.nodes) == 1 and j.nodes[0] in where:
                where = [j.nodes[0]]              # a running job stays on its node
            got = profile.earliest(j.num_gpus, where, view.round_length, self._on_nodes)
            if got is None or got[0] > now:       # the cluster shrank under it: it cannot keep its GPUs
                continue
            placement[j.job_id] = {got[1]: j.num_gpus}
            profile.add(got[1], -j.num_gpus, now, ends[j.job_id])

        requeued, blocked = [], False
        for rank, jid in enumerate(pending):
            j = jobs[jid]
            if rank >= cfg.bf_max_job_test and blocked:
                break
            duration = self._limit(jid)
            got = profile.earliest(j.num_gpus, self._types(view, j), duration, self._on_nodes)
            if (got is None or got[0] > now) and self.preempt:
                got = self._preempt(view, profile, placement, ends, j, prio[jid], duration, requeued) or got
            if got is not None and got[0] <= now:
                placement[jid] = {got[1]: j.num_gpus}
                profile.add(got[1], -j.num_gpus, now, now + duration)
                self.started[jid] = [now, prio[jid]]
                continue
            blocked = True
            if rank < cfg.bf_max_job_test and got is not None and got[0] - now < cfg.bf_window_s:
                profile.add(got[1], -j.num_gpus, got[0], got[0] + duration)     # its reservation

        for jid in requeued:                      # Slurm resets a requeued job's eligible (accrue) time
            self.eligible[jid] = now
            if jid in self.uncounted:             # and counts its run as of a job's end
                self._count(jid)
        self.started = {k: v for k, v in self.started.items() if k in placement}
        active = set(jobs)
        for table in (self.limit, self.eligible):
            for k in [k for k in table if k not in active]:
                del table[k]
        self.users = {k: v for k, v in self.users.items() if k in active}
        run = tuple(sorted(placement, key=lambda k: (self.started[k][0], -self.started[k][1], str(k))))
        nodes = {}
        if self._on_nodes:                        # the profile's columns were nodes: placement by their types
            nodes = {k: tuple(p) for k, p in placement.items()}
            placement = {k: {view.nodes[n][0]: g for n, g in p.items()} for k, p in placement.items()}
        return RoundDecision(run=run, placement=placement, plans={k: JobPlan(k, rule="policy") for k in run},
                             nodes=nodes)

    @staticmethod
    def _columns(view: ClusterView) -> tuple[dict, bool]:
        """What backfill plans on: the nodes when the view lists them and every gang fits on one (a gang on one
        node, best fit), else the GPUs per type."""
        if view.nodes and max((j.num_gpus for j in view.jobs), default=0) <= max(g for _t, g in view.nodes.values()):
            return {n: g for n, (_t, g) in view.nodes.items()}, True
        return dict(view.capacity), False

    def _limit(self, job_id) -> float:
        limit = self.limit.get(job_id)
        return math.inf if limit is None else limit

    def _types(self, view: ClusterView, job) -> list:
        """The types a job may start on: the one it asked for (a typed gres), else any type it can run on (their nodes,
        when backfill plans on nodes).  Slurm knows no speeds: the earliest fit wins, not the fastest type
        (Profile.earliest)."""
        if job.gpu_type is not None:
            types = [job.gpu_type]
        else:
            types = sorted(t for t in view.capacity if not job.throughput_by_type or t in job.throughput_by_type)
        if self._on_nodes:                        # the columns are nodes
            return sorted(n for n, (t, _g) in view.nodes.items() if t in types)
        return types

    def _preempt(self, view, profile, placement, ends, job, prio, duration, requeued):
        """PreemptMode=REQUEUE (slurm_preempt.py): requeue running jobs of lower priority, lowest first (the
        youngest first among equals), until `job` fits now; nothing is requeued unless it then fits."""
        now = float(view.now)
        victims = sorted((k for k in placement if k not in requeued and self.started[k][1] < prio
                          and k in ends), key=lambda k: (self.started[k][1], -self.started[k][0], str(k)))
        freed = []
        for k in victims:
            (t, n), = placement[k].items()
            profile.add(t, n, now, ends[k])
            freed.append(k)
            got = profile.earliest(job.num_gpus, self._types(view, job), duration, self._on_nodes)
            if got is not None and got[0] <= now:
                for v in freed:
                    del placement[v]
                    requeued.append(v)
                return got
        for k in freed:                            # it does not fit even so: requeue nobody
            (t, n), = placement[k].items()
            profile.add(t, -n, now, ends[k])
        return None

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {"usage": [[k, v] for k, v in self.usage.items()], "users": [[k, v] for k, v in self.users.items()],
                "uncounted": [[k, v] for k, v in self.uncounted.items()],
                "limit": [[k, v] for k, v in self.limit.items()],
                "eligible": [[k, v] for k, v in self.eligible.items()],
                "started": [[k, v] for k, v in self.started.items()], "last_now": self.last_now,
                "seen": [[k, v] for k, v in self.seen.items()], "last_calc": self.last_calc}

    def load_state_dict(self, state: dict) -> None:
        self.usage = {k: float(v) for k, v in state["usage"]}
        self.users = {k: list(v) for k, v in state["users"]}
        self.uncounted = {k: float(v) for k, v in state.get("uncounted", [])}
        self.limit = {k: None if v is None else float(v) for k, v in state["limit"]}
        self.eligible = {k: float(v) for k, v in state["eligible"]}
        self.started = {k: list(v) for k, v in state["started"]}
        self.last_now = state["last_now"]
        self.seen = {k: float(v) for k, v in state.get("seen", [])}
        self.last_calc = state.get("last_calc")
