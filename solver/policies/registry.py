"""Every policy by name.  Classes register themselves (Policy.__init_subclass__) when their module is
imported; the first look-up imports every module of this package, so that a new policy is one file here and
nothing else names it.  (A third-party package's policies register the same way when imported: the running
code imports them from the ``slurm_shockwave.policies`` entry points, slurm_shockwave/plugins.py; solver/
reads no package metadata itself.)
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

# Policy subclasses, typed type[Any]: base.py imports this module, so importing Policy here would be a cycle
PolicyClass = type[Any]

_classes: dict[str, PolicyClass] = {}  # name (lower case) -> Policy subclass
_discovered = False


def _keys(cls: PolicyClass) -> list[str]:
    """Every name a class is found by: its name, aliases and reference name, in lower case."""
    return [k.lower() for k in (cls.name, *cls.aliases, cls.reference_name) if k]


def register(cls: PolicyClass) -> None:
    """List a policy class.  Its names must not clash with another class's (a re-imported module replaces
    its own classes)."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    taken = {k: c for c in _classes.values() if f"{c.__module__}.{c.__qualname__}" != where for k in _keys(c)}
    for key in _keys(cls):
        if key in taken:
            other = taken[key]
            raise TypeError(
                f"policy {cls.name!r} ({where}): the name {key!r} is taken by {other.__module__}.{other.__qualname__}"
            )
    for key in [k for k, c in _classes.items() if f"{c.__module__}.{c.__qualname__}" == where]:
        del _classes[key]
    _classes[cls.name.lower()] = cls


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True  # before importing: a module that lists the policies on import must not recurse
    try:
        package = importlib.import_module(__package__)
        for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)
    except BaseException:
        _discovered = False
        raise


def all_policies() -> list[PolicyClass]:
    """Every listed policy class, Shockwave first, then the baselines, then the others (by ``order``, name)."""
    _discover()
    return sorted(_classes.values(), key=lambda c: (c.order, c.name))


def default_policy() -> PolicyClass:
    """The one class marked ``default = True`` (the controller's and `simulate`'s policy unless told)."""
    found = [c for c in all_policies() if c.default]
    if len(found) != 1:
        raise RuntimeError(f"exactly one policy must be the default, found {[c.name for c in found]}")
    return found[0]


def policy_names() -> list[str]:
    return [c.name for c in all_policies()]


def policy_class(name: str) -> PolicyClass:
    """The class named ``name``: its name, an alias or its reference name, in any case."""
    key = str(name).lower()
    for cls in all_policies():
        if key in _keys(cls):
            return cls
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(policy_names())}")


def make_policy(name: str, config: Mapping[str, Any] | BaseModel | None = None) -> Any:
    """A new policy: ``config`` is None (its defaults), an instance of its ``config_model``, or a mapping
    validated with ``config_model.model_validate``."""
    cls = policy_class(name)
    model = cls.config_model
    if config is None:
        return cls()
    if model is None:
        raise ValueError(f"policy {cls.name!r} has no settings, got {type(config).__name__} {config!r}")
    if isinstance(config, Mapping):
        config = model.model_validate(dict(config))  # a pydantic ValidationError: the caller words it
    elif not isinstance(config, model):
        raise ValueError(f"policy {cls.name!r} takes a {model.__name__}, got {type(config).__name__}")
    return cls(config)
