"""The contract every cluster backend fulfils; the round loop and the controller daemon drive it and nothing else.

The round loop (controller/loop.py) needs four methods:

    observe() -> ClusterView   the policy's plain-data view at the start of a round
    apply(decision)            enact the round's decision (simulated: dispatch; Slurm: hold/release/requeue)
    advance()                  let the round happen (simulated: advance virtual time; Slurm: wait)
    done() -> bool             no job left to schedule (simulated) / stop requested (a service)

A backend the controller daemon runs as a service (controller/daemon.py) also implements the `ServiceBackend`
methods: built from the controller config (`from_config`), stopped by a signal (`stop`), reconfigured on SIGHUP
(`reconfigure`), checked by `shockwave controller check` (`check`), undone by `shockwave controller uninstall`
(`uninstall`).  A backend that cannot reach its cluster raises `BackendUnavailable` (the daemon backs off and
retries; it never acts on a failed read).

Backends are found by name in the entry-point group ``slurm_shockwave.backends`` (setup.cfg), as submitit finds
its executors: a new backend is one subpackage plus one entry point.  `backend_class(name)`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, replace
from importlib.metadata import entry_points

from slurm_shockwave.journal.context import RoundContext
from solver.placement import check_placement, place
from solver.types import ClusterView, RoundDecision

ENTRY_POINT_GROUP = "slurm_shockwave.backends"


class BackendUnavailable(RuntimeError):
    """The cluster cannot be read or driven right now (its controller is down, a command timed out).
    `str()` is one line; the daemon retries with back-off and never acts on a partial read."""


@dataclass
class JobRecord:
    """A finished job, as the metrics need it."""

    job_id: object
    user: str
    num_gpus: int
    arrival_time: float
    finish_time: float
    isolated_runtime: float  # exclusive run time under its profiled schedule (FTF denominator)
    run_time: float = 0.0  # seconds it actually ran
    rounds_run: int = 0
    restarts: int = 0  # times it (re)started after not running the round before
    account: str = ""  # the account it was charged to (per-account metrics)
    # the cluster's GPUs counted at this job's speed on each type over its reference type's (the dynamic FTF's G on
    # a cluster of several GPU types, docs/fairness.md); 0: the cluster's GPU count
    cluster_gpus: float = 0.0

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

    def round_context(self) -> RoundContext:
        """What the round's record keeps beside the views and the decision, for status, explain and the metrics
        (journal/context.py): per-job details the policy does not see (`RoundContext.jobs`, a `JobContext` per
        str(job id)) and cluster-wide ones (the cluster's unmanaged load...)."""
        return RoundContext()

    def preemption_costs(self) -> dict:
        """{job: seconds} a preemption of the job costs (checkpoint + requeue + restart), where measured; the
        round loop's preemption gate (solver/preemption.py) uses its default for the others."""
        return {}

    def stopping(self) -> frozenset:
        """Jobs whose preemption is under way (signalled, not off their GPUs yet): not judged again."""
        return frozenset()


class ServiceBackend(ClusterBackend):
    """A backend the controller daemon runs (see the module docstring)."""

    round_index: int = 0
    label: str = "cluster"  # how logs name the cluster ("Slurm unavailable ...")

    @classmethod
    @abc.abstractmethod
    def from_config(cls, cfg, journal, reader, metrics=None, clock=None) -> ServiceBackend:
        """The backend of a validated controller config, journalling into `journal` (a journal.StateStore)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """End the current wait (advance) and make done() true: called from a signal handler."""

    def wait(self, seconds: float) -> None:
        """Sleep up to `seconds`, ending early on stop()."""

    def reconfigure(self, cfg) -> None:
        """Apply a reloaded config (SIGHUP) at the next round."""

    def startup_warnings(self) -> list[str]:
        """Problems of the cluster's configuration worth a warning at start (never fatal)."""
        return []

    def health_warnings(self) -> list[str]:
        """Problems worth a warning now and then while running (no usable capacity...)."""
        return []

    @classmethod
    def check(cls, cfg, facts: dict | None = None) -> list[str]:
        """`shockwave controller check`: the cluster side of a config, one line per problem; what it found worth
        showing even when fine goes into `facts` (e.g. whether the prolog hook is configured)."""
        return []

    @classmethod
    def uninstall(cls, cfg) -> dict:
        """`shockwave controller uninstall`: undo what the controller did to the cluster, from the cluster's
        own records.  Returns what was done (JSON-safe)."""
        return {}


def backend_names() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def backend_class(name: str) -> type[ServiceBackend]:
    """The backend class registered under `name` in the ``slurm_shockwave.backends`` entry points."""
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        known = ", ".join(backend_names()) or "none: reinstall the package (pip install -e .)"
        raise ValueError(f"unknown backend {name!r} (known: {known})")
    return found[0].load()


def check_decision(view: ClusterView, decision: RoundDecision) -> RoundDecision:
    """Validate a decision against the view (known jobs, no duplicates, capacity) and place it when the policy
    did not (solver/placement.py); returns the placed decision, raises ValueError (one line) when it does not
    fit."""
    gpus = {j.job_id: j.num_gpus for j in view.jobs}
    run = list(decision.run)
    if len(set(run)) != len(run):
        raise ValueError(f"round {view.round_index}: a job is scheduled twice: {run}")
    unknown = [j for j in run if j not in gpus]
    if unknown:
        raise ValueError(f"round {view.round_index}: decision names unknown or inactive jobs {unknown}")
    # a placed elastic job counts the GPUs it was placed on (solver/placement.py); any other job its gang
    placed = decision.placement
    used = sum(sum(placed[j].values()) if j in placed else gpus[j] for j in run)
    if used > view.num_gpus:
        raise ValueError(f"round {view.round_index}: decision uses {used} GPUs of {view.num_gpus}")
    if not decision.placement:
        decision = replace(decision, run=tuple(run), placement=place(view, run))
    check_placement(view, decision)
    return decision
