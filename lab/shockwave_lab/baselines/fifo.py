"""FIFO: jobs in arrival order get their whole gang while GPUs are free (a later, smaller job may use
GPUs an earlier large one cannot); everyone else waits."""
from __future__ import annotations

from solver.placement import Packer
from shockwave_lab.baselines.time_fraction import TimeFractionPolicy


class Fifo(TimeFractionPolicy):
    name = "fifo"
    label = "FIFO"
    description = "first in, first out, whole gangs in arrival order while GPUs are free."
    order = 70

    def allocate(self, view):
        packer = Packer(view.capacity)
        return {job.job_id: 1.0 if packer.take_job(job) else 0.0
                for job in sorted(view.jobs, key=lambda j: (j.arrival_time, str(j.job_id)))}
