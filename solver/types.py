"""Plain data the policies see: no backend, no Slurm, no I/O.

Data flows one way: cluster state -> JobView/ClusterView -> policy -> RoundDecision -> backend.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class JobView:
    """One active (arrived, unfinished) job as a policy sees it at the start of a round."""

    job_id: int | str
    arrival_time: float          # seconds, same clock as ClusterView.now
    num_gpus: int                # gang size (the reference's scale_factor)
    batch_size: int              # current global batch size
    epochs_done: int             # completed epochs
    total_epochs: int
    samples_per_epoch: int
    steps_done: float            # iterations done, expressed in current-batch-size steps
    total_steps: float           # total iterations at the current batch size
    throughput: float            # iterations/s of the whole job on num_gpus GPUs at batch_size (estimate)
    # mean duration (s) of one epoch at each batch size: profile, or learned from observed epochs
    epoch_duration_by_bs: Mapping[int, float] = field(default_factory=dict)
    bs_history: tuple[int, ...] = ()   # batch size of each completed epoch, in order
    user: str = ""
    account: str = ""
    weight: float = 1.0          # market budget B_i / fairness weight
    mode: str = "static"         # static | gns | accordion | unknown (informational only)
    job_type: str = ""           # e.g. "ResNet-18 (batch size 32)" (informational only)
    min_batch_size: int | None = None
    max_batch_size: int | None = None
    ran_last_round: bool = False
    run_time: float = 0.0        # seconds this job has run so far (wall time while scheduled)

    @property
    def steps_remaining(self) -> float:
        return max(0.0, self.total_steps - self.steps_done)


@dataclass(frozen=True)
class ClusterView:
    """Everything a policy may use to decide one round."""

    now: float                   # seconds since the start of the workload
    round_index: int
    round_length: float          # seconds (the reference's time_per_iteration, 120 s)
    num_gpus: int
    jobs: tuple[JobView, ...]
    # seconds each job ran in the previous round, including jobs that finished in it
    last_round_run_time: Mapping = field(default_factory=dict)
    total_jobs: int = 0          # jobs in the whole workload, when known (0 = unknown)

    def job(self, job_id) -> JobView:
        for j in self.jobs:
            if j.job_id == job_id:
                return j
        raise KeyError(job_id)


@dataclass(frozen=True)
class RoundDecision:
    """The jobs to run (each on all its num_gpus GPUs) during the coming round.

    `info` carries optional explanations (planned rounds per job, priorities...) for status/explain.
    """

    run: tuple = ()
    info: Mapping = field(default_factory=dict)


class Policy:
    """Base class: one small class per policy.  Policies may keep state between rounds."""

    name = "policy"

    def decide(self, view: ClusterView) -> RoundDecision:  # pragma: no cover - interface
        raise NotImplementedError
