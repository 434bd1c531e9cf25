"""The controller's configuration file (TOML), validated at start and on SIGHUP: one line per problem.

The models below are the configuration: each setting is stated once, with its type, bounds, default and a
one-line description.  The settings of the `[controller]` table are the fields of `ControllerConfig` itself
(`cfg.round_seconds`); every other table is a field holding its own model (`cfg.policy.name`,
`cfg.weights.users`, `cfg.slurm.env`).  docs/config.example.toml, the commented reference, is written from
them (`shockwave controller example-config`, config_example.py).

Validation is pydantic v2 in strict mode: a string is never a number, a number is never a bool, nan and
inf are refused, every bound is checked.  Every problem of one file is reported in one run, each on its
own line naming the key and the offending value (`ConfigError.problems`); the CLI exits 2 on any.
"""

from __future__ import annotations

import ipaddress
import signal
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic.config import JsonDict

from slurm_shockwave import policy_settings, site
from slurm_shockwave.loader import InputFileError, load
from slurm_shockwave.validation import describe, line, show
from solver import preemption

if TYPE_CHECKING:
    from pydantic_core import InitErrorDetails


#: signals that would kill or freeze a job instead of asking it to checkpoint (a job's own declared signal follows the
#: same rule: slurm/hints.py KILLING_SIGNALS, kept equal by tests/test_enact.py; this package may not import that one)
_FORBIDDEN_SIGNALS = {"KILL", "STOP", "SEGV", "BUS", "ILL", "FPE", "ABRT", "TRAP", "SYS"}
#: `json_schema_extra` of a setting whose change needs a restart (SIGHUP keeps the running value and says so)
RESTART: JsonDict = {"restart": True}


class ConfigError(ValueError):
    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, validate_assignment=True)


def _text(value: str, what: str = "must not be empty") -> str:
    if not value.strip():
        raise ValueError(what)
    if any(c in value for c in "\0\n\r"):
        raise ValueError("must not contain a newline or NUL")
    return value


class PolicySection(_Strict):
    """The policy that plans the rounds, and its settings."""

    model_config = ConfigDict(extra="allow")  # [policy.<name>]: the named policy's settings (checked below)

    # fmt: off
    name: str = Field(default_factory=lambda: policy_settings.default_name(), min_length=1,
                      description="the policy's name (`shockwave simulate --help` lists them); default: the "
                                  "project's default policy")
    config: str | None = Field(None, min_length=1, examples=["/etc/shockwave/policy.toml"],
                               description="a file of the policy's settings, instead of a [policy.<name>] table: "
                                           "a path, or a bundled file (for shockwave-paper, tacc_32gpus.json: the "
                                           "reference's settings for its 32-GPU experiment); default: the "
                                           "policy's built-in settings")
    # fmt: on
    _settings: BaseModel | None = PrivateAttr(None)

    @property
    def settings(self) -> BaseModel | None:
        """The policy's validated settings (its defaults when none are given); None: the policy has none."""
        if self._settings is None:
            model = policy_settings.settings_model(self.name)
            return model() if model is not None else None
        return self._settings

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        policy_settings.policy_class(v)  # ValueError: unknown policy, and the known ones
        return v

    @model_validator(mode="after")
    def _validate_settings(self) -> PolicySection:
        self._settings = None
        tables = dict(self.model_extra or {})
        if self.config is None and not tables:
            return self  # the policy's defaults, looked up when asked for
        errors = self._problems(tables)
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, cast("list[InitErrorDetails]", errors))
        return self

    def _problems(self, tables: dict[Any, Any]) -> list[dict[Any, Any]]:
        """Validate the settings given (a [policy.<name>] table or a file); their problems, located in this
        table for a ValidationError ([] when they are valid)."""
        own = policy_settings.policy_class(self.name)
        mine = next((key for key in tables if key in (self.name, own.name)), None)
        others = [
            {"type": "extra_forbidden", "loc": (key,), "input": value}
            if not isinstance(value, dict)
            else policy_settings.custom(
                (key,),
                value,
                f"settings of another policy; those of policy.name = {self.name!r} go in [policy.{own.name}]",
            )
            for key, value in tables.items()
            if key != mine
        ]
        if others:
            return others
        where, given = ((mine,), tables[mine]) if mine is not None else (("config",), self.config)
        if own.config_model is None:
            return [policy_settings.custom(where, given, f"the {own.name} policy has no settings")]
        if mine is None:
            return self._read_file(own.name)
        if self.config is not None:
            return [
                policy_settings.custom(
                    ("config",), self.config, f"give either policy.config or a [policy.{mine}] table, not both"
                )
            ]
        if not isinstance(given, dict):
            return [{"type": "dict_type", "loc": where, "input": given}]
        try:
            self._settings = policy_settings.from_table(own.name, given)
        except ValidationError as e:
            return [
                policy_settings.rewrap(cast("dict[str, Any]", err), (mine, *err["loc"]))
                for err in e.errors(include_url=False)
            ]
        return []

    def _read_file(self, name: str) -> list[dict[Any, Any]]:
        try:
            self._settings = policy_settings.from_file(name, policy_settings.resolve(cast(str, self.config)))
        except ValidationError as e:
            return [
                policy_settings.custom(("config",), self.config, line(cast("dict[str, Any]", err)))
                for err in e.errors(include_url=False)
            ]
        except InputFileError as e:
            why = (
                "file not found (a path, or a bundled name such as tacc_32gpus.json)"
                if e.problem == "file not found"
                else str(e)
            )
            return [policy_settings.custom(("config",), self.config, why)]
        return []


