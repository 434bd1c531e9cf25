"""SimulatedCluster: a GPU cluster in virtual time with the reference simulator's semantics.

Per round (docs/reference.md §4.1, §4.4): the round loop observes the active jobs, the policy decides, the
backend dispatches each chosen job for `steps = min(int(throughput x round), remaining)` iterations ending
at `now + steps / throughput`; `advance()` moves time to the latest finish of the round (a round is
shorter than 120 s when every running job finishes early; with nothing running, time jumps to the next
arrival), records progress, charges the 20 s restart penalty to a job that did not run in the previous
round (when it ran a full round), applies pending batch-size changes, then completes jobs (no steps left or
every epoch done, checked after the batch-size change; or run time over 1.5 x exclusive run time, as the
reference's deadline guard), sets the adaptation flags for
the next round and admits the jobs that arrived by then.  A job whose spec says `preemptible: false` keeps its GPUs once
it runs (the round loop pins it: solver/pinned.py).

Elastic GPU counts: a job that declares a range (`JobSpec.gpus_range`, `shockwave simulate --elastic N`) lists its
throughput at each profiled GPU count within it at its current batch size (`JobView.throughput_by_gpus`, from the
throughput table, counts up to the cluster's size), and its view carries the range (`JobView.gpus_range`, which the
default resizes) and the count it ran on (`running_gpus`); in a workload where no job declares one, every job lists
every profiled count (Pollux's premise) without a range, and in one where some do, the others list none.  A job
placed on another count than it asked for runs at that count's throughput; a change of count is a restart (the
restart penalty, as a job that did not run the round before); the deadline guard counts its run time at its
requested gang's pace; the metrics keep its requested GPUs (JobRecord.num_gpus).  A job placed on its gang runs
exactly as before.

Several GPU types (`num_gpus` = {type: count}, `throughputs` = {type: table}; workload/gpu_types.py says which
column each type runs at and which type is a job's reference type): a job runs at the throughput of the type it
is placed on; a job whose type (or count) changes restarts (the restart penalty); its deadline guard counts run
time at its reference type's pace.  Its view lists its throughput per type it can run on
(`JobView.throughput_by_type`: a type with room for its gang, a throughput at its batch size, its requested type
only when it asked for one); its elastic counts (`throughput_by_gpus`) are on its reference type, the counts
profiled on every type it can run on.  With early rounds (the controller) a running job's view asks for the type it
runs on (`JobView.gpu_type`), as the Slurm backend's does: the controller moves a job to another type only by not
running it (before 2026-12-07 the simulator let a policy move it each round, a restart each time).  A job changes its batch size only to one its reference type has a
throughput for.  With one untyped pool all of this is the one-type simulator above.

Nodes (`gpus_per_node`, as a real cluster's: each type's GPUs on nodes of that many): the view lists them
(`ClusterView.nodes`, `JobView.nodes` = where a job ran the round before), a decision must give each running job
nodes of its type with room (solver/nodes.py), and a job that runs on other nodes than the round before restarts
(the restart penalty).  Without it each type is one pool, as in the reference.

Early rounds (`early_rounds` = (poll, min gap) seconds, the controller's `early_round_timing`; None: the reference's
rounds): as the controller does (slurm/backend.py `advance`), a round ends early when a job it runs ends (its last
step) while a job it does not run waits: at the first poll after the later of that end and `min gap` after the
round started.  The jobs still running keep the steps done by then and go on, without a restart when the next
round keeps them where they are.  A partial round cannot take the reference's restart penalty off afterwards, so
the charge is explicit: a job (re)started in a round (not the first) runs its first step `restart_penalty`
seconds after the round starts, and what a cut round leaves of that wait is paid in the next one.  With
`slurm_starts` (the controller on Slurm) a round whose jobs all end early still lasts `round_length`, as the
controller's clock (slurm/timing.py), where the reference's round ends with its last job.
"""
from __future__ import annotations

import math
from typing import Mapping, NamedTuple

from solver.types import GPU, ClusterView, JobView, RoundDecision

