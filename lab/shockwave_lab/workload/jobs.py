"""The job description the simulator runs: one per job, from a trace line or our own job spec."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from shockwave_lab.workload.models import DATASET_SIZE, steps_per_epoch

MODES = ("static", "gns", "accordion")


@dataclass(frozen=True)
class JobSpec:
    job_id: int
    arrival_time: float
    model: str
    initial_bs: int
    num_gpus: int
    mode: str                     # static | gns | accordion
    total_steps: int              # iterations at the initial batch size
    samples_per_epoch: int = 0    # defaults to the model's dataset size
    user: str = "user"
    account: str = ""
    weight: float = 1.0
    # GNS: target batch size of every epoch (the job doubles its batch size towards it); empty = static
    gns_schedule: tuple[int, ...] = ()
    # Accordion: epochs in the critical regime (small batch); None = the reference simulator's model rules
    accordion_critical: frozenset[int] | None = None
    max_bs: int | None = None     # the largest batch size the job may use (declared)
    # exclusive run time under the profiled schedule (FTF denominator); 0 = compute from throughputs
    isolated_runtime: float = 0.0
    extra: dict = field(default_factory=dict, compare=False)
    gpu_type: str | None = None   # the GPU type the job asked for (None: any type it can run on)
    preemptible: bool | None = None   # the source says it may (True) / may not (False) be preempted; None: unknown
    # elastic: the GPU counts (min, max) it may run on, its global batch size kept (None: it runs on num_gpus only)
    gpus_range: tuple[int, int] | None = None

    @property
    def declared_max_bs(self) -> int:
        """The largest batch size the job declares to the scheduler (its wrapper's ``max_batch_size``): a static job
        declares none above its own."""
        return self.initial_bs if self.mode == "static" else (self.max_bs or self.initial_bs)

    @property
    def samples(self) -> int:
        return self.samples_per_epoch or DATASET_SIZE.get(self.model, 0)

    @property
    def num_epochs(self) -> int:
        return math.ceil(self.total_steps / steps_per_epoch(self.samples, self.initial_bs))

    @property
    def job_type(self) -> str:
        return f"{self.model} (batch size {self.initial_bs})"
