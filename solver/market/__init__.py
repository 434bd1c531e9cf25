"""Shockwave's market: the window program, its solver backends, plan construction and fair-share targets."""

from solver.market.backends import BackendResult, GurobiBackend, HighsBackend, make_backend
from solver.market.fairshare import (
    FairShareTracker,
    gpu_share,
    momentum_average,
    priority_weight,
    rho_hat,
    uniform_share,
)
from solver.market.plan import backfill, max_min_round, pack_rounds
from solver.market.program import (
    REFERENCE_BASES,
    WindowJob,
    WindowProblem,
    WindowSolution,
    build_milp,
    is_count_feasible,
    log_utility,
    make_window_job,
    objective_value,
    solve_window,
)

__all__ = [
    "REFERENCE_BASES",
    "BackendResult",
    "FairShareTracker",
    "GurobiBackend",
    "HighsBackend",
    "WindowJob",
    "WindowProblem",
    "WindowSolution",
    "backfill",
    "build_milp",
    "gpu_share",
    "is_count_feasible",
    "log_utility",
    "make_backend",
    "make_window_job",
    "max_min_round",
    "momentum_average",
    "objective_value",
    "pack_rounds",
    "priority_weight",
    "rho_hat",
    "solve_window",
    "uniform_share",
]