from slurm_shockwave.backends.base import ClusterBackend, JobRecord, check_decision
from shockwave_lab.workload.gpu_types import allowed, capacity_of, cluster_gpus, reference_type
from shockwave_lab.workload.jobs import JobSpec
from shockwave_lab.sim.job import SimJob
from shockwave_lab.sim.slurm_starts import place


class Dispatch(NamedTuple):
    """One job's run in a round: `steps` at `thr` iterations/s after `wait` seconds of restart (early rounds)."""
    job: SimJob
    steps: int
    finish: float
    gpus: int
    gpu_type: str
    thr: float
    wait: float = 0.0
    start: float | None = None                      # between rounds (Slurm's own start); None: the round's start


class SimulatedCluster(ClusterBackend):
    def __init__(self, jobs: list[JobSpec], throughputs, num_gpus: int | Mapping[str, int], round_length: float = 120.0,
                 restart_penalty: float = 20.0, deadline_factor: float = 1.5, gpus_per_node: int | None = None,
                 early_rounds: tuple[float, float] | None = None, slurm_starts: bool = False):
        """`num_gpus`: a number (one untyped pool, `throughputs` its table) or {type: count} (`throughputs`:
        {type: table}); `gpus_per_node`: the GPUs of each node (None: no nodes); `early_rounds`: (poll, min gap)
        seconds of the event-driven round (None: the reference's rounds); `slurm_starts`: an arrival starts between
        rounds on its asked count when it fits, as Slurm starts it (sim/slurm_starts.py; early rounds only)."""
        if early_rounds is not None and not (early_rounds[0] > 0 and early_rounds[1] >= 0):
            raise ValueError(f"early_rounds (poll, min gap) must be positive, got {early_rounds}")
        if slurm_starts and early_rounds is None:
            raise ValueError("slurm_starts models the controller on Slurm: it needs early_rounds")
        self.early_rounds = early_rounds
        self.slurm_starts = slurm_starts
        self._owed: dict = {}                          # job -> restart seconds a cut round left unpaid
        self._waiting = False                          # a job the round does not run waits (early rounds)
        self.capacity = capacity_of(num_gpus)
        num_gpus = sum(self.capacity.values())
        if num_gpus <= 0 or min(self.capacity.values()) <= 0:
            raise ValueError(f"num_gpus must be positive, got {num_gpus}")
        self.tables = dict(throughputs) if isinstance(throughputs, Mapping) else {GPU: throughputs}
        self.reference_types = {j.job_id: reference_type(j, self.tables, self.capacity) for j in jobs}
        # a workload that declares elastic jobs is taken at its word: only they list other counts; one that declares
        # none lists every job's (Pollux's premise: every job is elastic; the default resizes only declared ones)
        self._declared = any(j.gpus_range is not None for j in jobs)
        too_big = [j.job_id for j in jobs if j.num_gpus > max(self.capacity.values())]
        if too_big:
            raise ValueError(f"jobs {too_big[:5]} ask for more GPUs than the cluster has ({num_gpus})"
                             if set(self.capacity) == {GPU} else
                             f"jobs {too_big[:5]} ask for more GPUs than one type has ({self.capacity})")
        homeless = [j.job_id for j in jobs if self.reference_types[j.job_id] is None]
        if homeless:
            raise ValueError(f"jobs {homeless[:5]} can run on no GPU type of {self.capacity} (their requested type, "
                             "a throughput at their batch size)")
        self.num_gpus = num_gpus
        self.nodes = _nodes(self.capacity, gpus_per_node)
        self._prev_nodes: dict = {}                  # job -> the nodes it ran on in the previous round
        self._round_nodes: dict = {}
        self.round_length = float(round_length)
        self.restart_penalty = restart_penalty
        self.deadline_factor = deadline_factor
        self.throughputs = throughputs
        self.usage_log: list[tuple] = []                # (job, start, end, GPUs) of every dispatch: per-user shares
        self._pending = sorted(jobs, key=lambda j: (j.arrival_time, str(j.job_id)))
        self._pending.reverse()                       # pop() from the end = earliest arrival
        self.n_jobs = len(jobs)
        self.active: dict[object, SimJob] = {}
        self.finished: list[JobRecord] = []
        # Slurm's starts: the controller's rounds keep their own clock from the trace's start, idle or not
        self.now = self._pending[-1].arrival_time if self._pending and not slurm_starts else 0.0
        self.round_index = 0
        self.busy_gpu_seconds = 0.0
        self.utilization_timeline: list[tuple[float, float, int]] = []   # (start, end, busy GPUs)
        self._dispatched: list[Dispatch] = []
        self._prev_gpus: dict = {}                    # job -> (type, GPUs, nodes) it ran on in the previous round
        self._dispatch_rounds = 0
        self._round_start = self.now
        self._last_round_run_time: dict = {}
        self._dur_cache: dict = {}
        self._counts_cache: dict = {}
        self._types_cache: dict = {}
        self._admit()

    # ------------------------------------------------------------------ contract
    def done(self) -> bool:
        return not self.active and not self._pending and not self._dispatched

    def observe(self) -> ClusterView:
        jobs = tuple(self._view(j) for j in self.active.values())
        return ClusterView(now=self.now, round_index=self.round_index, round_length=self.round_length,
                           num_gpus=self.num_gpus, jobs=jobs, last_round_run_time=dict(self._last_round_run_time),
                           total_jobs=self.n_jobs, capacity=dict(self.capacity), nodes=dict(self.nodes))

    def apply(self, decision: RoundDecision) -> None:
        view_jobs = ClusterView(self.now, self.round_index, self.round_length, self.num_gpus,
                                tuple(self._view(j, light=True) for j in self.active.values()),
                                capacity=dict(self.capacity))
        decision = check_decision(view_jobs, decision)
        if self.nodes:
            _check_nodes(self.nodes, decision)
        self._round_nodes = {j: tuple(n) for j, n in decision.nodes.items()} if self.nodes else {}
        self._round_start = self.now
        self._dispatched = []
        self._waiting = any(j not in decision.run for j in self.active)
        for job_id in decision.run:
            job = self.active[job_id]
            (gpu_type, gpus), = decision.placement[job_id].items()      # one type per gang (check_placement)
            thr = job.throughput_on(gpus, gpu_type)
            wait = self._restart_wait(job_id, (gpu_type, gpus, self._round_nodes.get(job_id, ())))
            steps = job.steps_for_round(max(0.0, self.round_length - wait), thr)
            self._dispatched.append(Dispatch(job, steps, self.now + wait + steps / thr, gpus, gpu_type, thr, wait))

    def advance(self) -> None:
        self._last_round_run_time = {}
        if self.slurm_starts:  # the controller's clock: the round lasts its length unless GPUs are freed while a
            # job waits; Slurm starts arrivals meanwhile; a round that runs nothing, even so, is idle
            end = self._early_end(self.now + self.round_length) if self._dispatched else self.now + self.round_length
            self._start_arrivals(end)
            end = end if self._dispatched else None
        else:
            end = self._early_end(max(d.finish for d in self._dispatched)) if self._dispatched else None
        ran = {d.job.spec.job_id: (d.gpu_type, d.gpus, self._round_nodes.get(d.job.spec.job_id, ()))
               for d in self._dispatched}
        if self._dispatched:
            busy = sum(d.gpus for d in self._dispatched if d.start is None)
            self.utilization_timeline.append((self._round_start, end, busy))
            self.utilization_timeline += [(d.start, d.finish, d.gpus) for d in self._dispatched if d.start is not None]
            for d in self._dispatched:
                start = self._round_start if d.start is None else d.start
                steps, finish, ran_for = d.steps, d.finish, d.finish - start
                if d.finish > end:                   # cut by an early round: the steps done by then
                    ran_for = end - start
                    steps, finish = min(d.steps, int(d.thr * max(0.0, ran_for - d.wait))), end
                if self.early_rounds is not None:
                    self._owed[d.job.spec.job_id] = max(0.0, d.wait - ran_for)
                self._complete_round(d.job, steps, finish, d.gpus, d.gpu_type,
                                     None if self.early_rounds is None else min(d.wait, ran_for), start)
            self._dispatch_rounds += 1
            self.now = end
        elif self.active:
            self.now += self.round_length                    # nothing fitted: an idle round
        elif self._pending:          # idle: to the next arrival (Slurm's starts: the last round before it, if any)
            gap = self._pending[-1].arrival_time - self.now
            rounds = math.floor(gap / self.round_length) if self.slurm_starts else 0
            self.now += rounds * self.round_length if rounds >= 1 else max(0.0, gap)
        self._prev_gpus = ran
        self._prev_nodes = {j: n for j, (_t, _g, n) in ran.items() if n}
        self._dispatched = []
        for job in self.active.values():
            job.set_adaptation_flags()
        self._admit()
        self.round_index += 1

    # ------------------------------------------------------------------ internals
    def _restart_wait(self, job_id, where: tuple) -> float:
        """Early rounds: the seconds before a job's first step this round (the restart penalty when it was not
        running there the round before, except in the first round, as the reference; else what it still owes)."""
        if self.early_rounds is None or self._dispatch_rounds == 0:
            return 0.0
        return self.restart_penalty if self._prev_gpus.get(job_id) != where else self._owed.get(job_id, 0.0)

    def _early_end(self, end: float) -> float:
        """When the round ends: `end` (its last finish), or earlier when a job ends (its last step) while another
        waits: the first poll after the later of that end and the min gap (early rounds only)."""
        if self.early_rounds is None or not self._waiting:
            return end
        ends = [d.finish for d in self._dispatched if d.steps >= d.job.remaining_steps]
        if not ends:
            return end
        poll, gap = self.early_rounds
        t = max(min(ends), self._round_start + gap) - self._round_start
        return min(end, self._round_start + math.ceil(t / poll - 1e-9) * poll)

    def _complete_round(self, job: SimJob, steps: int, finish: float, gpus: int, gpu_type: str,
                        paid: float | None = None, start: float | None = None) -> None:
        """`paid`: the restart seconds this round paid (early rounds); None: the reference's penalty rule; `start`:
        when the run started (None: the round's start)."""
        start = self._round_start if start is None else start
        execution = finish - start - (paid or 0.0)
        self.usage_log.append((job.spec.job_id, start, finish, gpus))
        home = gpus == job.spec.num_gpus and gpu_type == job.ref_type
        pace = 1.0 if home else job.throughput_on(gpus, gpu_type) / job.throughput
        where = (gpu_type, gpus, self._round_nodes.get(job.spec.job_id, ()))
        if self._prev_gpus.get(job.spec.job_id) != where:   # not run the round before, or elsewhere
            job.restarts += 1 if job.rounds_run else 0
            full = execution > max(self.round_length - 5, self.restart_penalty)
            if paid is None and self._dispatch_rounds > 0 and full:
                factor = (execution - self.restart_penalty) / execution
                steps = int(steps * factor)
                execution -= self.restart_penalty
        nominal = execution if pace == 1.0 else execution * pace
        over_deadline = job.nominal_run_time + nominal > int(job.spec.isolated_runtime * self.deadline_factor)
        job.run_time += execution
        job.nominal_run_time += nominal
        job.rounds_run += 1
        self.busy_gpu_seconds += execution * gpus
        self._last_round_run_time[job.spec.job_id] = execution
        job.add_steps(steps)
        job.finish_time = finish
        # the batch-size change first: it re-expresses the steps (a partial last epoch is rounded up), and a
        # job it completes must complete now, not linger with every epoch done and no work left
        job.apply_batch_size_change()
        finished = job.remaining_steps <= 0 or job.epochs_done >= job.spec.num_epochs or over_deadline
        if finished:
            del self.active[job.spec.job_id]
            self.finished.append(JobRecord(job.spec.job_id, job.spec.user, job.spec.num_gpus, job.spec.arrival_time,
                                           finish, job.spec.isolated_runtime, job.run_time, job.rounds_run,
                                           job.restarts, account=job.spec.account,
                                           cluster_gpus=self._cluster_gpus(job)))

    def _start_arrivals(self, end: float) -> None:
        """Slurm's own starts (sim/slurm_starts.py): each job arriving before `end`, in arrival order, starts on its
        asked count at the first moment its gang fits, paying the restart penalty before its first step, and runs
        to `end`; the others wait for the next round, as before."""
        busy = [(self._round_start, d.finish if d.steps >= d.job.remaining_steps else end, d.gpu_type, d.gpus,
                 self._round_nodes.get(d.job.spec.job_id, ())) for d in self._dispatched]
        waiting = []
        while self._pending and self._pending[-1].arrival_time < end:
            spec = self._pending.pop()
            ref = self.reference_types[spec.job_id]
            types = [ref] + [t for t in allowed(spec, self.tables, self.capacity) if t != ref]
            job = SimJob(spec, self.tables[ref], self.tables, ref)
            types = [t for t in types if job.throughput_on(spec.num_gpus, t)]
            at = place(spec.num_gpus, types, max(spec.arrival_time, self._round_start), end, busy, self.capacity,
                       self.nodes)
            if at is None:
                waiting.append(spec)
                continue
            t, gpu_type, on = at
            thr = job.throughput_on(spec.num_gpus, gpu_type)
            steps = job.steps_for_round(max(0.0, end - t - self.restart_penalty), thr)
            finish = t + self.restart_penalty + steps / thr
            busy.append((t, finish if steps >= job.remaining_steps else end, gpu_type, spec.num_gpus, on))
            self.active[spec.job_id] = job
            if on:
                self._round_nodes[spec.job_id] = on
            self._dispatched.append(Dispatch(job, steps, finish, spec.num_gpus, gpu_type, thr, self.restart_penalty,
                                             t))
        self._pending.extend(reversed(waiting))

    def _admit(self) -> None:
        while self._pending and self._pending[-1].arrival_time <= self.now:
            spec = self._pending.pop()
            ref = self.reference_types[spec.job_id]
            self.active[spec.job_id] = SimJob(spec, self.tables[ref], self.tables, ref)

    def _durations(self, job: SimJob) -> dict[int, float]:
        key = (job.spec.model, job.spec.num_gpus, job.spec.samples, job.ref_type)
        if key not in self._dur_cache:
            sizes = self.tables[job.ref_type].batch_sizes(job.spec.model, job.spec.num_gpus)
            self._dur_cache[key] = {bs: job.spec.samples / bs / thr for bs, thr in sizes.items()}
        return self._dur_cache[key]

    def _types(self, job: SimJob) -> list[str]:
        key = (job.spec.model, job.spec.initial_bs, job.spec.num_gpus, job.spec.gpu_type)
        if key not in self._types_cache:
            self._types_cache[key] = allowed(job.spec, self.tables, self.capacity)
        return self._types_cache[key]

    def _by_type(self, job: SimJob) -> dict[str, float]:
        out = {}
        for t in self._types(job):
            thr = job.throughput_on(job.spec.num_gpus, t)
            if thr:
                out[t] = thr
        return out

    def _cluster_gpus(self, job: SimJob) -> float:
        if set(self.capacity) == {GPU}:
            return 0.0                              # the GPU count itself (metrics.dynamic_ftf)
        return cluster_gpus(job.spec, self.tables, self.capacity, job.ref_type)

    def _gpu_counts(self, job: SimJob) -> dict[int, float]:
        rng = job.spec.gpus_range
        if rng is None and self._declared:
            return {}
        key = (job.spec.model, job.bs, job.ref_type, tuple(self._types(job)), rng)
        if key not in self._counts_cache:
            counts = self.tables[job.ref_type].gpu_counts(job.spec.model, job.bs)
            if rng is not None:
                counts = {n: thr for n, thr in counts.items() if rng[0] <= n <= rng[1]}
            room = max(self.capacity[t] for t in self._types(job))
            self._counts_cache[key] = {n: thr for n, thr in counts.items() if n <= room and all(
                self.tables[t].get(job.spec.model, job.bs, n) for t in self._types(job))}
        return self._counts_cache[key]

    def _view(self, job: SimJob, light: bool = False) -> JobView:
        s = job.spec
        if light:
            return JobView(job_id=s.job_id, arrival_time=s.arrival_time, num_gpus=s.num_gpus, batch_size=job.bs,
                           epochs_done=0, total_epochs=0, samples_per_epoch=s.samples, steps_done=0,
                           total_steps=0, throughput=job.throughput, throughput_by_gpus=self._gpu_counts(job),
                           throughput_by_type=self._by_type(job), gpu_type=s.gpu_type, gpus_range=s.gpus_range)
        return JobView(
            job_id=s.job_id, arrival_time=s.arrival_time, num_gpus=s.num_gpus, batch_size=job.bs,
            epochs_done=job.epochs_done, total_epochs=s.num_epochs, samples_per_epoch=s.samples,
            steps_done=job.steps_run, total_steps=job.total_steps, throughput=job.throughput,
            epoch_duration_by_bs=self._durations(job), bs_history=tuple(job.bs_history), user=s.user,
            account=s.account, weight=s.weight, mode=s.mode, job_type=job.job_type,
            min_batch_size=s.initial_bs, max_batch_size=job.max_bs,
            ran_last_round=s.job_id in self._prev_gpus, run_time=job.run_time, restarts=job.restarts,
            running_type=self._prev_gpus[s.job_id][0] if s.job_id in self._prev_gpus else None,
            running_gpus=self._prev_gpus[s.job_id][1] if s.job_id in self._prev_gpus else None,
            gpus_range=s.gpus_range, preemptible=s.preemptible is not False,
            nodes=self._prev_nodes.get(s.job_id, ()),
            throughput_by_gpus=self._gpu_counts(job), throughput_by_type=self._by_type(job), gpu_type=self._pin(job))

    def _pin(self, job: SimJob) -> str | None:
        """The type the job must run on: its user's; with early rounds (the controller) on a cluster of several types,
        a running job's own, as the Slurm backend's view says (slurm/gpu_types.py: it moves only through a
        checkpoint and requeue, when the round does not run it)."""
        ran = self._prev_gpus.get(job.spec.job_id)
        return ran[0] if ran and self.early_rounds is not None and len(self.capacity) > 1 else job.spec.gpu_type


