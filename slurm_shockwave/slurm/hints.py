"""THE marker rule and the strict hint validator for `--comment="shockwave epochs=30 bs=32 ..."`.

One rule, shared by the controller (slurm/backend.py) and the prolog/epilog hook
(prolog_epilog/shockwave_hook.py, which loads this file by path and uses only `is_marked`: the module-level
code is standard library only; pydantic and the package's error wording are imported when hints are parsed):

* `is_marked(comment, marker)`: the comment, leading whitespace ignored, starts with the marker
  (case-insensitive), followed by its end, any whitespace (a newline too) or one of ``:;,``.
  ``"shockwave epochs=3"``, ``"Shockwave\\nepochs=3"``, ``"shockwave,epochs=3"`` are marked;
  ``"shockwaves"``, ``"not shockwave"`` are not.
* `parse_hints(comment, marker, max_gpus=None)`: the ``key=value`` hints after the marker, validated
  strictly (ASCII digits only: ``"²".isdigit()`` is true in Python; bounds below; no unknown keys, no
  repeated keys, ``min_bs <= bs <= max_bs``).  Invalid hints raise `HintError` with one line naming the
  key and the value; the controller then quarantines the job (leaves it to Slurm), it never fails.

Keys: ``epochs`` 1..10^6, ``bs``/``min_bs``/``max_bs`` 1..2^24, ``samples`` 1..10^12 (samples per epoch),
``epoch_s`` (seconds per epoch at ``bs``) 10^-3..10^7 (a positive but subnormal value such as 1e-320 would make
the job's throughput infinite), ``gpus`` 1..the partition's GPUs, or a range ``gpus=MIN-MAX`` (1 <= MIN <= MAX <=
the partition's GPUs; `check_gpus_range`: the job's own GPU count within it): the counts the controller may run the
job on (an elastic job, resized through checkpoint and requeue, its global batch kept; without a range a job's
GPU count is never changed), ``speedup=2x1.9/4x3.5/8x6.2`` an elastic job's profile: its throughput on each listed
count as a multiple of its throughput on its own count (at most 16 counts, each 1..the partition's GPUs, factors
10^-3..10^4; until the job has run on a count and reported it, the controller's only knowledge of that count beside
its ``elastic_speedup_exponent``, resize.py), ``speed=v100x1/k80x0.3`` the job's relative speed on each GPU type it
lists (at most 16 types, each once, factors 10^-3..10^4; on a cluster of several types, until it has run on two of
them, what the controller knows of its speed there beside the site's ``gpu_type_speeds``: slurm/type_speeds.py),
``signal`` the job's checkpoint signal as in
``sbatch --signal``: ``signal=USR2`` (to the job's steps, its srun tasks), ``signal=B:USR1`` (to the batch shell only;
a ``@time`` is ignored), read by `checkpoint_signal`.
"""

from __future__ import annotations

import re
import signal as _signal

SEPARATORS = ":;,"
MAX_EPOCHS = 10**6
MAX_BATCH = 2**24
MAX_SAMPLES = 10**12
MIN_EPOCH_S = 1e-3
MAX_EPOCH_S = 1e7
INT_KEYS = ("epochs", "bs", "min_bs", "max_bs", "samples", "gpus")
FLOAT_KEYS = ("epoch_s",)
_ASCII_INT = re.compile(r"[0-9]{1,15}\Z", re.ASCII)
_ASCII_RANGE = re.compile(r"([0-9]{1,15})-([0-9]{1,15})\Z", re.ASCII)
_SPEEDUP_ITEM = re.compile(r"([0-9]{1,6})x([0-9]{1,6}(?:\.[0-9]{0,9})?)\Z", re.ASCII)
#: ``TYPExFACTOR``: a GPU type's name (slurm/gpu_types.py's rule, an ``x`` in it too) and the last ``x`` before a factor
_SPEED_ITEM = re.compile(r"([A-Za-z0-9_.-]{1,64})x([0-9]{1,6}(?:\.[0-9]{0,9})?)\Z", re.ASCII)
MAX_SPEEDUP_COUNTS = 16
SPEEDUP_FACTORS = (1e-3, 1e4)
_ASCII_FLOAT = re.compile(r"(?:[0-9]{1,15}(?:\.[0-9]{0,15})?|\.[0-9]{1,15})(?:[eE][+-]?[0-9]{1,3})?\Z", re.ASCII)
_SPLIT = re.compile(r"[\s:;,]+")
#: ``signal=B:USR1`` holds a separator: its flags are joined to the name before the comment is split
_SIGNAL_FLAGS = re.compile(r"(?i)(?<![^\s:;,])signal=([RB]{1,2}):")
_SIGNAL = re.compile(r"(?i)([RB]{1,2}[:/])?(?:SIG)?([A-Z0-9]{1,12})(?:@[0-9]{1,9})?\Z")
#: signals that would kill or freeze a job instead of asking it to checkpoint: never sent as a checkpoint signal
#: (the rule of controller/config.py's `preempt_signal`, which may not import this package: tests keep them equal)
KILLING_SIGNALS = frozenset({"KILL", "STOP", "SEGV", "BUS", "ILL", "FPE", "ABRT", "TRAP", "SYS"})


