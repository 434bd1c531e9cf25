"""The one formatter of pydantic validation errors: one line per problem, naming the key and the value.

    controller.round_seconds = inf: must be a finite number (not nan or inf)
    weights.users.alice = -2: must be > 0
    controller.colour: unknown setting
    [slurm]: must be a table, got 3

Used for every input the project validates with pydantic (controller config, policy settings, job specs,
job hints, Slurm records); the solver raises plain `ValidationError`s and the caller formats them here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError


def describe(
    errors: ValidationError | Iterable[Mapping[str, Any]], prefix: tuple = (), key: Callable[[tuple], str] | None = None
) -> list[str]:
    """One line per problem.  `prefix` is prepended to every location; `key` (optional) turns a location
    into the key shown (default: the parts joined by dots)."""
    return [line(err, prefix, key) for err in _errors(errors)]


def line(err: Mapping[str, Any], prefix: tuple = (), key: Callable[[tuple], str] | None = None) -> str:
    """One problem: `key = value: message`, `key: message` when the value says nothing (an unknown or a
    missing key), `[key]: must be a table, got ...` for a whole table of the wrong type."""
    loc = (*prefix, *err.get("loc", ()))
    name = key(loc) if key else ".".join(str(p) for p in loc)
    kind, value = err.get("type", ""), err.get("input")
    if kind in ("extra_forbidden", "missing"):
        return f"{name}: {message(err)}"
    if kind == "model_type":
        return f"[{name}]: must be a table, got {show(value)}" if name else f"must be a table, got {show(value)}"
    return f"{name} = {show(value)}: {message(err)}" if name else message(err)


def message(err: Mapping[str, Any]) -> str:
    """What is wrong, in words (without the key and the value)."""
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    known = {
        "extra_forbidden": "unknown setting",
        "missing": "missing",
        "finite_number": "must be a finite number (not nan or inf)",
        "float_type": "must be a number",
        "int_type": "must be an integer",
        "int_from_float": "must be an integer",
        "string_type": "must be a string",
        "bool_type": "must be true or false",
        "dict_type": "must be a table",
        "list_type": "must be a list",
        "tuple_type": "must be a list",
        "greater_than": f"must be > {_num(ctx.get('gt'))}",
        "greater_than_equal": f"must be >= {_num(ctx.get('ge'))}",
        "less_than": f"must be < {_num(ctx.get('lt'))}",
        "less_than_equal": f"must be <= {_num(ctx.get('le'))}",
        "string_too_short": (
            "must not be empty"
            if ctx.get("min_length") == 1
            else f"must be at least {ctx.get('min_length')} characters"
        ),
        "string_too_long": f"must be at most {ctx.get('max_length')} characters",
        "string_pattern_mismatch": "must be a plain name (letters, digits, _ . -)",
        "too_short": f"must have at least {ctx.get('min_length')} item(s)",
        "too_long": f"must have at most {ctx.get('max_length')} item(s)",
        "literal_error": f"must be one of {ctx.get('expected')}",
    }
    text = known.get(kind)
    if text is None:
        text = str(err.get("msg", "invalid"))
        if text.startswith("Value error, "):
            text = text[len("Value error, ") :]
    return first_line(text)


def show(value) -> str:
    """A value as the user wrote it, at most 80 characters: a longer one keeps its start and its end (a path's file
    name) around "..."."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    text = repr(value)
    return text if len(text) <= 80 else text[:38] + "..." + text[-39:]


def first_line(e) -> str:
    """The first line of an exception's (or a text's) message."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _num(x):
    return int(x) if isinstance(x, float) and x.is_integer() and abs(x) < 1e15 else x


def _errors(errors: ValidationError | Iterable[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    return errors.errors(include_url=False) if isinstance(errors, ValidationError) else list(errors)
