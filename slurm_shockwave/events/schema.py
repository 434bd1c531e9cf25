"""Event schema v1: one JSON object per line, validated field by field.

The schema is documented in ``docs/event-schema.md``.  This module is pure: no I/O.
``validate()`` never raises on content; it returns ``(event, None)`` or ``(None, reason)``.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeGuard

from slurm_shockwave.events.layout import (
    FIELD_SPECS,
    LOCAL_JOB_ID,
    MAX_LINE_BYTES,
    SCHEMA_VERSION,
    SLURM_JOB_ID,
)
from slurm_shockwave.events.layout import encode_line as encode_line  # re-exported: the line format is the schema's

#: Timestamps further than this in the future (s) are rejected (clock skew allowance).
MAX_FUTURE_S = 300.0
#: Timestamps before this (2001-09-09) are rejected as absurd.
MIN_TS = 1_000_000_000.0

JOB_KINDS = frozenset({"start", "epoch_end", "batch_size_change", "checkpoint", "resume", "exit", "signal"})
SYSTEM_KINDS = frozenset({"prolog_start", "prolog_end", "epilog_start", "epilog_end", "requeue"})
KINDS = JOB_KINDS | SYSTEM_KINDS

_JOB_ID_RE = re.compile(rf"(?:{SLURM_JOB_ID}|{LOCAL_JOB_ID})\Z")


class JobIdError(ValueError):
    """Raised by :func:`check_job_id` for ids that are not Slurm job ids."""


def is_valid_job_id(job_id: object) -> TypeGuard[str]:
    """Slurm job id (``123``, array form ``123_4``) or a local id (``local-<digits>``)."""
    return isinstance(job_id, str) and _JOB_ID_RE.match(job_id) is not None


def check_job_id(job_id: object) -> str:
    """Return ``str(job_id)`` if it is a valid job id, else raise :class:`JobIdError`."""
    s = str(job_id) if isinstance(job_id, int) and not isinstance(job_id, bool) else job_id
    if not is_valid_job_id(s):
        shown = repr(job_id)[:60]
        raise JobIdError(f"invalid job id {shown}: expected digits, digits_digits or local-digits")
    return s


REQUIRED: dict[str, tuple[str, ...]] = {
    "start": (),
    "epoch_end": ("epoch", "batch_size", "duration_s"),
    "batch_size_change": ("batch_size", "old_batch_size"),
    "checkpoint": ("path",),
    "resume": ("step",),
    "exit": ("exit_code",),
    "signal": ("signal",),
}
_MAX_KEYS = 48


@dataclass(frozen=True, repr=False)
class Event:
    """One accepted event.  ``origin`` is "job" (the job's own file) or "system" (hooks)."""

    kind: str
    job: str
    ts: float
    restart: int = 0
    v: int = SCHEMA_VERSION
    epoch: int | None = None
    step: int | None = None
    total_epochs: int | None = None
    samples_per_epoch: int | None = None
    samples: int | None = None
    batch_size: int | None = None
    old_batch_size: int | None = None
    min_batch_size: int | None = None
    max_batch_size: int | None = None
    gpus: int | None = None
    duration_s: float | None = None
    throughput: float | None = None
    throughput_bs: int | None = None
    throughput_gpus: int | None = None
    gns: float | None = None
    peak_mem_bytes: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    pid: int | None = None
    path: str | None = None
    reason: str | None = None
    host: str | None = None
    source: str | None = None
    origin: str = "job"
    line_no: int = 0

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items() if k != "v")
        return f"Event({body}, origin={self.origin!r}, line_no={self.line_no})"

    def to_dict(self) -> dict[str, Any]:
        """The wire form (schema fields only, ``None`` omitted)."""
        out: dict[str, Any] = {"v": self.v, "kind": self.kind, "job": self.job, "ts": self.ts, "restart": self.restart}
        for name in FIELD_SPECS:
            val = getattr(self, name)
            if val is not None and name not in out:
                out[name] = val
        return out


_EVENT_FIELDS = {f.name for f in fields(Event)}
assert set(FIELD_SPECS) <= _EVENT_FIELDS


def _check_field(name: str, val: object) -> str | None:
    typ, lo, hi = FIELD_SPECS[name]
    if typ == "str":
        if not isinstance(val, str):
            return f"bad_type:{name}"
        if not (lo <= len(val) <= hi) or any(ord(c) < 32 or ord(c) == 127 for c in val):
            return f"out_of_range:{name}"
        return None
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        return f"bad_type:{name}"
    if (
        typ == "int"
        and not isinstance(val, int)
        and not (isinstance(val, float) and math.isfinite(val) and val.is_integer())
    ):
        return f"bad_type:{name}"
    if isinstance(val, float) and not math.isfinite(val):
        return f"non_finite:{name}"
    if not (lo <= val <= hi):
        return f"out_of_range:{name}"
    return None


