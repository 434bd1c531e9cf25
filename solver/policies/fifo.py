"""FIFO: jobs in arrival order get their whole gang while GPUs are free (a later, smaller job may use
GPUs an earlier large one cannot); everyone else waits."""
from __future__ import annotations

from .time_fraction import TimeFractionPolicy


class Fifo(TimeFractionPolicy):
    name = "fifo"
    label = "FIFO"

    def allocate(self, view):
        free = view.num_gpus
        x = {}
        for job in sorted(view.jobs, key=lambda j: (j.arrival_time, str(j.job_id))):
            fits = job.num_gpus <= free
            x[job.job_id] = 1.0 if fits else 0.0
            free -= job.num_gpus if fits else 0
        return x
