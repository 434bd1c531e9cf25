"""A policy's settings, validated by the model its class declares (`config_model`, solver/policies/registry.py).

From a table of a config file every unknown key and every bad value is reported, in the table's order (a typo
must not pass silently); from a file (read by loader.py; a TOML file may hold them under a `[<policy>]` table)
the model decides what an unknown key means (ShockwaveConfig ignores those of the reference's JSON files).
Problems are raised as a pydantic `ValidationError` whose locations are the keys, for validation.describe.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from slurm_shockwave.loader import load
from slurm_shockwave.validation import message

if TYPE_CHECKING:
    from solver.policies.base import Policy


def policy_class(name: str) -> type[Policy]:
    """The policy class named `name` (its name, an alias or its reference name); ValueError if none."""
    from slurm_shockwave.plugins import load_policy_plugins
    from solver.policies import policy_class as lookup

    load_policy_plugins()
    return lookup(name)


def default_name() -> str:
    """The default policy's name (the class marked ``default``, solver/policies/registry.py)."""
    from slurm_shockwave.plugins import load_policy_plugins
    from solver.policies import default_policy

    load_policy_plugins()
    return default_policy().name


def settings_model(name: str) -> type[BaseModel] | None:
    """The model of the named policy's settings; None: the policy has none."""
    return policy_class(name).config_model


def from_table(name: str, table: Mapping[str, Any]) -> BaseModel:
    """The settings in `table` (the policy must have settings)."""
    model = settings_model(name)
    assert model is not None, f"the {name} policy has no settings"
    known = {f.alias or key for key, f in model.model_fields.items()}
    order: dict[Any, int] = {key: i for i, key in enumerate(table)}
    errors: list[dict[str, Any]] = [
        {"type": "extra_forbidden", "loc": (key,), "input": value} for key, value in table.items() if key not in known
    ]
    try:
        settings = model.model_validate({k: v for k, v in table.items() if k in known})
    except ValidationError as e:
        errors += [rewrap(err) for err in e.errors(include_url=False)]
    if errors:
        errors.sort(key=lambda err: order.get(err["loc"][0] if err["loc"] else None, len(order)))
        raise ValidationError.from_exception_data(model.__name__, cast("list[InitErrorDetails]", errors))
    return settings


def from_file(name: str, path: str | Path) -> BaseModel:
    """The settings in a file (InputFileError when it cannot be read, ValidationError when they are invalid)."""
    data = load(path)
    cls = policy_class(name)
    if isinstance(data, dict):
        table = next((data[k] for k in (cls.name, *cls.aliases) if isinstance(data.get(k), dict)), None)
        data = data if table is None else table
    model = settings_model(name)
    assert model is not None, f"the {name} policy has no settings"
    return model.model_validate(data)


def custom(loc: tuple[Any, ...], value: Any, text: str) -> dict[str, Any]:
    """An error of our own at `loc`, for ValidationError.from_exception_data."""
    return {"type": PydanticCustomError("invalid", "{why}", {"why": text}), "loc": loc, "input": value}


def rewrap(err: Mapping[str, Any], loc: tuple[Any, ...] | None = None) -> dict[str, Any]:
    """A reported error, ready to be raised again (at `loc`, default: where it was)."""
    loc = tuple(err.get("loc", ())) if loc is None else loc
    if err.get("type") in ("extra_forbidden", "missing"):
        return {"type": err["type"], "loc": loc, "input": err.get("input")}
    return custom(loc, err.get("input"), message(err))


#: the reference's own Shockwave configurations (data/LICENSE.shockwave), by file name
BUNDLED_CONFIGS = Path(__file__).resolve().parent / "data" / "configs"


def resolve(ref: str, bundled: Path = BUNDLED_CONFIGS) -> Path:
    """A settings file named in a config: a path, else the name of a bundled file."""
    path = Path(ref)
    return path if path.is_absolute() or path.exists() else bundled / path