Weight = Annotated[float, Field(gt=0, le=1e6)]
GpuType = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]  # as Slurm's GRES type (slurm/gpu_types.py)


class WeightsSection(_Strict):
    """Market budgets: each user's share of Slurm's association tree lowered by its decayed usage (sshare, see
    docs/planning.md), times its user's and its account's weight here (default 1); a user's jobs share it."""

    # fmt: off
    users: dict[str, Weight] = Field(default_factory=dict, examples=[{"alice": 2.0}], description="per user")
    accounts: dict[str, Weight] = Field(default_factory=dict, examples=[{"physics": 1.5}],
                                        description="per Slurm account")
    from_slurm: bool = Field(True, description="budgets from Slurm's shares and usage (one `sshare` per round); "
                                               "false, without accounting or when sshare fails: the weights alone")
    window_seconds: float = Field(3600.0, gt=0, le=30 * 86400,
                                  description="`shockwave status` shows each user's and account's GPU-time over "
                                              "this window")
    # fmt: on


class SlurmSection(_Strict):
    """How the Slurm commands are run."""

    # fmt: off
    bin_dir: str | None = Field(None, min_length=1, examples=["/usr/bin"],
                                description="where squeue, sinfo, scontrol, ... are (default: $PATH)")
    env: dict[str, str] = Field(default_factory=dict, examples=[{"SLURM_CONF": "/etc/slurm/slurm.conf"}],
                                description="environment of the Slurm commands (SLURM_CONF: a non-default slurm.conf)")
    # fmt: on