def signal_value(text) -> str | None:
    """A ``--signal`` value (``[R][B]:NAME|NUMBER[@time]``) as ``B:NAME`` (the batch shell) or ``NAME`` (the job's
    steps); None when it names no signal."""
    m = _SIGNAL.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    flags, name = (m.group(1) or "").upper(), m.group(2).upper()
    try:
        name = _signal.Signals(int(name)).name[3:] if name.isdigit() else _signal.Signals["SIG" + name].name[3:]
    except (KeyError, ValueError):
        return None
    return f"B:{name}" if "B" in flags else name


def checkpoint_signal(declared: str | None, default: str) -> tuple[str, str | None]:
    """(what the controller sends: ``B:NAME`` or ``NAME``, a note for `status` or None): the job's declared signal
    (`signal_value` form), else the configured one (``default``, a name) to the batch shell; a declared signal that
    would kill the job (`KILLING_SIGNALS`) is refused for the configured one, and the note says so."""
    fallback = default if default.startswith("B:") else f"B:{default}"
    if not declared:
        return fallback, None
    if declared.rpartition(":")[2] in KILLING_SIGNALS:
        return fallback, f"its checkpoint signal {declared} would kill it, not checkpoint it: it is sent {fallback}"
    return declared, None


class HintError(ValueError):
    """Invalid hints in a job's comment (one line)."""


def _rest_after_marker(comment, marker: str):
    """The text after the marker, or None when the comment is not marked."""
    if not isinstance(comment, str) or not isinstance(marker, str) or not marker.strip():
        return None
    text = comment.lstrip()
    m = marker.strip()
    if len(text) < len(m) or text[: len(m)].casefold() != m.casefold():
        return None
    rest = text[len(m) :]
    if rest and not (rest[0].isspace() or rest[0] in SEPARATORS):
        return None
    return rest


def is_marked(comment, marker: str) -> bool:
    """Does this job comment carry the marker? (the one rule of the controller and the hook)"""
    return _rest_after_marker(comment, marker) is not None


def _short(value: str, n: int = 24) -> str:
    return repr(value if len(value) <= n else value[:n] + "...")


_MODEL = None


def _model():
    """The pydantic model, built on first use (keeps this module importable without pydantic)."""
    global _MODEL
    if _MODEL is None:
        from pydantic import BaseModel, ConfigDict, Field, model_validator

        class Hints(BaseModel):
            model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)
            epochs: int | None = Field(None, ge=1, le=MAX_EPOCHS)
            bs: int | None = Field(None, ge=1, le=MAX_BATCH)
            min_bs: int | None = Field(None, ge=1, le=MAX_BATCH)
            max_bs: int | None = Field(None, ge=1, le=MAX_BATCH)
            samples: int | None = Field(None, ge=1, le=MAX_SAMPLES)
            epoch_s: float | None = Field(None, ge=MIN_EPOCH_S, le=MAX_EPOCH_S)
            gpus: int | None = Field(None, ge=1)
            gpus_range: tuple[int, int] | None = None  # ``gpus=MIN-MAX``
            speedup: tuple[tuple[int, float], ...] | None = None  # ``speedup=2x1.9/4x3.5``: (count, factor)
            speed: tuple[tuple[str, float], ...] | None = None  # ``speed=v100x1/k80x0.3``: (GPU type, factor)
            signal: str | None = None

            @model_validator(mode="after")
            def _order(self):
                lo, bs, hi = self.min_bs, self.bs, self.max_bs
                if lo is not None and hi is not None and lo > hi:
                    raise ValueError(f"min_bs={lo} is above max_bs={hi}")
                if bs is not None and lo is not None and bs < lo:
                    raise ValueError(f"bs={bs} is below min_bs={lo}")
                if bs is not None and hi is not None and bs > hi:
                    raise ValueError(f"bs={bs} is above max_bs={hi}")
                if self.gpus_range is not None and not 1 <= self.gpus_range[0] <= self.gpus_range[1]:
                    raise ValueError("gpus={}-{}: not 1 <= MIN <= MAX".format(*self.gpus_range))
                return self

            def as_dict(self) -> dict:
                return {k: v for k, v in self.model_dump().items() if v is not None}

        _MODEL = Hints
    return _MODEL


