"""Scheduling policies: one small class each.  `make_policy(name)` builds one by name."""
from __future__ import annotations

from .allox import AlloX
from .fifo import Fifo
from .finish_time_fairness import FinishTimeFairness
from .gandiva_fair import GandivaFair
from .max_min_fairness import MaxMinFairness
from .max_sum_throughput import MaxSumThroughput
from .min_total_duration import MinTotalDuration

BASELINES = {cls.name: cls for cls in (MaxMinFairness, FinishTimeFairness, AlloX, MaxSumThroughput,
                                       MinTotalDuration, GandivaFair, Fifo)}
ALIASES = {"gavel": "max_min_fairness", "themis": "finish_time_fairness", "mst": "max_sum_throughput",
           "max_sum_throughput_perf": "max_sum_throughput", "ossp": "min_total_duration",
           "gandiva-fair": "gandiva_fair"}


def policy_names() -> list[str]:
    return ["shockwave", *BASELINES]


def make_policy(name: str, config: dict | None = None):
    name = ALIASES.get(name.lower(), name.lower())
    if name == "shockwave":
        from .shockwave import ShockwaveConfig, ShockwavePolicy
        cfg = config if isinstance(config, ShockwaveConfig) else ShockwaveConfig.from_dict(config or {})
        return ShockwavePolicy(cfg)
    if name not in BASELINES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(policy_names())}")
    return BASELINES[name]()
