"""Shockwave's hyperparameters, validated with pydantic v2 (strict types, no NaN/inf, bounds; a plain
ValidationError, worded by the caller).  Files of them are read by slurm_shockwave (policy_settings.py).

JSON/TOML keys are the attribute names, except ``lambda`` (attribute ``lambda_``).  Unknown keys (the reference
configs' ``gpu_ram``, ``log_approximation_bases``, ``_comment``...) are ignored.

Settings that scale with the cluster:
* ``k_norm``: the makespan term's weight in *nats of welfare per round of predicted time left*, i.e. the
  program uses ``k = k_norm / (N * W * round_length)`` so that one round of makespan is worth the same against
  one job-round of welfare whatever the number of jobs N, the window W and the round length (with the
  reference's absolute ``k`` the makespan term grows N times stronger against each job's welfare as the
  cluster grows).  When ``k_norm`` is None the reference's absolute ``k`` is used as given; a config that sets
  ``k`` and not ``k_norm`` (every reference config) means ``k_norm = None``.
* ``starvation_rounds``: a job that has not run for this many rounds runs next (the no-starvation guard,
  docs/performance.md); None = twice the window, ``2 * future_rounds`` (B = W cost 2-7% makespan on a
  generated 100-job trace and on the 120-job one; 2W keeps the guarantee at 80 min with 120 s rounds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PosInt = Annotated[int, Field(ge=1)]


class ShockwaveConfig(BaseModel):
    model_config = ConfigDict(
        strict=True, allow_inf_nan=False, validate_assignment=True, extra="ignore", populate_by_name=True, frozen=False
    )

    future_rounds: int = Field(20, ge=1, le=1000)
    k: float = Field(1e-3, ge=0.0, le=1e12)
    k_norm: float | None = Field(100.0, ge=0.0, le=1e12)
    lambda_: float = Field(25.0, ge=0.0, le=1000.0, alias="lambda")
    rhomax: float = Field(1.0, gt=0.0, le=100.0)
    reopt_rounds: int = Field(8, ge=1, le=1000)
    starvation_rounds: PosInt | None = Field(None, le=100000)
    solver: Literal["highs", "gurobi"] = "highs"
    solver_timeout: float = Field(15.0, gt=0.0, le=86400.0)
    solver_rel_gap: float = Field(1e-3, ge=0.0, le=1.0)
    solver_num_threads: PosInt | None = Field(None, le=4096)
    # None: exact log at every integer round count; a list: the reference's piecewise-linear log through
    # these bases (JSON key "log_bases"; the reference configs' "log_approximation_bases" is not applied).
    log_bases: tuple[float, ...] | None = None

    @field_validator("solver", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.lower() if isinstance(v, str) else v

    @field_validator("log_bases", mode="before")
    @classmethod
    def _bases_in(cls, v: object) -> object:
        return tuple(v) if isinstance(v, list) else v

    @field_validator("log_bases")
    @classmethod
    def _bases(cls, v: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if v is None:
            return v
        b = sorted(float(x) for x in v)
        if len(b) < 2 or b[0] != 0.0 or b[-1] != 1.0 or len(set(b)) != len(b):
            raise ValueError("must be distinct numbers in [0, 1] including 0 and 1")
        return tuple(b)

    @model_validator(mode="before")
    @classmethod
    def _absolute_k(cls, data: object) -> object:
        """An explicit absolute k (the reference's configs) is used as given: it means k_norm = None.  (Every way
        in, constructor or model_validate; a pydantic ValidationError is worded by the caller.)"""
        if isinstance(data, Mapping) and "k" in data and "k_norm" not in data:
            data = {**data, "k_norm": None}
        return data

    @property
    def starvation_bound_rounds(self) -> int:
        return int(self.starvation_rounds or 2 * self.future_rounds)

    def validate(self) -> None:  # type: ignore[override]  # an instance check, not pydantic's deprecated classmethod
        """Re-check every field (values are also checked on assignment)."""
        ShockwaveConfig(**self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping[Any, Any]) -> ShockwaveConfig:
        if not isinstance(d, Mapping):
            raise ValueError("shockwave config: must be a JSON object")
        names = set(cls.model_fields) | {"lambda"}
        kw = {key: val for key, val in d.items() if key in names and key != "lambda_"}
        return cls(**kw)

    def to_dict(self) -> dict[Any, Any]:
        d = self.model_dump()
        d["lambda"] = d.pop("lambda_")
        if d["log_bases"] is not None:
            d["log_bases"] = list(d["log_bases"])
        return d
