"""Typed (pydantic v2) records of Slurm's JSON, one per concept, tolerant of every shape.

Each output declares its version in ``meta`` (see :func:`output_version`):

============  ==========================  =========================================================
Slurm         ``meta``                    shapes
============  ==========================  =========================================================
22.05         ``plugin.type`` =           numbers are plain (``nice`` is uint32 when negative,
              ``openapi/v0.0.38``,        ``null`` when 0), ``job_state`` a string, node ``state``
              ``Slurm.version`` (ints)    a lower-case string + ``state_flags``; no ``hold`` field
24.11         ``plugin.data_parser`` =    numbers are ``{set, infinite, number}`` objects,
              ``data_parser/v0.0.42``,    ``job_state`` a list (base state + flags), ``hold`` bool;
              ``slurm.version`` (strings) ``sinfo --json`` has no per-node list (use
                                          ``scontrol show nodes --json``: ``state`` a list)
26.05         ``data_parser/v0.0.45``     as 24.11
============  ==========================  =========================================================

Adapters (``BeforeValidator``) turn every shape into one plain Python value, so one model per
concept reads all versions: :data:`Num` (``{set, infinite, number}`` / int / null -> int | None,
unset or infinite -> None), :func:`job_state_of` (string or list -> state + flags). Fields are
strict otherwise (an int is an int, a string a string). A field name never seen in the recorded
outputs of a supported version is reported once by :func:`unknown_fields`.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt

from slurm_shockwave.slurm.known_fields import KNOWN_JOB_FIELDS, KNOWN_NODE_FIELDS
from slurm_shockwave.slurm.models import FINISHED_STATES

log = logging.getLogger("slurm_shockwave.slurm")

#: data parsers / OpenAPI plugins whose shapes are known (22.05 .. 26.05)
KNOWN_PARSERS = frozenset({"v0.0.38", "v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"})
#: Slurm releases whose outputs are recorded in tests/data/slurm/<version>/
KNOWN_VERSIONS = frozenset({"22.05", "24.11", "26.05"})

#: base job states (everything else in a ``job_state`` list is a flag): the finished ones and these
BASE_JOB_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED"}) | FINISHED_STATES
#: flags that 22.05's single ``job_state`` string shows instead of the base state; kept so
#: that every version gives the same ``state`` (a completing job is neither running nor done)
SHOWN_FLAGS = ("COMPLETING", "CONFIGURING")
BASE_NODE_STATES = frozenset({"IDLE", "DOWN", "ALLOCATED", "MIXED", "ERROR", "FUTURE", "UNKNOWN"})

_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Log ``message`` as a warning the first time ``key`` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        log.warning("%s", message)


def _table(value: Any) -> dict[str, Any]:
    """A JSON object as it is, anything else as an empty one."""
    return value if isinstance(value, dict) else {}


def _num(value: Any) -> int | float | None:
    """``{set, infinite, number}`` (v0.0.39+) or a plain number / null (v0.0.38) -> number or None."""
    if isinstance(value, dict):
        if set(value) - {"set", "infinite", "number"}:
            raise ValueError(f"unexpected keys {sorted(set(value) - {'set', 'infinite', 'number'})}")
        if value.get("infinite") is True or value.get("set") is False:
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {type(value).__name__}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("number is not finite")
        return int(value) if value.is_integer() else value
    return value


def _int_or_none(value: Any) -> int | None:
    v = _num(value)
    if v is not None and not isinstance(v, int):
        raise ValueError(f"expected an integer, got {v!r}")
    return v


def _str_list(value: Any) -> list[str] | str:
    return value if value is not None else []


def feature_list(value: Any) -> tuple[str, ...]:
    """A job's or node's features: 22.05 a string (``v100`` or ``v100,nvme``), newer a list; anything else none."""
    if isinstance(value, list):
        return tuple(str(v) for v in value if str(v))
    return tuple(f for f in re.split(r"[,&]", value) if f) if isinstance(value, str) else ()


def _constraint(value: Any) -> str:
    """A job's ``features`` as Slurm prints it: 22.05 a string, newer a list of strings (joined with commas)."""
    if isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise ValueError("features: expected a list of strings")
        return ",".join(value)
    return value if isinstance(value, str) else ""


Num = Annotated[int | None, BeforeValidator(_int_or_none)]
Text = Annotated[str, BeforeValidator(lambda v: "" if v is None else v)]
#: a string field that may be absent, null or of another type (read as empty, never a problem: ``required_nodes``)
AnyText = Annotated[str, BeforeValidator(lambda v: v if isinstance(v, str) else "")]
Constraint = Annotated[str, BeforeValidator(_constraint)]
Features = Annotated[tuple[str, ...], BeforeValidator(feature_list)]


def job_state_of(value: str | list[str]) -> tuple[str, tuple[str, ...]]:
    """(state, flags) from 22.05's string or a newer list such as ``["PENDING", "REQUEUED"]``.

    The base state is the list item that is a base state (not simply the first item); the
    COMPLETING/CONFIGURING flags win over it, as in 22.05's string. ``flags`` are the other
    words of the list (so a completing job's base state is kept there).
    """
    if isinstance(value, str):
        return value.upper(), ()
    items = [str(v).upper() for v in value]
    base = next((v for v in items if v in BASE_JOB_STATES), None)
    shown = next((f for f in SHOWN_FLAGS if f in items), None)
    state = shown or base or (items[0] if items else "UNKNOWN")
    return state, tuple(v for v in items if v != state)


