"""SimulatedCluster: a GPU cluster in virtual time with the reference simulator's semantics.

Per round (docs/reference.md §4.1, §4.4): the round loop observes the active jobs, the policy decides, the
backend dispatches each chosen job for `steps = min(int(throughput x round), remaining)` iterations ending
at `now + steps / throughput`; `advance()` moves time to the latest finish of the round (a round is
shorter than 120 s when every running job finishes early; with nothing running, time jumps to the next
arrival), records progress, charges the 20 s restart penalty to a job that did not run in the previous
round (when it ran a full round), applies pending batch-size changes, then completes jobs (no steps left or
every epoch done, checked after the batch-size change; or run time over 1.5 x exclusive run time, as the
reference's deadline guard), sets the adaptation flags for
the next round and admits the jobs that arrived by then.
"""
from __future__ import annotations

from solver.types import ClusterView, JobView, RoundDecision

from ..backends.base import ClusterBackend, JobRecord, check_decision
from ..workload.jobs import JobSpec
from .job import SimJob


class SimulatedCluster(ClusterBackend):
    def __init__(self, jobs: list[JobSpec], throughputs, num_gpus: int, round_length: float = 120.0,
                 restart_penalty: float = 20.0, deadline_factor: float = 1.5):
        if num_gpus <= 0:
            raise ValueError(f"num_gpus must be positive, got {num_gpus}")
        too_big = [j.job_id for j in jobs if j.num_gpus > num_gpus]
        if too_big:
            raise ValueError(f"jobs {too_big[:5]} ask for more GPUs than the cluster has ({num_gpus})")
        self.num_gpus = num_gpus
        self.round_length = float(round_length)
        self.restart_penalty = restart_penalty
        self.deadline_factor = deadline_factor
        self.throughputs = throughputs
        self._pending = sorted(jobs, key=lambda j: (j.arrival_time, str(j.job_id)))
        self._pending.reverse()                       # pop() from the end = earliest arrival
        self.n_jobs = len(jobs)
        self.active: dict[object, SimJob] = {}
        self.finished: list[JobRecord] = []
        self.now = self._pending[-1].arrival_time if self._pending else 0.0
        self.round_index = 0
        self.busy_gpu_seconds = 0.0
        self.utilization_timeline: list[tuple[float, float, int]] = []   # (start, end, busy GPUs)
        self._dispatched: list[tuple[SimJob, int, float]] = []
        self._prev_run: set = set()
        self._dispatch_rounds = 0
        self._round_start = self.now
        self._last_round_run_time: dict = {}
        self._dur_cache: dict = {}
        self._admit()

    # ------------------------------------------------------------------ contract
    def done(self) -> bool:
        return not self.active and not self._pending and not self._dispatched

    def observe(self) -> ClusterView:
        jobs = tuple(self._view(j) for j in self.active.values())
        return ClusterView(now=self.now, round_index=self.round_index, round_length=self.round_length,
                           num_gpus=self.num_gpus, jobs=jobs, last_round_run_time=dict(self._last_round_run_time),
                           total_jobs=self.n_jobs)

    def apply(self, decision: RoundDecision) -> None:
        view_jobs = ClusterView(self.now, self.round_index, self.round_length, self.num_gpus,
                                tuple(self._view(j, light=True) for j in self.active.values()))
        run = check_decision(view_jobs, decision).run
        self._round_start = self.now
        self._dispatched = []
        for job_id in run:
            job = self.active[job_id]
            steps = job.steps_for_round(self.round_length)
            self._dispatched.append((job, steps, self.now + steps / job.throughput))

    def advance(self) -> None:
        run_ids = {job.spec.job_id for job, _, _ in self._dispatched}
        self._last_round_run_time = {}
        if self._dispatched:
            end = max(finish for _, _, finish in self._dispatched)
            busy = sum(job.spec.num_gpus for job, _, _ in self._dispatched)
            self.utilization_timeline.append((self._round_start, end, busy))
            for job, steps, finish in self._dispatched:
                self._complete_round(job, steps, finish)
            self._dispatch_rounds += 1
            self.now = end
        elif self.active:
            self.now += self.round_length                    # nothing fitted: an idle round
        elif self._pending:
            self.now = max(self.now, self._pending[-1].arrival_time)
        self._prev_run = run_ids
        self._dispatched = []
        for job in self.active.values():
            job.set_adaptation_flags()
        self._admit()
        self.round_index += 1

    # ------------------------------------------------------------------ internals
    def _complete_round(self, job: SimJob, steps: int, finish: float) -> None:
        execution = finish - self._round_start
        if job.spec.job_id not in self._prev_run:
            job.restarts += 1 if job.rounds_run else 0
            if self._dispatch_rounds > 0 and execution > max(self.round_length - 5, self.restart_penalty):
                factor = (execution - self.restart_penalty) / execution
                steps = int(steps * factor)
                execution -= self.restart_penalty
        over_deadline = job.run_time + execution > int(job.spec.isolated_runtime * self.deadline_factor)
        job.run_time += execution
        job.rounds_run += 1
        self.busy_gpu_seconds += execution * job.spec.num_gpus
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
                                           job.restarts))

    def _admit(self) -> None:
        while self._pending and self._pending[-1].arrival_time <= self.now:
            spec = self._pending.pop()
            self.active[spec.job_id] = SimJob(spec, self.throughputs)

    def _durations(self, job: SimJob) -> dict[int, float]:
        key = (job.spec.model, job.spec.num_gpus, job.spec.samples)
        if key not in self._dur_cache:
            sizes = self.throughputs.batch_sizes(job.spec.model, job.spec.num_gpus)
            self._dur_cache[key] = {bs: job.spec.samples / bs / thr for bs, thr in sizes.items()}
        return self._dur_cache[key]

    def _view(self, job: SimJob, light: bool = False) -> JobView:
        s = job.spec
        if light:
            return JobView(job_id=s.job_id, arrival_time=s.arrival_time, num_gpus=s.num_gpus, batch_size=job.bs,
                           epochs_done=0, total_epochs=0, samples_per_epoch=s.samples, steps_done=0,
                           total_steps=0, throughput=job.throughput)
        return JobView(
            job_id=s.job_id, arrival_time=s.arrival_time, num_gpus=s.num_gpus, batch_size=job.bs,
            epochs_done=job.epochs_done, total_epochs=s.num_epochs, samples_per_epoch=s.samples,
            steps_done=job.steps_run, total_steps=job.total_steps, throughput=job.throughput,
            epoch_duration_by_bs=self._durations(job), bs_history=tuple(job.bs_history), user=s.user,
            account=s.account, weight=s.weight, mode=s.mode, job_type=job.job_type,
            min_batch_size=s.initial_bs, max_batch_size=job.max_bs,
            ran_last_round=s.job_id in self._prev_run, run_time=job.run_time)