class ControllerConfig(_Strict):
    """The rounds, the jobs the controller manages and where it keeps its state.

    The fields before `policy` are the settings of the [controller] table; each other table is a field holding
    a model of its own."""

    # the settings keep their hand layout (tests/test_architecture.py caps the file at 400 lines)
    # fmt: off
    backend: str = Field("slurm", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$",
                         json_schema_extra=RESTART,
                         description="the cluster backend (an entry point of slurm_shockwave.backends)")
    round_seconds: float = Field(120.0, gt=0, le=86400, description="length of a round (the paper's 120 s)")
    mode: Literal["advisory", "authoritative"] = Field(
        "advisory", description="advisory: SiteFactor and hold/release only; authoritative: also preempt")
    partition: str = Field("gpu", min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$",
                           description="the partition whose GPUs Shockwave plans (must exist and have gres GPUs)")
    managed_by: Literal["comment", "partition"] = Field(
        "comment", description="comment: the jobs whose --comment starts with `marker`; partition: all its jobs")
    marker: str = Field("shockwave", min_length=1, max_length=100,
                        description="the first word of a managed job's --comment")
    no_requeue: Literal["schedule", "leave"] = Field(
        "schedule", description="a job submitted with --no-requeue: schedule: planned like any other, never stopped "
                                "once it runs; leave: left to Slurm (quarantined, its reason in `status`)")
    state_dir: str = Field(site.DEFAULT_STATE_DIR, max_length=4096, json_schema_extra=RESTART,
                           description="SQLite state (WAL) and the lock file; must be writable")
    event_store: str = Field(site.DEFAULT_EVENT_STORE, max_length=4096, json_schema_extra=RESTART,
                             description="the training wrappers' event files, on a filesystem shared by all nodes "
                                         "(layout and modes: docs/event-schema.md)")
    grace_seconds: float = Field(60.0, ge=0, le=86400,
                                 description="authoritative: the checkpoint signal, then requeuehold after this long")
    min_run_seconds: float | None = Field(None, ge=0, le=7 * 86400, examples=[240.0],
                                          description="a (re)started job is not preempted before this "
                                                      "(default: one round)")
    preemption_cost_s: float = Field(30.0, ge=0, le=86400,
                                     description="authoritative: a running job is preempted only when the plan "
                                                 "keeps it off longer than its preemption cost (checkpoint + "
                                                 "requeue + restart, measured from its own events), never in its "
                                                 "last round of work; this cost until its first is measured")
    rounds_per_restart: int = Field(preemption.ROUNDS_PER_RESTART, ge=0, le=100000,
                                    description="authoritative: a job is preempted at most once per this many rounds "
                                                "of the time it has run (10: 3 per hour at 120 s rounds; a job is "
                                                "first preempted after 10 rounds of run); 0 = no bound")
    elastic_speedup_exponent: float = Field(0.7, gt=0, le=1,
                                            description="an elastic job's (hint gpus=MIN-MAX) throughput at a "
                                                        "GPU count it has not run on: its throughput at a count "
                                                        "it ran on (or its base count) times (count / that count) "
                                                        "** this; 0.7 is below the median 1->8 GPU scaling at a "
                                                        "fixed batch of the reference's throughputs (0.87, 0.89), "
                                                        "about their lower quartile (0.58, 0.73)")
    gpu_type_speeds: dict[GpuType, Weight] = Field(
        default_factory=dict, examples=[{"v100": 1.0, "p100": 0.5, "k80": 0.2}],
        description="on a partition of several GPU types, each type's speed relative to the others': a job starts "
                    "on the fastest type with room, and a running job moves to a faster one when the time saved "
                    "pays for two restarts (solver/type_moves.py); empty, or a type missing: speeds unknown, a job "
                    "goes to the type with the most free GPUs and never moves")
    preempt_signal: str = Field("USR1", description="the checkpoint signal (the job templates catch USR1; USR2, "
                                                    "TERM, INT, ...; never KILL)")
    site_factor: int = Field(1_000_000, ge=1, le=2147483645,
                             description="SiteFactor of planned jobs (deferred jobs get 0)")
    metrics_port: int = Field(0, ge=0, le=65535, json_schema_extra=RESTART,
                              description="Prometheus metrics endpoint; 0 = off")
    metrics_address: str = Field("127.0.0.1", json_schema_extra=RESTART,
                                 description="where the metrics endpoint listens (an IP address; 0.0.0.0 = all)")
    slurm_timeout: float = Field(30.0, gt=0, le=3600, description="seconds per Slurm command")
    dry_run: bool = Field(False, description="shadow mode: decide and log, enact nothing")
    poll_seconds: float | None = Field(None, gt=0, le=3600, examples=[5.0],
                                       description="while waiting for the next round, look at the queue this often; "
                                                   "freed GPUs start an early round "
                                                   "(default: min(5, max(round/4, 0.5)))")
    min_round_seconds: float | None = Field(None, gt=0, le=86400, examples=[5.0],
                                            description="but never sooner than this after the last round "
                                                        "(default: min(round, 5))")
    # fmt: on
    policy: PolicySection = Field(default_factory=PolicySection)
    weights: WeightsSection = Field(default_factory=WeightsSection)
    slurm: SlurmSection = Field(default_factory=SlurmSection)
    _source: str = PrivateAttr("<defaults>")

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

    @property
    def source(self) -> str:
        """The file this configuration was read from."""
        return self._source

    @property
    def early_round_timing(self) -> tuple[float, float]:
        """(poll, min gap) seconds of the event-driven round (slurm/backend.py `advance`; the simulator's
        `early_rounds`): `poll_seconds` and `min_round_seconds` or their defaults."""
        return (
            float(self.poll_seconds or min(5.0, max(self.round_seconds / 4, 0.5))),
            float(self.min_round_seconds or min(self.round_seconds, 5.0)),
        )

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir) / "state.sqlite"

    def weight(self, user: str, account: str) -> float:
        return float(self.weights.users.get(user, 1.0)) * float(self.weights.accounts.get(account, 1.0))

    def update_from(self, other: ControllerConfig, keep: Collection[str] = ()) -> list[str]:
        """Copy every setting of `other` into this object (in place), except `keep`; the names that changed."""
        changed = []
        for name in type(self).model_fields:
            new = getattr(other, name)
            if name not in keep and getattr(self, name) != new:
                changed.append(name)
                setattr(self, name, new)
        self._source = other._source
        return changed


