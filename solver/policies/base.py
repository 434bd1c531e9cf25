"""The Policy base class: every policy describes itself, so the registry, the CLI, the report and the study
read one place and a new policy is one file in this package.

A subclass that declares its own ``name`` and ``label`` is listed by the registry (registry.py) as soon as its
class statement runs; a helper without them (TimeFractionPolicy, a test's scripted policy) is not listed, and
may reuse names freely.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel


class Policy:
    """Base class: one small class per policy.  Policies may keep state between rounds."""

    name: ClassVar[str] = "policy"  # registry key; the results' and the metrics' name
    label: ClassVar[str | None] = None  # short display name in tables, e.g. "Gavel"
    aliases: ClassVar[tuple[str, ...]] = ()  # other names it is found by (any case)
    reference_name: ClassVar[str | None] = None  # its name in the reference implementation's results
    description: ClassVar[str] = ""  # one line for the CLI help
    config_model: ClassVar[type[BaseModel] | None] = None  # its settings (pydantic v2), None: it has none
    baseline: ClassVar[bool] = False  # shown beside Shockwave in the study's tables
    order: ClassVar[int] = 100  # listings: lower first, then by name
    default: ClassVar[bool] = False  # THE default policy (simulate, the controller): one class
    moves_running_jobs: ClassVar[bool] = True  # a running job may go to other nodes (solver/nodes.py)
    # False: a model of another scheduler's own decisions (the lab's Slurm models): simulated "as the controller
    # runs it", it gets the controller's early rounds but not its preemption gate
    runs_under_controller: ClassVar[bool] = True
    # True: the round loop gives its elastic jobs (JobView.gpus_range) their counts after the gate (solver/elastic.py)
    sizes_elastic_jobs: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and cls.__dict__.get("label"):
            for attr in ("aliases", "reference_name"):  # another policy's other names are not this one's
                if attr not in cls.__dict__:
                    setattr(cls, attr, getattr(Policy, attr))
            from solver.policies.registry import register

            register(cls)

    def __init__(self, config: object = None) -> None:
        """``config``: an instance of ``config_model``, a mapping it validates, or None for its defaults."""
        if self.config_model is not None:
            if config is None:
                config = self.config_model()
            elif isinstance(config, Mapping):
                config = self.config_model.model_validate(dict(config))
        # an instance of config_model (a subclass may name it as its `config` type), else what was given
        self.config: Any = config

    def decide(
        self, view: Any
    ) -> Any:  # not annotated with solver.types: it re-exports this module (a cycle)  # pragma: no cover - interface
        """The solver.types.RoundDecision for a solver.types.ClusterView (not imported here: solver.types
        re-exports this class)."""
        raise NotImplementedError
