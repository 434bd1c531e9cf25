"""The backend's round context (`ClusterBackend.round_context`): what the round's record keeps beside the views and
the decision, for `status`, `explain` and the metrics, as typed records.

* `RoundContext`: per job a `JobContext` (what Slurm says of it: state, times, ETA source, warnings, GPU type),
  and cluster-wide: the partition's GPUs, its `Unmanaged` load, the mode, the quarantined jobs, the market's
  `FairShare` budgets.
* JSON (the journal's SQLite payload, journal/record.py): `to_json` / `from_json`.  Loading is tolerant: a record
  written by an older controller (the dict form) loads with its missing or unreadable fields at their defaults, and
  a non-finite number (nan, inf) is never kept, stored or shown: it reads as None.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast


def _number(v: Any) -> int | float | None:
    """A finite int or float as it is (an int stays an int), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v if isinstance(v, int) or math.isfinite(v) else None


def _int(v: Any) -> int | None:
    n = _number(v)
    return int(n) if n is not None and float(n).is_integer() else None


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _flag(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _texts(v: Any) -> tuple[str, ...] | None:
    return tuple(str(x) for x in v) if isinstance(v, (list, tuple)) else None


#: how a record's field of a record type is read back (by field name)
_Nested = Mapping[str, Callable[[Any], Any]]

#: how a field of each annotated type is read back from JSON (None: unreadable, the field keeps its default)
_READERS = {
    "str": _text,
    "str | None": _text,
    "int": _int,
    "int | None": _int,
    "float": _number,
    "float | None": _number,
    "int | float | None": _number,
    "bool": _flag,
    "bool | None": _flag,
    "tuple[str, ...]": _texts,
}


def _load(cls, d: Any, **nested):
    """An instance of the dataclass `cls` from a JSON mapping: known fields read by their type (`nested`: a reader per
    field of a record type), anything else ignored; a missing or unreadable field keeps its default."""
    if isinstance(d, cls):
        return d
    if not isinstance(d, Mapping):
        return cls()
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in d and d[f.name] is not None:
            value = (nested.get(f.name) or _READERS[str(f.type)])(d[f.name])
            if value is not None:
                out[f.name] = value
    return cls(**out)


def _clean(v: Any) -> Any:
    """Plain JSON values, a non-finite number as None."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if dataclasses.is_dataclass(v):
        return cast(_Record, v).to_json()  # the records nest only records
    if isinstance(v, Mapping):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def _json(obj, omit_none: frozenset = frozenset(), omit_defaults: bool = False) -> dict:
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if (v is None and f.name in omit_none) or (
            omit_defaults and v == (f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)
        ):
            continue
        out[f.name] = _clean(v)
    return out


class _Record:
    """JSON both ways: `to_json` (plain values, non-finite numbers as None), `from_json` (tolerant, see `_load`)."""

    _NESTED: ClassVar[_Nested] = {}

    def to_json(self) -> dict:
        return _json(self)

    @classmethod
    def from_json(cls, d: Any):
        return _load(cls, d, **cls._NESTED)


def _rows(cls):
    return lambda v: tuple(_load(cls, r) for r in v) if isinstance(v, (list, tuple)) else None


@dataclass(frozen=True)
class JobContext(_Record):
    """What status and explain show of one managed job beside its view (slurm/jobview.py `build`)."""

    slurm_state: str = ""  # Slurm's state, HELD for a held job
    name: str = ""
    program: str = ""  # what "the same program" is for the ETA history
    submit_time: float | None = None  # its first submit time (its arrival)
    slurm_submit_time: int | float | None = None  # Slurm's (moved by a requeue)
    time_limit_min: int | None = None
    start_time: int | float | None = None
    restarts: int | None = None
    eta_source: str | None = None  # events | hint | history | time_limit | default
    eta_confidence: str | None = None  # high | medium | low
    eta_detail: str | None = None
    warnings: tuple[str, ...] = ()
    requeue: bool | None = None  # submitted with --requeue
    preempt_cost_s: float | None = None  # measured from its events
    gpu_type: str | None = None  # on a cluster of several GPU types (slurm/gpu_types.py)
    gpu_type_by: str | None = None  # slurm | user | controller
    gpu_speeds: str | None = None  # its speed on each type and where each comes from (slurm/type_speeds.py)

    def to_json(self) -> dict:
        return _json(self, omit_none=frozenset({"preempt_cost_s", "gpu_type", "gpu_type_by", "gpu_speeds"}))


@dataclass(frozen=True)
class UnmanagedJob(_Record):
    """A job of the partition the controller does not manage: running (its GPUs are busy until about
    `expected_end`, its start + time limit) or pending (at `position` in Slurm's own order)."""

    job_id: int | None = None
    user: str = ""
    gpus: int = 0
    name: str = ""
    start_time: int | float | None = None
    expected_end: int | float | None = None
    priority: int | None = None
    held: bool = False
    submit_time: int | float | None = None
    position: int | None = None


@dataclass(frozen=True)
class Unmanaged(_Record):
    """The partition's load the controller does not manage (slurm/jobview.py `unmanaged`)."""

    running: tuple[UnmanagedJob, ...] = ()
    pending: tuple[UnmanagedJob, ...] = ()
    running_gpus: int = 0
    pending_gpus: int = 0  # of the pending jobs not held
    _NESTED: ClassVar[_Nested] = {"running": _rows(UnmanagedJob), "pending": _rows(UnmanagedJob)}


@dataclass(frozen=True)
class Share(_Record):
    """One account, or one (account, user) of the round's managed jobs (`user` set): its Slurm shares, decayed
    usage, market budget (and weight, jobs) and GPU-time in the window."""

    account: str = ""
    user: str | None = None
    jobs: int | None = None
    raw_shares: int | float | None = None
    share: float | None = None
    usage: float | None = None
    raw_usage: int | float | None = None
    budget: float = 0.0
    weight: float | None = None
    gpu_s: float = 0.0

    def to_json(self) -> dict:
        return _json(self, omit_none=frozenset({"user", "jobs", "weight"}))


@dataclass(frozen=True)
class FairShare(_Record):
    """The market's budgets of the round (slurm/fairshare_round.py): from Slurm's shares (`source` "slurm") or the
    config's weights ("config", `note` says why)."""

    source: str = "config"
    note: str = ""
    window_s: float = 0.0
    users: tuple[Share, ...] = ()
    accounts: tuple[Share, ...] = ()
    _NESTED: ClassVar[_Nested] = {"users": _rows(Share), "accounts": _rows(Share)}


def _jobs(v: Any) -> dict | None:
    return {str(k): JobContext.from_json(x) for k, x in v.items()} if isinstance(v, Mapping) else None


def _quarantined(v: Any) -> dict | None:
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, Mapping) else None


@dataclass(frozen=True)
class RoundContext(_Record):
    """Everything a backend keeps of a round beside the views and the decision (the simulator: nothing)."""

    jobs: Mapping[str, JobContext] = field(default_factory=dict)  # str(job id) -> its context
    partition_gpus: int | None = None  # the partition's available GPUs (managed and not)
    unmanaged: Unmanaged | None = None
    mode: str | None = None  # advisory | authoritative
    dry_run: bool | None = None
    quarantined: Mapping[str, str] = field(default_factory=dict)  # str(job id) -> why it is left to Slurm
    fairshare: FairShare | None = None
    _NESTED: ClassVar[_Nested] = {
        "jobs": _jobs,
        "unmanaged": Unmanaged.from_json,
        "quarantined": _quarantined,
        "fairshare": FairShare.from_json,
    }

    def job(self, job_id) -> JobContext:
        return self.jobs.get(str(job_id)) or JobContext()

    def cluster_json(self) -> dict:
        """The cluster-wide part (everything but `jobs`), the fields left at their default omitted."""
        return {k: x for k, x in _json(self, omit_defaults=True).items() if k != "jobs"}

    @classmethod
    def from_json(cls, cluster: Any, jobs: Any = None) -> RoundContext:
        """From the record's "cluster" part and {job: its "context"}, or from the dict form ({"jobs": {...},
        cluster-wide keys}; a RoundContext as it is); either of an older layout reads tolerantly."""
        ctx = _load(cls, cluster, **cls._NESTED)
        return dataclasses.replace(ctx, jobs=_jobs(jobs) or {}) if jobs is not None else ctx

    coerce = from_json
