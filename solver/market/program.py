"""The window program (the reference's relaxed Eisenberg-Gale program, notes 1.3-1.5), built on round counts.

Reference (per job i, planned round t): binaries x_it, progress p_i, an SOS2 piecewise-linear log:

    max (1/(N W)) sum_i w_i log((e_i + p_i)/E_i) - k max_i max(0, R_i - p_i d_i)
    s.t. sum_i g_i x_it <= G (every t),  p_i d_i <= Delta sum_t x_it,  (e_i + p_i)/E_i <= 1.

The objective depends on x only through n_i = sum_t x_it, and it is non-decreasing in p_i, so at an optimum
p_i = min(Delta n_i / d_i, E_i - e_i).  We therefore solve for integer n_i in [0, nmax_i] with

    max (1/(N W)) sum_i w_i u_i - k M
    s.t. u_i <= f_i(m) + (f_i(m+1) - f_i(m)) (n_i - m)     m = 0..nmax_i-1   (hypograph of a concave PL function)
         M >= R_i - Delta n_i,  M >= c0 = max(0, max_i R_i - (E_i - e_i) d_i)
         sum_{i: g_i >= s} g_i n_i <= W * s * floor(G/s)   for every distinct gang size s   (capacity)

where f_i(m) = L((e_i + min(Delta m / d_i, E_i - e_i)) / E_i) and L is either the exact log (floored at 1e-6)
or the reference's piecewise-linear interpolation of log through its bases.  f_i(m) is concave in m, so the
hypograph rows are exact at every integer m: no SOS2 binaries.  nmax_i = min(W, ceil((E_i - e_i) d_i / Delta))
(rounds beyond it add nothing).  With gang sizes > 1 the per-size capacity rows are a relaxation of
per-round capacity (a job runs at most once per round, so e.g. G=4, W=2 with three 1-GPU jobs in both rounds
leaves no room for a 2-GPU job although the totals fit): plan.py packs the counts round by round, never over
capacity, repairs fragmentation by moving jobs between rounds, and backfill reuses what is still left idle.
With unit gangs the program is exactly the reference's relaxed program.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

LOG_FLOOR = 1e-6
REFERENCE_BASES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
MAX_SOLVER_WEIGHT = 1e8   # w_i is clipped here for the solver (rho^100 overflows); ranking uses log w


def log_utility(x: np.ndarray, bases=None) -> np.ndarray:
    """L(x): exact log floored at LOG_FLOOR, or the reference's PL interpolation through ``bases``."""
    x = np.clip(np.asarray(x, dtype=float), 0.0, 1.0)
    if bases is None:
        return np.log(np.maximum(x, LOG_FLOOR))
    b = np.asarray(sorted(float(v) for v in bases), dtype=float)
    vals = np.log(np.maximum(b, LOG_FLOOR))
    return np.interp(x, b, vals)


@dataclass
class WindowJob:
    job_id: object
    gpus: int
    weight: float            # w_i for the solver (already clipped)
    utility: np.ndarray      # f_i(0..nmax_i)
    remaining: float         # R_i (s)
    floor: float             # R_i - (E_i - e_i) d_i : remaining time the window cannot remove

    @property
    def nmax(self) -> int:
        return len(self.utility) - 1


@dataclass
class WindowProblem:
    jobs: list
    num_gpus: int
    rounds: int
    round_length: float
    k: float


@dataclass
class WindowSolution:
    counts: dict                  # job_id -> n_i
    objective: float
    status: str                   # optimal | time_limit | ...
    solve_time: float
    mip_gap: float | None = None
    info: dict = field(default_factory=dict)


def make_window_job(job_id, gpus: int, weight: float, epochs_done: float, total_epochs: float,
                    mean_epoch_duration: float, remaining: float, rounds: int, round_length: float,
                    bases=None) -> WindowJob:
    """Utility table f(0..nmax) for one job (see module docstring)."""
    E = max(float(total_epochs), 1e-9)
    e = min(max(float(epochs_done), 0.0), E)
    d = max(float(mean_epoch_duration), 1e-9)
    left = E - e
    nmax = int(min(rounds, math.ceil(left * d / round_length - 1e-9))) if left > 0 else 0
    nmax = max(nmax, 0)
    m = np.arange(nmax + 1, dtype=float)
    x = (e + np.minimum(round_length * m / d, left)) / E
    f = log_utility(x, bases)
    w = float(min(max(weight, 0.0), MAX_SOLVER_WEIGHT))
    return WindowJob(job_id, int(gpus), w, f, float(remaining), float(remaining) - left * d)


