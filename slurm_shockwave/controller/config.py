"""The controller's configuration file (TOML), validated at start and on SIGHUP: one line per problem.

Example (docs/config.example.toml is the full, commented reference):

    [controller]
    round_seconds = 120            # length of a round
    mode = "advisory"              # advisory | authoritative
    partition = "gpu"              # the partition whose GPUs Shockwave plans
    managed_by = "comment"         # comment: jobs whose --comment starts with `marker`; partition: all jobs
    marker = "shockwave"
    state_dir = "/var/lib/shockwave"
    event_store = "/var/lib/shockwave/events"
    grace_seconds = 60             # authoritative: signal, then requeuehold after this long
    min_run_seconds = 120          # a (re)started job is not preempted before this (default: one round)
    preempt_signal = "USR1"
    site_factor = 1000000          # SiteFactor of planned jobs (deferred ones get 0)
    metrics_port = 9108            # Prometheus; 0 = off
    metrics_address = "127.0.0.1"  # where the metrics endpoint listens
    slurm_timeout = 30

    [policy]
    name = "shockwave"             # or a baseline
    config = "tacc_32gpus.json"    # Shockwave hyperparameters (a file), or a [policy.shockwave] table

    [weights]                      # market budgets: per user and per account (multiplied)
    users = { alice = 2.0 }
    accounts = { physics = 1.5 }

    [slurm]
    bin_dir = "/usr/bin"           # where squeue, scontrol, ... live (default: $PATH)
    env = { SLURM_CONF = "/etc/slurm/slurm.conf" }

Validation is pydantic v2 in strict mode: a string is never a number, a number is never a bool, nan and
inf are refused, every bound is checked.  Every problem of one file is reported in one run, each on its
own line naming the key and the offending value (`ConfigError.problems`); the CLI exits 2 on any.
"""
from __future__ import annotations

import ipaddress
import math
import signal
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MODES = ("advisory", "authoritative")
MANAGED_BY = ("comment", "partition")
#: signals that would kill or freeze a job instead of asking it to checkpoint
_FORBIDDEN_SIGNALS = {"KILL", "STOP", "SEGV", "BUS", "ILL", "FPE", "ABRT", "TRAP", "SYS"}
#: keys whose change needs a restart (SIGHUP keeps the running value and says so)
RESTART_ONLY = ("backend", "state_dir", "event_store", "metrics_port", "metrics_address")


class ConfigError(ValueError):
    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


# ---------------------------------------------------------------------- the schema (pydantic, strict)
class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


def _text(value: str, what: str = "must not be empty") -> str:
    if not value.strip():
        raise ValueError(what)
    if any(c in value for c in "\0\n\r"):
        raise ValueError("must not contain a newline or NUL")
    return value


