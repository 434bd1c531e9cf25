"""Scheduling policies: one small class each, one module each; every class describes itself (base.Policy)
and the registry finds it.  `make_policy(name)` builds one by name."""

from __future__ import annotations

from solver.policies.base import Policy
from solver.policies.registry import all_policies, default_policy, make_policy, policy_class, policy_names

__all__ = ["Policy", "all_policies", "default_policy", "make_policy", "policy_class", "policy_names"]
