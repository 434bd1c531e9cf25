"""A whole new policy in one file.  Dropped into solver/policies/ (the registry test puts it on the package's
path instead, so the source tree stays as it is), it is in `shockwave simulate`, the report and the study
without a change anywhere else."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from solver.policies.base import Policy
from solver.types import RoundDecision


class ToyConfig(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    newest_first: bool = False


class Toy(Policy):
    name = "toy_lifo"
    label = "ToyLIFO"
    aliases = ("toy",)
    description = "whole gangs by arrival, the newest first if asked, while GPUs are free."
    config_model = ToyConfig
    baseline = True

    def decide(self, view):
        free, run = view.num_gpus, []
        for job in sorted(view.jobs, key=lambda j: (j.arrival_time, str(j.job_id)), reverse=self.config.newest_first):
            if job.num_gpus <= free:
                run.append(job.job_id)
                free -= job.num_gpus
        return RoundDecision(tuple(run))