def _nodes(capacity: Mapping[str, int], gpus_per_node: int | None) -> dict:
    """{node: (type, GPUs)}: each type's GPUs on nodes of `gpus_per_node` (named n00, n01, ... one type; else
    <type>-n00, ...); {} without nodes."""
    if not gpus_per_node:
        return {}
    if gpus_per_node < 0 or any(n % gpus_per_node for n in capacity.values()):
        raise ValueError(f"gpus_per_node {gpus_per_node} does not divide the GPUs of each type {dict(capacity)}")
    one = len(capacity) == 1
    return {(f"n{i:02d}" if one else f"{t}-n{i:02d}"): (t, gpus_per_node)
            for t, n in sorted(capacity.items()) for i in range(n // gpus_per_node)}


def _check_nodes(nodes: Mapping[str, tuple[str, int]], decision: RoundDecision) -> None:
    """Every running job on nodes of its type, each node within its GPUs (ValueError, one line)."""
    used: dict = {}
    for jid in decision.run:
        on = tuple(decision.nodes.get(jid) or ())
        (gpu_type, gpus), = decision.placement[jid].items()
        if not on or gpus % len(on) or any(nodes.get(n, (None, 0))[0] != gpu_type for n in on):
            raise ValueError(f"job {jid}: {gpus} {gpu_type} GPU(s) placed on nodes {on}")
        for n in on:
            used[n] = used.get(n, 0) + gpus // len(on)
    over = {n: u for n, u in used.items() if u > nodes[n][1]}
    if over:
        raise ValueError(f"nodes over their GPUs: {over}")