#: the tables of a config file: [controller] holds ControllerConfig's own settings, the others a model each
SECTIONS = (
    "controller",
    *(
        name
        for name, f in ControllerConfig.model_fields.items()
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
    ),
)
RESTART_ONLY = tuple(name for name, f in ControllerConfig.model_fields.items() if f.json_schema_extra == RESTART)


def load_config(path: str | Path) -> ControllerConfig:
    try:
        data = load(path, "toml")
    except InputFileError as e:
        raise ConfigError([str(e)]) from None
    return config_from_dict(data, str(path))


def config_from_dict(data: dict[Any, Any], source: str = "<dict>") -> ControllerConfig:
    """Validate a whole file at once, so that one run reports every problem of it."""
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: must be a table of settings, got {show(data)}"])
    problems = [
        f"{source}: [{name}]: unknown section (known: {', '.join(sorted(SECTIONS))})"
        for name in data
        if name not in SECTIONS
    ]
    own = data.get("controller", {})
    if not isinstance(own, dict):
        problems.append(f"{source}: {line({'type': 'model_type', 'loc': ('controller',), 'input': own})}")
        own = {}
    problems += [f"{source}: controller.{key}: unknown setting" for key in own if key in SECTIONS]
    flat = {
        **{k: v for k, v in own.items() if k not in SECTIONS},
        **{name: data[name] for name in SECTIONS[1:] if name in data},
    }
    try:
        cfg = ControllerConfig.model_validate(flat)
    except ValidationError as e:
        problems += [f"{source}: {p}" for p in describe(e, key=_file_key)]
    if problems:
        raise ConfigError(problems)
    cfg._source = source
    return cfg


def _file_key(loc: tuple[Any, ...]) -> str:
    """Where a setting is in the file: `controller.round_seconds`, `weights.users.alice`."""
    parts = [str(p) for p in loc]
    return ".".join(parts if parts and parts[0] in SECTIONS else ["controller", *parts])
