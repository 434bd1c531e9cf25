"""One simulated job's training state and its batch-size adaptation (docs/reference.md §4.3)."""
from __future__ import annotations

import math

from solver.types import GPU

from shockwave_lab.workload.jobs import JobSpec
from shockwave_lab.workload.models import MIN_BATCH_SIZE, accordion_critical, steps_per_epoch


class SimJob:
    def __init__(self, spec: JobSpec, throughputs, tables=None, ref_type: str = GPU):
        """`throughputs`: the table of its reference type `ref_type` (workload/gpu_types.py): its `throughput`,
        which batch sizes it may change to, its exclusive run time; `tables`: {type: table} of every type it may
        run on (default: its reference type's only)."""
        self.spec = spec
        self._thr_table = throughputs
        self.ref_type = ref_type
        self.tables = dict(tables) if tables is not None else {ref_type: throughputs}
        self.bs = spec.initial_bs
        self.total_steps = spec.total_steps
        self.steps_run = 0
        self.run_time = 0.0
        # run time counted at the pace of its requested gang (the deadline guard's clock): an elastic job placed on
        # fewer GPUs is not cut off for being slow (the same as run_time for a job that always runs its gang)
        self.nominal_run_time = 0.0
        self.rounds_run = 0
        self.restarts = 0
        self.big_bs = self.small_bs = False
        self.bs_history: list[int] = []
        self.finish_time: float | None = None
        self.throughput = throughputs.get(spec.model, self.bs, spec.num_gpus)
        self.max_bs = spec.declared_max_bs

    # ------------------------------------------------------------------ progress
    @property
    def spe(self) -> int:
        return steps_per_epoch(self.spec.samples, self.bs)

    @property
    def remaining_steps(self) -> int:
        return self.total_steps - self.steps_run

    def throughput_on(self, gpus: int, gpu_type: str | None = None) -> float | None:
        """Iterations/s on `gpus` GPUs of `gpu_type` (default: its reference type) at the current batch size (its
        gang's on its reference type: `throughput`)."""
        if gpu_type is not None and gpu_type != self.ref_type:
            table = self.tables.get(gpu_type)
            return table.get(self.spec.model, self.bs, gpus) if table is not None else None
        return self.throughput if gpus == self.spec.num_gpus else self._thr_table.get(self.spec.model, self.bs, gpus)

    def steps_for_round(self, length: float, throughput: float | None = None) -> int:
        return min(int((self.throughput if throughput is None else throughput) * length), self.remaining_steps)

    def add_steps(self, steps: int) -> None:
        before = self.steps_run // self.spe
        self.steps_run += steps
        after = self.steps_run // self.spe
        self.bs_history.extend([self.bs] * max(0, after - before))

    # ------------------------------------------------------------------ adaptation
    def set_adaptation_flags(self) -> None:
        """Called for every active job at the start of each round (after completions)."""
        epoch = math.ceil(self.steps_run / self.spe)   # the reference rounds up here
        if self.spec.mode == "gns" and self.spec.gns_schedule:
            sched = self.spec.gns_schedule
            target = max(sched[min(epoch, len(sched) - 1)], sched[min(epoch + 1, len(sched) - 1)])
            if target > self.bs and self.bs != self.max_bs:
                self.big_bs = True
        elif self.spec.mode == "accordion":
            if self.spec.accordion_critical is not None:
                critical = epoch in self.spec.accordion_critical
            else:
                critical = accordion_critical(self.spec.model, self.spec.initial_bs, epoch)
            if critical is None:
                return
            if self.bs == self.spec.initial_bs and not critical and self.bs != self.max_bs:
                self.big_bs = True
            elif self.bs != self.spec.initial_bs and critical and \
                    self.bs != MIN_BATCH_SIZE.get(self.spec.model, 0):
                self.small_bs = True

    def apply_batch_size_change(self) -> bool:
        """At the end of a round the job ran: act on the flags.  Completed epochs are preserved."""
        if not (self.big_bs or self.small_bs):
            return False
        big = self.big_bs
        self.big_bs = self.small_bs = False
        if self.spec.initial_bs == self.max_bs:
            return False
        old = self.bs
        if self.spec.mode == "gns":
            new = 2 * old
        elif self.spec.mode == "accordion":
            new = self.max_bs if big else self.spec.initial_bs
        else:
            return False
        thr = self._thr_table.get(self.spec.model, new, self.spec.num_gpus)
        if thr is None or new == old:
            return False
        samples = self.spec.samples
        old_spe, new_spe = steps_per_epoch(samples, old), steps_per_epoch(samples, new)
        old_epochs = math.ceil(self.total_steps / old_spe)
        new_total = math.ceil(self.total_steps * old / new)
        if math.ceil(new_total / new_spe) != old_epochs:
            new_total = new_spe * old_epochs
        completed = math.ceil(self.steps_run / old_spe)
        if completed > len(self.bs_history):          # a partial epoch is rounded up, as the reference does
            self.bs_history.extend([old] * (completed - len(self.bs_history)))
        self.total_steps = new_total
        self.steps_run = completed * new_spe
        self.bs = new
        self.throughput = thr
        return True

    @property
    def epochs_done(self) -> int:
        return self.steps_run // self.spe

    @property
    def job_type(self) -> str:
        return f"{self.spec.model} (batch size {self.bs})"
