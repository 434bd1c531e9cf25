"""docs/config.example.toml, written from the models of config.py: every table and setting, at its default,
with its description, bounds and whether a change needs a restart (`shockwave controller example-config`)."""

from __future__ import annotations

import json
import re
import textwrap
import typing
from typing import Any, cast

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from slurm_shockwave.controller.config import RESTART, SECTIONS, ControllerConfig, PolicySection

HEADER = """\
# /etc/shockwave/config.toml: the Shockwave controller's configuration.
# Written by `shockwave controller example-config` from slurm_shockwave/controller/config.py: every setting at
# its default; a commented-out setting is unset by default (its line shows an example).
# Validated at start and on SIGHUP (strict types: a string is never a number, nan/inf are refused, every bound
# is checked); every problem is printed on its own line naming the key and the value, exit status 2.
#   shockwave controller check --config /etc/shockwave/config.toml
# checks the file AND the world it runs in (partition and its GPUs, slurm.conf settings, event store, state
# directory, SLURM_CONF, Slurm reachable); `--syntax-only` checks just the file.
# `systemctl reload shockwave-controller` (SIGHUP) applies a changed file at the next round; the settings marked
# (restart) keep their running value until the controller is restarted.
"""
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")


def example_toml() -> str:
    """The text of docs/config.example.toml."""
    fields = ControllerConfig.model_fields
    out = [HEADER.rstrip("\n")]
    out += _table("controller", ControllerConfig, {k: f for k, f in fields.items() if k not in SECTIONS})
    for name in SECTIONS[1:]:
        model = cast("type[BaseModel]", fields[name].annotation)  # SECTIONS: the fields holding a model
        out += _table(name, model, model.model_fields)
        if model is PolicySection:
            out += _policy_settings(PolicySection.model_fields["name"].get_default(call_default_factory=True))
    return "\n".join(out) + "\n"


def _table(name: str, model: type[BaseModel], fields: dict[str, FieldInfo]) -> list[str]:
    out = ["", f"[{name}]", *_comment(_first_line(model.__doc__))]
    for key, f in fields.items():
        default = f.get_default(call_default_factory=True)
        out += _comment(
            "; ".join(x for x in (f.description, _bounds(f), _example(f, default)) if x)
            + (" (restart)" if f.json_schema_extra == RESTART else "")
        )
        out.append(_setting(key, default, f.examples))
    return out


def _policy_settings(name: str) -> list[str]:
    """The default policy's settings, commented out: the [policy.<name>] table instead of policy.config."""
    from slurm_shockwave.policy_settings import policy_class

    model = policy_class(name).config_model
    if model is None:
        return []
    out = ["", f"# [policy.{name}]", f"# the {name} policy's settings (instead of policy.config), at their defaults"]
    for key, f in model.model_fields.items():
        default = f.get_default(call_default_factory=True)
        out += _comment(f.description or "")
        line = _setting(f.alias or key, default)
        out.append(line if line.startswith("#") else "# " + line)
    return out


def _setting(key: str, default: object, examples: list[Any] | None = None) -> str:
    """`key = default`; an unset setting commented out, with an example value if there is one."""
    if default is not None:
        return f"{key} = {_toml(default)}"
    return f"# {key} = {_toml(examples[0])}" if examples else f"# {key}: not set"


def _bounds(f: FieldInfo) -> str:
    """`> 0, <= 86400`; for a table of numbers `each > 0, <= 1000000`."""
    meta = list(f.metadata)
    each = ""
    if typing.get_origin(f.annotation) is dict:
        value_type = typing.get_args(f.annotation)[1]
        meta = [m for info in typing.get_args(value_type)[1:] if isinstance(info, FieldInfo) for m in info.metadata]
        each = "each "
    ops = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
    parts = [f"{op} {_num(getattr(m, attr))}" for m in meta for attr, op in ops if hasattr(m, attr)]
    return each + ", ".join(parts) if parts else ""


def _example(f: FieldInfo, default: object) -> str:
    return f"e.g. {_toml(f.examples[0])}" if f.examples and default is not None else ""


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        items = ", ".join(f"{k if _BARE_KEY.match(k) else json.dumps(k)} = {_toml(v)}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def _num(x: object) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def _comment(text: str) -> list[str]:
    return ["# " + part for part in textwrap.wrap(text, 110, break_on_hyphens=False)]


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if doc else ""