def capacity_classes(gpus: np.ndarray, num_gpus: int) -> list[tuple[int, float]]:
    """(size s, capacity per round for jobs with g >= s) for every distinct gang size."""
    out = []
    for s in sorted(set(int(g) for g in gpus)):
        out.append((s, float(s * (num_gpus // s))))
    return out


def objective_value(problem: WindowProblem, counts: dict) -> float:
    """The program's objective for given round counts (for tests and for checking solver answers)."""
    jobs = problem.jobs
    if not jobs:
        return 0.0
    nw = len(jobs) * problem.rounds
    welfare = 0.0
    worst = 0.0
    for j in jobs:
        n = int(min(max(counts.get(j.job_id, 0), 0), j.nmax))
        welfare += j.weight * j.utility[n]
        worst = max(worst, j.remaining - problem.round_length * n, j.floor)
    return welfare / nw - problem.k * worst


def is_count_feasible(problem: WindowProblem, counts: dict) -> bool:
    g = np.array([j.gpus for j in problem.jobs])
    n = np.array([counts.get(j.job_id, 0) for j in problem.jobs])
    if np.any(n < 0) or any(c > j.nmax for c, j in zip(n, problem.jobs)):
        return False
    for s, cap in capacity_classes(g, problem.num_gpus):
        if float(np.sum((g * n)[g >= s])) > problem.rounds * cap + 1e-9:
            return False
    return True


def build_milp(problem: WindowProblem):
    """Matrices for ``min c.x  s.t.  rl <= A x <= ru, lb <= x <= ub`` (x = [n, u, M]); plus integrality."""
    jobs = problem.jobs
    N, W, D = len(jobs), problem.rounds, problem.round_length
    nv = 2 * N + 1
    iM = 2 * N
    scale = 1.0 / (N * W)
    c = np.zeros(nv)
    lb = np.zeros(nv)
    ub = np.zeros(nv)
    integ = np.zeros(nv, dtype=np.uint8)
    integ[:N] = 1
    g = np.array([j.gpus for j in jobs], dtype=float)
    c0 = max([0.0] + [j.floor for j in jobs])
    rows, cols, vals, rl, ru = [], [], [], [], []
    r = 0
    for i, j in enumerate(jobs):
        f = j.utility
        c[N + i] = -scale * j.weight
        ub[i] = j.nmax
        lb[N + i], ub[N + i] = float(f[0]), float(f[-1])
        # hypograph rows (merge collinear pieces)
        slopes = np.diff(f)
        prev = None
        for m, s in enumerate(slopes):
            if prev is not None and abs(s - prev) <= 1e-12 * max(1.0, abs(s)):
                continue
            prev = s
            # u - s n <= f(m) - s m
            rows += [r, r]
            cols += [N + i, i]
            vals += [1.0, -float(s)]
            rl.append(-np.inf)
            ru.append(float(f[m] - s * m))
            r += 1
        # M + D n >= R   (only if it can bind above c0)
        if j.remaining > c0:
            rows += [r, r]
            cols += [iM, i]
            vals += [1.0, D]
            rl.append(float(j.remaining))
            ru.append(np.inf)
            r += 1
    for s, cap in capacity_classes(g, problem.num_gpus):
        idx = np.nonzero(g >= s)[0]
        rows += [r] * len(idx)
        cols += idx.tolist()
        vals += g[idx].tolist()
        rl.append(-np.inf)
        ru.append(W * cap)
        r += 1
    c[iM] = problem.k
    lb[iM], ub[iM] = c0, np.inf
    A = sparse.csr_array((vals, (rows, cols)), shape=(r, nv))
    return c, A, np.array(rl), np.array(ru), lb, ub, integ


def solve_window(problem: WindowProblem, backend, time_limit: float, rel_gap: float) -> WindowSolution:
    """Build and solve; raises whatever the backend raises (the policy catches)."""
    t0 = time.perf_counter()
    jobs = problem.jobs
    if not jobs:
        return WindowSolution({}, 0.0, "optimal", 0.0)
    c, A, rl, ru, lb, ub, integ = build_milp(problem)
    res = backend.solve(c, A, rl, ru, lb, ub, integ, time_limit=time_limit, rel_gap=rel_gap)
    if res.x is None:
        raise RuntimeError(f"window program: no solution ({res.status}: {res.message})")
    n = np.rint(res.x[: len(jobs)]).astype(int)
    counts = {j.job_id: int(min(max(v, 0), j.nmax)) for j, v in zip(jobs, n)}
    if not is_count_feasible(problem, counts):
        raise RuntimeError("window program: solver answer violates capacity")
    obj = objective_value(problem, counts)
    return WindowSolution(counts, obj, res.status, time.perf_counter() - t0, res.mip_gap,
                          {"rows": A.shape[0], "cols": A.shape[1]})
