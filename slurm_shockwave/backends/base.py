"""The contract every cluster backend fulfils; the round loop drives it and nothing else.

observe() -> ClusterView   the policy's plain-data view at the start of a round
apply(decision)            enact the round's decision (simulated: dispatch; Slurm: hold/release/requeue)
advance()                  let the round happen (simulated: advance virtual time; Slurm: wait)
done() -> bool             no job left to schedule (simulated) / stop requested (Slurm)
"""
from __future__ import annotations

import abc
from dataclasses import dataclass

from solver.types import ClusterView, RoundDecision


@dataclass
class JobRecord:
    """A finished job, as the metrics need it."""

    job_id: object
    user: str
    num_gpus: int
    arrival_time: float
    finish_time: float
    isolated_runtime: float      # exclusive run time under its profiled schedule (FTF denominator)
    run_time: float = 0.0        # seconds it actually ran
    rounds_run: int = 0
    restarts: int = 0            # times it (re)started after not running the round before

    @property
    def jct(self) -> float:
        return self.finish_time - self.arrival_time


class ClusterBackend(abc.ABC):
    round_length: float = 120.0

    @abc.abstractmethod
    def observe(self) -> ClusterView: ...

    @abc.abstractmethod
    def apply(self, decision: RoundDecision) -> None: ...

    @abc.abstractmethod
    def advance(self) -> None: ...

    @abc.abstractmethod
    def done(self) -> bool: ...


def check_decision(view: ClusterView, decision: RoundDecision) -> list:
    """Validate a decision against the view: known jobs, no duplicates, capacity.  Returns the job ids."""
    gpus = {j.job_id: j.num_gpus for j in view.jobs}
    run = list(decision.run)
    if len(set(run)) != len(run):
        raise ValueError(f"round {view.round_index}: a job is scheduled twice: {run}")
    unknown = [j for j in run if j not in gpus]
    if unknown:
        raise ValueError(f"round {view.round_index}: decision names unknown or inactive jobs {unknown}")
    used = sum(gpus[j] for j in run)
    if used > view.num_gpus:
        raise ValueError(f"round {view.round_index}: decision uses {used} GPUs of {view.num_gpus}")
    return run