class ControllerSection(_Strict):
    backend: str = Field("slurm", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$")
    round_seconds: float = Field(120.0, gt=0, le=86400)
    mode: Literal["advisory", "authoritative"] = "advisory"
    partition: str = Field("gpu", min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$")
    managed_by: Literal["comment", "partition"] = "comment"
    marker: str = Field("shockwave", min_length=1, max_length=100)
    state_dir: str = Field("/var/lib/shockwave", max_length=4096)
    event_store: str = Field("/var/lib/shockwave/events", max_length=4096)
    grace_seconds: float = Field(60.0, ge=0, le=86400)
    min_run_seconds: float | None = Field(None, ge=0, le=7 * 86400)
    preempt_signal: str = "USR1"
    site_factor: int = Field(1_000_000, ge=1, le=2147483645)
    metrics_port: int = Field(0, ge=0, le=65535)
    metrics_address: str = "127.0.0.1"
    slurm_timeout: float = Field(30.0, gt=0, le=3600)
    dry_run: bool = False
    poll_seconds: float | None = Field(None, gt=0, le=3600)
    min_round_seconds: float | None = Field(None, gt=0, le=86400)

    @field_validator("marker")
    @classmethod
    def _marker(cls, v: str) -> str:
        _text(v)
        if v != v.strip():
            raise ValueError("must not start or end with whitespace")
        return v

    @field_validator("state_dir", "event_store")
    @classmethod
    def _path(cls, v: str) -> str:
        return _text(v, "must be a directory path, not empty")

    @field_validator("preempt_signal")
    @classmethod
    def _signal(cls, v: str) -> str:
        name = v.strip().upper()
        name = name[3:] if name.startswith("SIG") else name
        known = {s.name[3:] for s in signal.Signals if s.name.startswith("SIG") and not s.name.startswith("SIG_")}
        if name not in known:
            raise ValueError("must be a signal name such as USR1, USR2, TERM or INT")
        if name in _FORBIDDEN_SIGNALS:
            raise ValueError("must be a signal a job can catch to checkpoint (USR1, USR2, TERM, INT, ...)")
        return name

    @field_validator("metrics_address")
    @classmethod
    def _address(cls, v: str) -> str:
        if v == "localhost":
            return v
        try:
            ipaddress.ip_address(v)
        except ValueError:
            raise ValueError("must be an IP address such as 127.0.0.1, :: or 0.0.0.0") from None
        return v


class PolicySection(_Strict):
    name: str = Field("shockwave", min_length=1)
    config: str | None = Field(None, min_length=1)
    shockwave: dict | None = None


Weight = Annotated[float, Field(gt=0, le=1e6)]


class WeightsSection(_Strict):
    users: dict[str, Weight] = {}
    accounts: dict[str, Weight] = {}


class SlurmSection(_Strict):
    bin_dir: str | None = Field(None, min_length=1)
    env: dict[str, str] = {}


_SECTIONS = {"controller": ControllerSection, "policy": PolicySection, "weights": WeightsSection,
             "slurm": SlurmSection}


# ---------------------------------------------------------------------- what the rest of the code uses
@dataclass
class ControllerConfig:
    backend: str = "slurm"                   # the cluster backend (entry point of slurm_shockwave.backends)
    round_seconds: float = 120.0
    mode: str = "advisory"
    partition: str = "gpu"
    managed_by: str = "comment"
    marker: str = "shockwave"
    state_dir: str = "/var/lib/shockwave"
    event_store: str = "/var/lib/shockwave/events"
    grace_seconds: float = 60.0
    min_run_seconds: float | None = None     # a job runs at least this long before it is preempted (None: a round)
    preempt_signal: str = "USR1"
    site_factor: int = 1_000_000
    metrics_port: int = 0
    metrics_address: str = "127.0.0.1"
    slurm_timeout: float = 30.0
    dry_run: bool = False
    poll_seconds: float | None = None        # squeue poll while waiting for the round (None: min(5, round/4))
    min_round_seconds: float | None = None   # minimum gap before an early round (None: min(round, 5))
    policy: str = "shockwave"
    policy_config: dict = field(default_factory=dict)
    user_weights: dict = field(default_factory=dict)
    account_weights: dict = field(default_factory=dict)
    slurm_env: dict = field(default_factory=dict)
    slurm_bin_dir: str | None = None
    source: str = "<defaults>"

    def weight(self, user: str, account: str) -> float:
        return float(self.user_weights.get(user, 1.0)) * float(self.account_weights.get(account, 1.0))

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir) / "state.sqlite"

    def update_from(self, other: "ControllerConfig", keep=()) -> list[str]:
        """Copy every setting of `other` into this object (in place), except `keep`; the names that changed."""
        changed = []
        for f in fields(self):
            if f.name in keep or f.name == "source":
                continue
            new = getattr(other, f.name)
            if getattr(self, f.name) != new:
                changed.append(f.name)
                setattr(self, f.name, new)
        self.source = other.source
        return changed


def load_config(path) -> ControllerConfig:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError([f"{path}: file not found"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{path}: is a directory, not a config file"]) from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError([f"{path}: {e}"]) from None
    return config_from_dict(data, str(path))


def config_from_dict(data: dict, source: str = "<dict>") -> ControllerConfig:
    """Validate every section on its own, so that one run reports every problem of the file."""
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: must be a table of settings, got {_show(data)}"])
    for name in data:
        if name not in _SECTIONS:
            problems.append(f"{source}: [{name}]: unknown section (known: {', '.join(sorted(_SECTIONS))})")
    parsed = {}
    for name, model in _SECTIONS.items():
        try:
            parsed[name] = model.model_validate(data.get(name, {}))
        except ValidationError as e:
            problems += [f"{source}: {line}" for line in describe(e.errors(), prefix=(name,))]
    cfg = ControllerConfig(source=source)
    if "controller" in parsed:
        for name in ControllerSection.model_fields:
            setattr(cfg, name, getattr(parsed["controller"], name))
    if "weights" in parsed:
        cfg.user_weights = dict(parsed["weights"].users)
        cfg.account_weights = dict(parsed["weights"].accounts)
    if "slurm" in parsed:
        cfg.slurm_env = dict(parsed["slurm"].env)
        cfg.slurm_bin_dir = parsed["slurm"].bin_dir
    if "policy" in parsed:
        cfg.policy = parsed["policy"].name
        _check_policy(cfg, parsed["policy"], source, problems)
    if problems:
        raise ConfigError(problems)
    return cfg


def _check_policy(cfg: ControllerConfig, pol: PolicySection, source: str, problems: list[str]) -> None:
    try:
        from solver.policies import make_policy
        if cfg.policy != "shockwave":
            make_policy(cfg.policy)
    except Exception as e:  # noqa: BLE001 - any failure to build the policy is a config problem
        problems.append(f"{source}: policy.name = {cfg.policy!r}: {_first_line(e)}")
        return
    if cfg.policy == "shockwave":
        cfg.policy_config = _shockwave_config(source, pol, problems)
    elif pol.config is not None or pol.shockwave is not None:
        problems.append(f"{source}: policy.config: only the shockwave policy takes hyperparameters "
                        f"(policy.name = {cfg.policy!r})")


def _shockwave_config(source: str, pol: PolicySection, problems: list[str]):
    from solver.policies.shockwave import ShockwaveConfig
    if pol.config is not None and pol.shockwave is not None:
        problems.append(f"{source}: policy: give either policy.config or a [policy.shockwave] table, not both")
        return {}
    where = "policy.shockwave"
    try:
        if pol.config is not None:
            ref = Path(pol.config)
            where = f"policy.config = {pol.config!r}"
            if not ref.is_absolute() and not ref.exists():
                from ..data_files import CONFIGS
                ref = CONFIGS / ref
            return ShockwaveConfig.from_file(ref)
        table = pol.shockwave or {}
        bad = _shockwave_table_problems(ShockwaveConfig, table)
        if bad:
            problems += [f"{source}: policy.shockwave.{line}" for line in bad]
            return {}
        return ShockwaveConfig.from_dict(table)
    except ValidationError as e:
        problems += [f"{source}: {where}: {line}" for line in describe(e.errors())]
    except FileNotFoundError:
        problems.append(f"{source}: {where}: file not found (a path, or a bundled name such as tacc_32gpus.json)")
    except Exception as e:  # noqa: BLE001 - OSError, ValueError, TypeError, JSON errors: all one line
        problems.append(f"{source}: {where}: {_first_line(e)}")
    return {}


def _shockwave_table_problems(cls, table: dict) -> list[str]:
    """Every unknown key and every bad value of an inline [policy.shockwave] table (ShockwaveConfig itself
    ignores unknown keys, which are legitimate in the reference's JSON files, and stops at its first error)."""
    fields_ = getattr(cls, "model_fields", None) or {f.name: f for f in fields(cls)}
    known = {("lambda" if name == "lambda_" else name) for name in fields_}
    out = []
    for key, value in table.items():
        if key not in known:
            out.append(f"{key}: unknown setting (known: {', '.join(sorted(known))})")
            continue
        try:
            cls.from_dict({key: value})
        except Exception as e:  # noqa: BLE001 - its errors are ValueError/TypeError, one line each
            out.append(f"{key} = {_show(value)}: {_first_line(e)}")
    return out


# ---------------------------------------------------------------------- messages
def describe(errors, prefix=()) -> list[str]:
    """pydantic errors -> one line each: `controller.round_seconds = inf: must be a finite number`."""
    out = []
    for err in errors:
        loc = [str(p) for p in (*prefix, *err.get("loc", ()))]
        key = ".".join(loc)
        kind = err.get("type", "")
        value = err.get("input")
        if kind == "extra_forbidden":
            out.append(f"{key}: unknown setting")
            continue
        if kind == "model_type":
            out.append(f"[{key}]: must be a table, got {_show(value)}" if key else
                       f"must be a table of settings, got {_show(value)}")
            continue
        out.append(f"{key} = {_show(value)}: {_message(err)}" if key else _message(err))
    return out


def _message(err) -> str:
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    msg = {
        "finite_number": "must be a finite number (not nan or inf)",
        "float_type": "must be a number",
        "int_type": "must be an integer",
        "string_type": "must be a string",
        "bool_type": "must be true or false",
        "dict_type": "must be a table",
        "greater_than": f"must be > {_num(ctx.get('gt'))}",
        "greater_than_equal": f"must be >= {_num(ctx.get('ge'))}",
        "less_than": f"must be < {_num(ctx.get('lt'))}",
        "less_than_equal": f"must be <= {_num(ctx.get('le'))}",
        "string_too_short": "must not be empty",
        "string_too_long": f"must be at most {ctx.get('max_length')} characters",
        "string_pattern_mismatch": "must be a plain name (letters, digits, _ . -)",
        "literal_error": f"must be one of {ctx.get('expected')}",
    }.get(kind)
    if msg is None:
        msg = str(err.get("msg", "invalid"))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
    return _first_line(msg)


def _num(x):
    return int(x) if isinstance(x, float) and x.is_integer() and abs(x) < 1e15 else x


def _show(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _first_line(e) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
