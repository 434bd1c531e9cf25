"""Plain data the policies see: no backend, no Slurm, no I/O.

Data flows one way: cluster state -> JobView/ClusterView -> policy -> RoundDecision (JobPlan per job) ->
placement (solver/placement.py) -> backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: the GPU type of a cluster whose GPUs are one untyped pool
GPU = "gpu"


@dataclass(frozen=True)
class JobView:
    """One active (arrived, unfinished) job as a policy sees it at the start of a round."""

    job_id: int | str
    arrival_time: float  # seconds, same clock as ClusterView.now
    num_gpus: int  # gang size (the reference's scale_factor)
    batch_size: int  # current global batch size
    epochs_done: int  # completed epochs
    total_epochs: int
    samples_per_epoch: int
    steps_done: float  # iterations done, expressed in current-batch-size steps
    total_steps: float  # total iterations at the current batch size
    # iterations/s of the whole job on num_gpus GPUs at batch_size (estimate), on its reference type (the one its
    # exclusive run time is measured on; a cluster of one untyped pool has one type)
    throughput: float
    # mean duration (s) of one epoch at each batch size: profile, or learned from observed epochs
    epoch_duration_by_bs: Mapping[int, float] = field(default_factory=dict)
    bs_history: tuple[int, ...] = ()  # batch size of each completed epoch, in order
    user: str = ""
    account: str = ""
    weight: float = 1.0  # market budget B_i / fairness weight
    mode: str = "static"  # static | gns | accordion | unknown (informational only)
    job_type: str = ""  # e.g. "ResNet-18 (batch size 32)" (informational only)
    min_batch_size: int | None = None
    max_batch_size: int | None = None
    ran_last_round: bool = False
    run_time: float = 0.0  # seconds this job has run so far (wall time while scheduled)
    restarts: int = 0  # times it started again after it had run (a preemption's requeue, a move; Slurm's restart count)
    running_type: str | None = None  # the GPU type it runs on now (None: not running, or unknown: Slurm's view)
    gpu_type: str | None = None  # the GPU type its user asked for (None: any type)
    # iterations/s of the whole job at each GPU count it can run on, at batch_size: an elastic job may be placed
    # on any of these counts (solver/placement.py); empty: it runs on its whole num_gpus gang only
    throughput_by_gpus: Mapping[int, float] = field(default_factory=dict)
    # the GPU counts its user declared it may run on, (min, max) (a job-spec's `gpus_range`, Slurm's `gpus=1-8`
    # hint): only such a job is resized by the default (solver/elastic.py), on its counts of throughput_by_gpus
    # within the range; None: a rigid job (a baseline that assumes every job elastic, Pollux, may still resize it)
    gpus_range: tuple[int, int] | None = None
    # the GPUs it runs on now (None: not running, or unknown): a count change of a running job is a restart
    running_gpus: int | None = None
    # iterations/s of the whole job on num_gpus GPUs at batch_size on each GPU type it can run on (a type the cluster
    # has, with room for its gang and a profiled throughput; its requested type only, when it asked for one); the
    # reference type's is `throughput`.  Empty: unknown (placement then takes any type with room)
    throughput_by_type: Mapping[str, float] = field(default_factory=dict)
    # the nodes it runs on now (a running job on a cluster whose view lists its nodes, ClusterView.nodes); empty:
    # not running, or nodes unknown
    nodes: tuple[str, ...] = ()
    # the nodes its user asked for (Slurm's --nodelist): it runs on exactly these or not at all (solver/nodes.py);
    # empty: any node
    allowed_nodes: tuple[str, ...] = ()
    # False: once running it keeps its GPUs until it ends (a job-spec's `preemptible: false`; on Slurm a job submitted
    # with --no-requeue): solver/pinned.py
    preemptible: bool = True

    @property
    def steps_remaining(self) -> float:
        return max(0.0, self.total_steps - self.steps_done)

    def rate(self, gpu_type: str | None = None, gpus: int | None = None) -> float:
        """Iterations/s on `gpus` GPUs (default: its gang) of `gpu_type` (default: its reference type).  The view
        lists counts on the reference type only, so another count on another type is that count's throughput scaled
        by the type's speed at the gang size; 0 where it cannot run."""
        gpus = self.num_gpus if gpus is None else int(gpus)
        base = self.throughput if gpus == self.num_gpus else float(self.throughput_by_gpus.get(gpus, 0.0))
        if gpu_type is None or not self.throughput_by_type:
            return base
        on_type = float(self.throughput_by_type.get(gpu_type, 0.0))
        if gpus == self.num_gpus:
            return on_type
        if on_type == self.throughput:  # as fast as its reference type: its own counts, exactly
            return base
        return base * on_type / self.throughput if self.throughput > 0 else 0.0


