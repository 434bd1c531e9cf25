"""MILP backends: HiGHS through scipy.optimize.milp (default) and gurobipy (optional).

A backend solves ``min c.x  s.t.  rl <= A x <= ru,  lb <= x <= ub,  x_j integer where integ_j``
and returns a ``BackendResult``; ``x`` is None when no feasible point is known.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

log = logging.getLogger("solver.market")
_Vec = np.ndarray  # A: a scipy sparse matrix


@dataclass
class BackendResult:
    x: np.ndarray | None
    status: str  # optimal | time_limit | infeasible | error
    message: str = ""
    mip_gap: float | None = None


class Backend(Protocol):
    """What solve_window needs of a backend (HighsBackend, GurobiBackend, a test's stub)."""

    name: str

    def solve(
        self, c: _Vec, A: Any, rl: _Vec, ru: _Vec, lb: _Vec, ub: _Vec, integ: _Vec, time_limit: float, rel_gap: float
    ) -> BackendResult: ...


class HighsBackend:
    name = "highs"

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads

    def solve(
        self, c: _Vec, A: Any, rl: _Vec, ru: _Vec, lb: _Vec, ub: _Vec, integ: _Vec, time_limit: float, rel_gap: float
    ) -> BackendResult:
        from scipy.optimize import Bounds, LinearConstraint, milp

        opts = {"disp": False, "time_limit": float(time_limit), "mip_rel_gap": float(rel_gap)}
        res = milp(c, constraints=[LinearConstraint(A, rl, ru)], integrality=integ, bounds=Bounds(lb, ub), options=opts)
        status = {0: "optimal", 1: "time_limit", 2: "infeasible", 3: "unbounded"}.get(res.status, "error")
        x = None if res.x is None else np.asarray(res.x, dtype=float)
        return BackendResult(x, status, str(res.message), getattr(res, "mip_gap", None))


class GurobiBackend:
    """gurobipy, used only when chosen in the config; needs a licence large enough for the model."""

    name = "gurobi"

    def __init__(self, threads: int | None = None) -> None:
        import gurobipy  # noqa: F401  (ImportError is reported to the caller)

        self.threads = threads

    def solve(
        self, c: _Vec, A: Any, rl: _Vec, ru: _Vec, lb: _Vec, ub: _Vec, integ: _Vec, time_limit: float, rel_gap: float
    ) -> BackendResult:
        import gurobipy as gp
        from gurobipy import GRB

        env = gp.Env(empty=True)
        env.setParam("OutputFlag", 0)
        env.start()
        try:
            m = gp.Model(env=env)
            m.Params.TimeLimit = float(time_limit)
            m.Params.MIPGap = float(rel_gap)
            if self.threads:
                m.Params.Threads = int(self.threads)
            vtype = np.where(np.asarray(integ) > 0, GRB.INTEGER, GRB.CONTINUOUS)
            lbg = np.where(np.isfinite(lb), lb, -GRB.INFINITY)
            ubg = np.where(np.isfinite(ub), ub, GRB.INFINITY)
            x = m.addMVar(len(c), lb=lbg, ub=ubg, vtype=vtype)
            m.setObjective(np.asarray(c) @ x, GRB.MINIMIZE)
            A = A.tocsr()
            up = np.isfinite(ru)
            lo = np.isfinite(rl)
            if up.any():
                m.addMConstr(A[up], x, "<", np.asarray(ru)[up])
            if lo.any():
                m.addMConstr(A[lo], x, ">", np.asarray(rl)[lo])
            m.optimize()
            status = {GRB.OPTIMAL: "optimal", GRB.TIME_LIMIT: "time_limit", GRB.INFEASIBLE: "infeasible"}.get(
                m.Status, "error"
            )
            sol = np.asarray(x.X, dtype=float) if m.SolCount > 0 else None
            gap = float(m.MIPGap) if m.SolCount > 0 else None
            return BackendResult(sol, status, f"gurobi status {m.Status}", gap)
        finally:
            env.dispose()


def make_backend(name: str, threads: int | None = None) -> HighsBackend | GurobiBackend:
    """Backend by config name; "gurobi" falls back to HiGHS (with a warning) when gurobipy is missing."""
    name = (name or "highs").lower()
    if name == "gurobi":
        try:
            return GurobiBackend(threads)
        except ImportError as exc:
            log.warning("solver.market: gurobipy not installed (%s); using HiGHS", exc)
    return HighsBackend(threads)
