"""The controller's configuration file (TOML), validated at start: one line per problem.

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
    slurm_timeout = 30

    [policy]
    name = "shockwave"             # or a baseline
    config = "tacc_32gpus.json"    # Shockwave hyperparameters (a file), or a [policy.shockwave] table

    [weights]                      # market budgets: per user and per account (multiplied)
    users = { alice = 2.0 }
    accounts = { physics = 1.5 }
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

MODES = ("advisory", "authoritative")
MANAGED_BY = ("comment", "partition")


class ConfigError(ValueError):
    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class ControllerConfig:
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
    slurm_timeout: float = 30.0
    dry_run: bool = False
    policy: str = "shockwave"
    policy_config: dict = field(default_factory=dict)
    user_weights: dict = field(default_factory=dict)
    account_weights: dict = field(default_factory=dict)
    slurm_env: dict = field(default_factory=dict)
    source: str = "<defaults>"

    def weight(self, user: str, account: str) -> float:
        return float(self.user_weights.get(user, 1.0)) * float(self.account_weights.get(account, 1.0))

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir) / "state.sqlite"


_FIELDS = {"round_seconds": (int, float), "mode": str, "partition": str, "managed_by": str, "marker": str,
           "state_dir": str, "event_store": str, "grace_seconds": (int, float), "min_run_seconds": (int, float), "preempt_signal": str,
           "site_factor": int, "metrics_port": int, "slurm_timeout": (int, float), "dry_run": bool}


def load_config(path) -> ControllerConfig:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError([f"{path}: file not found"]) from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError([f"{path}: {e}"]) from None
    return config_from_dict(data, str(path))


def config_from_dict(data: dict, source: str = "<dict>") -> ControllerConfig:
    problems: list[str] = []
    cfg = ControllerConfig(source=source)
    for section in set(data) - {"controller", "policy", "weights", "slurm"}:
        problems.append(f"{source}: [{section}]: unknown section")
    ctl = data.get("controller", {})
    for key, value in ctl.items():
        kind = _FIELDS.get(key)
        if kind is None:
            problems.append(f"{source}: controller.{key}: unknown setting")
        elif isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            problems.append(f"{source}: controller.{key}: expected {_kind_name(kind)}, got {value!r}")
        else:
            setattr(cfg, key, value)
    if cfg.round_seconds <= 0:
        problems.append(f"{source}: controller.round_seconds: must be positive, got {cfg.round_seconds}")
    if cfg.mode not in MODES:
        problems.append(f"{source}: controller.mode: must be one of {', '.join(MODES)}, got {cfg.mode!r}")
    if cfg.managed_by not in MANAGED_BY:
        problems.append(f"{source}: controller.managed_by: must be one of {', '.join(MANAGED_BY)}, "
                        f"got {cfg.managed_by!r}")
    if cfg.grace_seconds < 0:
        problems.append(f"{source}: controller.grace_seconds: must be >= 0, got {cfg.grace_seconds}")
    if cfg.min_run_seconds is not None and cfg.min_run_seconds < 0:
        problems.append(f"{source}: controller.min_run_seconds: must be >= 0, got {cfg.min_run_seconds}")
    if not 0 <= cfg.metrics_port <= 65535:
        problems.append(f"{source}: controller.metrics_port: must be 0..65535, got {cfg.metrics_port}")
    if not 0 < cfg.site_factor <= 2147483645:
        problems.append(f"{source}: controller.site_factor: must be 1..2147483645, got {cfg.site_factor}")
    if not cfg.marker.strip():
        problems.append(f"{source}: controller.marker: must not be empty")
    pol = data.get("policy", {})
    cfg.policy = pol.get("name", cfg.policy)
    try:
        from solver.policies import make_policy
        make_policy(cfg.policy) if cfg.policy != "shockwave" else None
    except ValueError as e:
        problems.append(f"{source}: policy.name: {e}")
    if cfg.policy == "shockwave":
        cfg.policy_config = _shockwave_config(source, pol, problems)
    for kind, table in (("users", cfg.user_weights), ("accounts", cfg.account_weights)):
        for name, w in data.get("weights", {}).get(kind, {}).items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or w <= 0:
                problems.append(f"{source}: weights.{kind}.{name}: must be a positive number, got {w!r}")
            else:
                table[name] = float(w)
    cfg.slurm_env = {str(k): str(v) for k, v in data.get("slurm", {}).get("env", {}).items()}
    if problems:
        raise ConfigError(problems)
    return cfg


def _shockwave_config(source, pol, problems) -> dict:
    from solver.policies.shockwave import ShockwaveConfig
    try:
        if "config" in pol:
            ref = Path(pol["config"])
            if not ref.is_absolute() and not ref.exists():
                from ..data_files import CONFIGS
                ref = CONFIGS / ref
            cfg = ShockwaveConfig.from_file(ref)
        else:
            cfg = ShockwaveConfig.from_dict(pol.get("shockwave", {}))
        return cfg
    except (OSError, ValueError) as e:
        problems.append(f"{source}: policy: {str(e).splitlines()[0]}")
        return {}


def _kind_name(kind) -> str:
    if kind == (int, float):
        return "a number"
    return {str: "a string", int: "an integer", bool: "true or false"}[kind]