def node_state_of(state: str | list[str], flags: list[str] | None) -> tuple[str, tuple[str, ...]]:
    """(lower-case base state, upper-case flags) of a node, from either shape."""
    if isinstance(state, str):
        return state.lower(), tuple(f.upper() for f in flags or ())
    items = [str(v).upper() for v in state]
    base = next((v for v in items if v in BASE_NODE_STATES), items[0] if items else "UNKNOWN")
    return base.lower(), tuple(v for v in items if v != base) + tuple(f.upper() for f in flags or ())


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, frozen=True)


class JobRecord(_Record):
    """One job of ``squeue --json`` (any supported version)."""

    job_id: StrictInt = Field(ge=1)
    name: Text = ""
    user_name: Text = ""
    user_id: Num = None
    account: Text = ""
    partition: Text = ""
    job_state: str | list[str]
    state_reason: Text = ""
    hold: StrictBool | None = None
    priority: Num = 0
    nice: Num = None
    tres_per_node: Text = ""
    tres_per_job: Text = ""
    tres_per_task: Text = ""
    tres_alloc_str: Text = ""
    tres_req_str: Text = ""
    tasks: Num = None
    node_count: Num = None
    nodes: Text = ""
    submit_time: Num = None
    eligible_time: Num = None
    start_time: Num = None
    end_time: Num = None
    restart_cnt: Num = 0
    comment: Text = ""
    admin_comment: Text = ""
    requeue: StrictBool | None = None
    command: Text = ""
    current_working_directory: Text = ""
    standard_output: Text = ""
    standard_error: Text = ""
    time_limit: Num = None
    gres_detail: Annotated[list[str], BeforeValidator(_str_list)] = []
    required_nodes: AnyText = ""
    features: Constraint = ""


class NodeRecord(_Record):
    """One node of 22.05's ``sinfo --json`` or a newer ``scontrol show nodes --json``."""

    name: str = Field(min_length=1)
    state: str | list[str] = "unknown"
    state_flags: Annotated[list[str], BeforeValidator(_str_list)] = []
    gres: Text = ""
    gres_used: Text = ""
    cpus: Num = 0
    alloc_cpus: Num = 0
    partitions: Annotated[list[str], BeforeValidator(_str_list)] = []
    reason: Text = ""
    address: Text = ""
    port: Num = None
    features: Features = ()
    active_features: Features = ()


class SprioRow(_Record):
    """One line of ``sprio -h -o '%i|%S'`` (the same text on every supported version)."""

    job_id: StrictInt = Field(ge=1)
    site_factor: StrictInt


class Meta(BaseModel):
    """What an output says about the Slurm that wrote it."""

    model_config = ConfigDict(frozen=True)
    release: str = ""  # e.g. "24.11.5" ("" if not declared)
    parser: str = ""  # e.g. "v0.0.42" (data_parser) or "v0.0.38" (openapi plugin)

    @property
    def version(self) -> str:
        """Major.minor, e.g. ``24.11`` (``""`` if unknown)."""
        return ".".join(self.release.split(".")[:2])


def output_version(data: dict) -> Meta:
    """Read ``meta`` of 22.05 (``plugin.type``, ``Slurm``) or newer (``plugin.data_parser``, ``slurm``)."""
    meta = _table(data.get("meta"))
    plugin = _table(meta.get("plugin"))
    parser = str(plugin.get("data_parser") or plugin.get("type") or "")
    parser = parser.rsplit("/", 1)[-1]
    slurm = meta.get("slurm") if isinstance(meta.get("slurm"), dict) else meta.get("Slurm")
    release = ""
    if isinstance(slurm, dict):
        release = str(slurm.get("release") or "")
        ver = slurm.get("version")
        if not release and isinstance(ver, dict):
            release = ".".join(str(ver.get(k, "")) for k in ("major", "minor", "micro"))
    return Meta(release=release, parser=parser)


def check_version(meta: Meta, what: str) -> None:
    """Warn once about a version/parser whose shapes were never checked (never fails)."""
    if meta.parser and meta.parser not in KNOWN_PARSERS:
        warn_once(
            f"parser:{meta.parser}",
            f"{what}: unknown Slurm data parser {meta.parser!r} "
            f"(Slurm {meta.release or '?'}); reading it with the newest known shapes",
        )
    if meta.version and meta.version not in KNOWN_VERSIONS:
        warn_once(
            f"version:{meta.version}",
            f"{what}: Slurm {meta.release} is not a tested version "
            f"({', '.join(sorted(KNOWN_VERSIONS))}); reading it with the closest known shapes",
        )
    if not meta.parser and not meta.release:
        warn_once("version:none", f"{what}: output declares no Slurm version in 'meta'")


def unknown_fields(raw: dict, known: frozenset[str], what: str, meta: Meta) -> None:
    for key in raw:
        if key not in known:
            warn_once(f"{what}:{key}", f"{what}: unknown field {key!r} (Slurm {meta.release or '?'}) ignored")


def check_job_fields(raw: dict, meta: Meta) -> None:
    unknown_fields(raw, KNOWN_JOB_FIELDS, "squeue --json", meta)


def check_node_fields(raw: dict, meta: Meta) -> None:
    unknown_fields(raw, KNOWN_NODE_FIELDS, "nodes --json", meta)