def validate(
    obj: object, expected_job: str | None = None, *, now: float | None = None, max_future_s: float = MAX_FUTURE_S
) -> tuple[Event | None, str | None]:
    """Check one decoded JSON value against schema v1.

    Returns ``(Event, None)`` if accepted, ``(None, reason)`` otherwise.  Never raises.
    Unknown extra keys are ignored (additive evolution within v1).
    """
    try:
        return _validate(obj, expected_job, now, max_future_s)
    except Exception as exc:  # noqa: BLE001  # pragma: no cover - content never crashes us
        return None, f"internal_error:{type(exc).__name__}"  # a reason: the reader records it, per job


def _validate(
    obj: object, expected_job: str | None, now: float | None, max_future_s: float
) -> tuple[Event | None, str | None]:
    if not isinstance(obj, dict):
        return None, "not_object"
    if len(obj) > _MAX_KEYS:
        return None, "too_many_keys"
    v = obj.get("v")
    if isinstance(v, bool) or v != SCHEMA_VERSION or not isinstance(v, int):
        return None, "bad_version"
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        return None, "unknown_kind"
    job = obj.get("job")
    if not is_valid_job_id(job):
        return None, "bad_job_id"
    if expected_job is not None and job != expected_job:
        return None, "job_id_mismatch"
    ts = obj.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        return None, "bad_type:ts"
    if not math.isfinite(ts):
        return None, "non_finite:ts"
    if ts < MIN_TS:
        return None, "out_of_range:ts"
    if ts > (time.time() if now is None else now) + max_future_s:
        return None, "future_timestamp"
    if "restart" not in obj:
        return None, "missing:restart"
    for name in REQUIRED.get(kind, ()):
        if obj.get(name) is None:
            return None, f"missing:{name}"
    kw: dict[str, Any] = {}
    for name in FIELD_SPECS:
        if name not in obj or obj[name] is None:
            continue
        err = _check_field(name, obj[name])
        if err:
            return None, err
        val = obj[name]
        kw[name] = int(val) if FIELD_SPECS[name][0] == "int" else val
    err = _cross_checks(kw)
    if err:
        return None, err
    return Event(kind=kind, job=job, ts=float(ts), v=SCHEMA_VERSION, **kw), None


def _cross_checks(kw: Mapping[str, Any]) -> str | None:
    lo, hi = kw.get("min_batch_size"), kw.get("max_batch_size")
    if lo is not None and hi is not None and lo > hi:
        return "inconsistent:min_max_batch_size"
    ep, tot = kw.get("epoch"), kw.get("total_epochs")
    if ep is not None and tot is not None and ep >= tot:
        return "inconsistent:epoch_ge_total_epochs"
    if kw.get("throughput") is not None and (kw.get("throughput_bs") is None or kw.get("throughput_gpus") is None):
        return "inconsistent:throughput_untagged"
    return None


def decode_line(
    raw: bytes, expected_job: str | None = None, *, now: float | None = None, max_future_s: float = MAX_FUTURE_S
) -> tuple[Event | None, str | None]:
    """Decode one line (without its newline).  Never raises."""
    if len(raw) + 1 > MAX_LINE_BYTES:
        return None, "oversized"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "bad_utf8"
    try:
        obj = json.loads(text)
    except Exception:  # noqa: BLE001  ValueError, RecursionError, ...: the reader records the reason
        return None, "bad_json"
    return validate(obj, expected_job, now=now, max_future_s=max_future_s)


def make_record(kind: str, job: str, restart: int = 0, ts: float | None = None, **fields_: Any) -> dict[str, Any]:
    """Build a wire record (dict) and validate it; raises ``ValueError`` if it is invalid."""
    rec: dict[str, Any] = {
        "v": SCHEMA_VERSION,
        "kind": kind,
        "job": job,
        "ts": round(time.time() if ts is None else ts, 6),
        "restart": restart,
    }
    for k, val in fields_.items():
        if val is None:
            continue
        if k not in FIELD_SPECS:
            raise ValueError(f"unknown event field {k!r}")
        rec[k] = val
    _, reason = validate(rec, now=rec["ts"])
    if reason:
        raise ValueError(f"invalid {kind} event: {reason}")
    return rec