def parse_hints(comment, marker: str, max_gpus: int | None = None):
    """The validated hints of a marked comment (a frozen pydantic model; `.as_dict()` gives the set keys),
    None when the comment is not marked.  Raises HintError (one line) on any invalid hint."""
    rest = _rest_after_marker(comment, marker)
    if rest is None:
        return None
    values: dict = {}
    for token in _SPLIT.split(_SIGNAL_FLAGS.sub(r"signal=\1/", rest)):
        if not token:
            continue
        key, eq, value = token.partition("=")
        if not eq:
            raise HintError(f"hint {_short(token)} is not key=value")
        if key == "signal":
            if key in values:
                raise HintError("hint signal given twice")
            values[key] = signal_value(value)
            if values[key] is None:
                raise HintError(f"hint signal={_short(value.replace('/', ':'))}: not a signal such as USR2 or B:USR1")
            continue
        if key == "gpus" and (rng := _ASCII_RANGE.match(value)):
            if "gpus" in values or "gpus_range" in values:
                raise HintError("hint gpus given twice")
            values["gpus_range"] = (int(rng.group(1)), int(rng.group(2)))
            continue
        if key in ("speedup", "speed"):
            if key in values:
                raise HintError(f"hint {key} given twice")
            values[key] = _speedup(value) if key == "speedup" else _speed(value)
            continue
        if key in INT_KEYS:
            if not _ASCII_INT.match(value):
                raise HintError(f"hint {key}={_short(value)}: not a whole number in ASCII digits")
            number: float = int(value)
        elif key in FLOAT_KEYS:
            if not _ASCII_FLOAT.match(value):
                raise HintError(f"hint {key}={_short(value)}: not a number in ASCII digits")
            number = float(value)
        else:
            known = ", ".join((*INT_KEYS, *FLOAT_KEYS, "speedup", "speed", "signal"))
            raise HintError(f"unknown hint {_short(key)} (known: {known})")
        if key in values or (key == "gpus" and "gpus_range" in values):
            raise HintError(f"hint {key} given twice")
        values[key] = number
    from pydantic import ValidationError

    from slurm_shockwave.validation import describe

    try:
        hints = _model()(**values)
    except ValidationError as e:
        first = describe(e)[0]
        raise HintError(f"hint {first}" if e.errors()[0].get("loc") else f"hints: {first}") from None
    if max_gpus is not None and hints.gpus is not None and hints.gpus > max_gpus:
        raise HintError(f"hint gpus={hints.gpus}: the partition has {max_gpus} GPU(s)")
    if max_gpus is not None and hints.gpus_range is not None and hints.gpus_range[1] > max_gpus:
        raise HintError("hint gpus={}-{}: the partition has {} GPU(s)".format(*hints.gpus_range, max_gpus))
    if max_gpus is not None and hints.speedup and hints.speedup[-1][0] > max_gpus:
        raise HintError(f"hint speedup: {hints.speedup[-1][0]} GPUs, the partition has {max_gpus}")
    return hints


def _speedup(value: str) -> tuple[tuple[int, float], ...]:
    """``2x1.9/4x3.5`` -> ((2, 1.9), (4, 3.5)), each count once, 1 <= count, factors within SPEEDUP_FACTORS."""
    out = {int(n): f for n, f in _factors("speedup", value, _SPEEDUP_ITEM, "COUNT").items()}
    if min(out) < 1 or len(out) < len(value.split("/")):
        raise HintError(f"hint speedup={_short(value)}: each count >= 1, once")
    return tuple(sorted(out.items()))


def _speed(value: str) -> tuple[tuple[str, float], ...]:
    """``v100x1/k80x0.3`` -> (('k80', 0.3), ('v100', 1.0)), each type once, factors within SPEEDUP_FACTORS."""
    return tuple(sorted(_factors("speed", value, _SPEED_ITEM, "TYPE").items()))


def _factors(key: str, value: str, pattern, what: str) -> dict[str, float]:
    """{item: factor} of ``AxF/BxG`` (1 to MAX_SPEEDUP_COUNTS items, each once, factors within SPEEDUP_FACTORS)."""
    items = value.split("/")
    if not 1 <= len(items) <= MAX_SPEEDUP_COUNTS:
        raise HintError(f"hint {key}={_short(value)}: 1 to {MAX_SPEEDUP_COUNTS} items {what}xFACTOR joined by /")
    out: dict[str, float] = {}
    for item in items:
        m = pattern.match(item)
        if m is None:
            raise HintError(f"hint {key}={_short(value)}: {_short(item, 12)} is not {what}xFACTOR in ASCII")
        name, factor = m.group(1), float(m.group(2))
        if name in out or not SPEEDUP_FACTORS[0] <= factor <= SPEEDUP_FACTORS[1]:
            raise HintError(
                f"hint {key}={_short(value)}: {_short(item, 12)} (each {what.lower()} once, a factor "
                f"{SPEEDUP_FACTORS[0]:g}..{SPEEDUP_FACTORS[1]:g})"
            )
        out[name] = factor
    return out


def check_gpus_range(gpus_range, job_gpus: int, submitit: bool = False) -> None:
    """HintError unless the job's own GPU count (its request, or the count the controller gave it, always within its
    range) lies within its declared ``gpus=MIN-MAX`` (no range: nothing to check), and it is not a submitit job
    (submitit writes its task count into its own script: a new GPU count would not reach its tasks)."""
    if gpus_range is not None and submitit:
        raise HintError("hint gpus={}-{}: a submitit job cannot change its GPU count".format(*gpus_range))
    if gpus_range is not None and not gpus_range[0] <= job_gpus <= gpus_range[1]:
        raise HintError("hint gpus={}-{}: the job asks for {} GPU(s), outside its range".format(*gpus_range, job_gpus))