@dataclass(frozen=True)
class ClusterView:
    """Everything a policy may use to decide one round.

    `capacity` is the free GPUs per GPU type ({type: count}); a cluster of one untyped pool has the single
    type `GPU`.  `num_gpus` is their total (what most policies need)."""

    now: float  # seconds since the start of the workload
    round_index: int
    round_length: float  # seconds (the reference's time_per_iteration, 120 s)
    num_gpus: int
    jobs: tuple[JobView, ...]
    # seconds each job ran in the previous round, including jobs that finished in it
    last_round_run_time: Mapping[Any, Any] = field(default_factory=dict)
    total_jobs: int = 0  # jobs in the whole workload, when known (0 = unknown)
    capacity: Mapping[str, int] = field(default_factory=dict)
    # node name -> (its GPU type, its GPUs for the managed jobs): a gang runs on one node (a gang larger than a node
    # on whole nodes), solver/nodes.py.  Empty: each type is one pool (no node constraint)
    nodes: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.capacity:
            object.__setattr__(self, "capacity", {GPU: int(self.num_gpus)})
        elif sum(self.capacity.values()) != self.num_gpus:
            raise ValueError(f"capacity {dict(self.capacity)} does not add up to num_gpus = {self.num_gpus}")

    def job(self, job_id: int | str) -> JobView:
        for j in self.jobs:
            if j.job_id == job_id:
                return j
        raise KeyError(job_id)


#: the rules that can place a job in a round (JobPlan.rule); status, explain and the metrics name them
RULES = {
    "finishing": "finishing: every epoch reported, still running",
    "critical_path": "on the critical path (its remaining time sets the makespan if it waits)",
    "deadline": "earliest fair-finish deadline first",
    "market": "the market's plan for the window",
    "backfill": "backfill: GPUs nobody planned would have been idle",
    "guard": "starvation guard: waited the bound",
    "fallback": "fallback: least attained service first",
    "kept": "kept running: preempting it would not pay",
    "pinned": "running until it ends: it may not be preempted (solver/pinned.py)",
    "elastic": "idle GPUs lent to an elastic job beyond its asked count (solver/elastic.py)",
    "policy": "the policy's own rule",
}


@dataclass(frozen=True)
class JobPlan:
    """What the policy decided for one active job this round, and why: produced by the policy, completed
    (never mutated) by the controller's annotations, journalled once per round, read by status, explain and
    the metrics.  None = the policy does not know or say."""

    job_id: int | str
    rule: str = ""  # a key of RULES when the job runs this round, else ""
    predicted_remaining_s: float | None = None
    rho_hat: float | None = None
    weight: float | None = None
    rounds_planned: int | None = None  # rounds of the planning window the job is planned in
    next_offset: int | None = None  # rounds until it next runs (0 = this one; None = not planned)
    fair_finish_in_s: float | None = None  # its fair-finish deadline (the default: its latest fair start), s from now
    critical_path: bool = False
    waited_rounds: int = 0  # rounds since it last ran
    overdue: bool = False  # waited the starvation bound: the guard puts it first
    reason: str = ""  # one human line (controller/reasons.py)
    expected_start: float | None = None  # view clock seconds; None = not in the planned window
    gpus: int | None = None  # an elastic job's count this round when not its asked one (solver/elastic.py)
    resize: str = ""  # why it runs on that count (one human line); "" = on its asked count


@dataclass(frozen=True)
class RoundDecision:
    """The jobs to run (each on all its num_gpus GPUs, an elastic job on the count its placement gives) during the
    coming round, with a plan record per job.

    `path` says how the decision was reached (solved, cached, fallback, idle; a baseline leaves it empty);
    `placement` (job -> {GPU type: count}) says which GPUs: empty until the placement stage fills it; `nodes`
    (job -> node names) says where, on a cluster whose view lists its nodes (solver/nodes.py)."""

    run: tuple[Any, ...] = ()
    plans: Mapping[Any, Any] = field(default_factory=dict)  # job id -> JobPlan
    path: str = ""
    solve_time_s: float = 0.0
    solver_status: str = ""
    window_rounds: int | None = None
    fallback_reason: str = ""
    placement: Mapping[Any, Any] = field(default_factory=dict)
    nodes: Mapping[Any, Any] = field(default_factory=dict)


def __getattr__(attr: str) -> Any:
    # `from solver.types import Policy` keeps working: the base class lives with the policies
    # (solver/policies/base.py), imported on first use so that this module stays plain data
    if attr == "Policy":
        from solver.policies.base import Policy

        return Policy
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
