"""Plain, immutable views of Slurm jobs and nodes (built by :mod:`.parse` from the typed
records of :mod:`.shapes`, for every supported Slurm version)."""

from __future__ import annotations

from dataclasses import dataclass

#: ``state_reason`` values of a held job (``scontrol hold`` -> JobHeldAdmin, ``uhold`` or a
#: user's own hold -> JobHeldUser; ``requeuehold`` first shows job_requeued_in_held_state)
HELD_REASONS = frozenset({"JobHeldAdmin", "JobHeldUser", "job_requeued_in_held_state"})

#: job states after which a job never runs again (unless requeued by an admin)
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)

#: job states of a job that may still run (what the controller plans, polls and uninstall releases)
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED"})


def in_partition(job, partition: str | None) -> bool:
    """THE partition rule: no partition configured, or the job lists it (a job submitted to several partitions
    lists them comma-separated; a record without a partition counts as in it)."""
    return not (partition and job.partition and partition not in str(job.partition).split(","))


def node_in_partition(node, partition: str | None) -> bool:
    """A node's side of the partition rule: no partition configured, or the node is in it."""
    return not partition or partition in node.partitions


@dataclass(frozen=True)
class SlurmJob:
    """One job from ``squeue --json`` (Slurm 22.05 / OpenAPI v0.0.38 up to 26.05 / data_parser
    v0.0.45; see :mod:`.shapes` for what differs).

    Times are Unix seconds, ``None`` when Slurm reports 0/unset. ``gpus`` is the total number of
    GPUs requested over all nodes; ``gpus_per_node`` is set only when the request was per node
    (``--gres=gpu:N`` / ``--gpus-per-node``). ``nice`` is signed (22.05 prints ``null`` for 0 and
    a negative nice as its uint32 wraparound, which is undone here). ``held`` is true for a
    pending job whose ``state_reason`` is in :data:`HELD_REASONS` or whose priority is 0 (22.05
    has no hold field: a hold sets the priority to 0). ``site_factor`` is not in 22.05's JSON;
    it is ``None`` unless filled from ``sprio`` (see ``SlurmCLI.squeue_jobs``), and ``sprio``
    misses some pending jobs (see :mod:`.parse`), so ``None`` does not mean "no site factor".
    ``time_limit`` is in minutes, ``None`` = not set/unlimited.

    ``state`` is the same word on every version: the base state (PENDING, RUNNING, ...), or
    COMPLETING/CONFIGURING while that flag is set (22.05 prints only that word; newer versions
    a list, whose other flags are in ``state_flags``). ``admin_comment`` is Slurm's
    AdminComment (in ``squeue --json`` of every supported version). ``problem`` is set (one
    line) when the record could not be fully read: then only ``job_id`` can be trusted and the
    caller should quarantine the job, not act on it.

    What its GPU type and nodes depend on (slurm/gpu_types.py, slurm/nodes.py), on every version:
    ``gpu_request`` is ``tres_per_node`` (else ``tres_per_job``, else ``tres_per_task``) as Slurm prints it,
    ``gpu_type`` the one GPU type that request names (None: any), ``features`` its constraint
    (``--constraint``; 22.05 prints a string, newer versions a list, joined here with commas) and
    ``required_nodes`` the nodes it must run on (``--nodelist``/``-w``, or our pin; hostlist syntax).

    ``signal``: its ``--signal`` (hints.signal_value form: ``B:USR1``, ``USR2``) when Slurm shows it: only 26.05's
    ``submit_line`` does, for an option given on the command line (not an ``#SBATCH`` line); 22.05 and 24.11 show it
    nowhere (``squeue --json``, ``scontrol show job``, ``squeue -O``): empty.
    """

    job_id: int
    name: str
    user: str
    user_id: int | None
    account: str
    partition: str
    state: str
    state_reason: str
    gpus: int
    gpus_per_node: int | None
    num_nodes: int
    nodes: str
    priority: int
    nice: int
    submit_time: int | None
    eligible_time: int | None
    start_time: int | None
    end_time: int | None
    restart_count: int
    comment: str
    requeue: bool
    held: bool
    site_factor: int | None
    command: str
    working_dir: str
    std_out: str
    std_err: str
    time_limit: int | None
    gres_detail: tuple[str, ...] = ()
    admin_comment: str = ""
    problem: str | None = None
    state_flags: tuple[str, ...] = ()
    required_nodes: str = ""  # the nodes it must run on (``--nodelist``/``-w``, or a pin), hostlist syntax
    gpu_request: str = ""  # tres_per_node (else tres_per_job / tres_per_task) as Slurm prints it
    gpu_type: str | None = None  # the one GPU type its request names (None: any)
    features: str = ""  # its constraint (``--constraint``), as Slurm prints it (a list: comma-joined)
    signal: str = ""  # its ``--signal`` when Slurm shows it (26.05's submit line), e.g. ``B:USR1``

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


@dataclass(frozen=True)
class SlurmNode:
    """One node from ``sinfo --json`` (22.05) or ``scontrol show nodes --json`` (23.x and newer,
    whose ``sinfo --json`` has no per-node list).

    ``state`` is Slurm's base state in lower case (``idle``, ``mixed``, ``allocated``,
    ``down``, ...); ``state_flags`` holds flags such as ``DRAIN``. ``gpus``/``gpus_used`` come
    from the ``gres``/``gres_used`` strings (``gpu:4``, ``gpu:a100:2(IDX:0-1)``); ``by_type`` is its GPUs per
    type ((type, GPUs) pairs, untyped ones under solver.types.GPU) and ``features`` its active features.
    """

    name: str
    state: str
    state_flags: tuple[str, ...]
    gpus: int
    gpus_used: int
    cpus: int
    alloc_cpus: int
    partitions: tuple[str, ...]
    reason: str
    address: str
    port: int | None
    by_type: tuple[tuple[str, int], ...] = ()
    features: tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        """Up and schedulable: not down/drained/failing."""
        bad = {"DRAIN", "DRAINED", "DRAINING", "FAIL", "MAINTENANCE", "NOT_RESPONDING", "REBOOT"}
        return self.state not in {"down", "unknown", "future"} and not bad & set(self.state_flags)

    @property
    def gpus_free(self) -> int:
        return max(self.gpus - self.gpus_used, 0)
