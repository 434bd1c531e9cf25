"""The window program (the reference's relaxed Eisenberg-Gale program, docs/reference.md §2.2-§2.4), built on
round counts.

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

import heapq
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from scipy import sparse

if TYPE_CHECKING:
    from solver.market.backends import Backend

LOG_FLOOR = 1e-6
REFERENCE_BASES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
# With at least this many jobs the LP relaxation is solved first and its rounding kept when it is certified
# within the relative gap (solve_window); smaller programs go straight to the MILP, which is fast there.
LP_FIRST_MIN_JOBS = 1
MAX_SOLVER_WEIGHT = 1e8  # w_i is clipped here for the solver (rho^100 overflows); ranking uses log w


def log_utility(x: np.ndarray, bases: Iterable[float] | None = None, offset: float = 0.0) -> np.ndarray:
    """L(x): exact log floored at LOG_FLOOR, or the reference's PL interpolation through ``bases``.

    ``offset`` > 0 (exact log only): ``log(x + offset)``, a utility whose first steps are not worth orders of
    magnitude more than the last ones (with the 1e-6 floor a job's first round is worth ~12 nats and its last
    epoch ~1/E nats, so nearly finished jobs always lose to new ones).
    """
    x = np.clip(np.asarray(x, dtype=float), 0.0, 1.0)
    if bases is None:
        if offset > 0:
            return np.log(x + offset)
        return cast(np.ndarray, np.log(np.maximum(x, LOG_FLOOR)))
    b = np.asarray(sorted(float(v) for v in bases), dtype=float)
    vals = np.log(np.maximum(b, LOG_FLOOR))
    return cast(np.ndarray, np.interp(x, b, vals))


@dataclass
class WindowJob:
    job_id: Any
    gpus: int
    weight: float  # w_i for the solver (already clipped)
    utility: np.ndarray  # f_i(0..nmax_i)
    remaining: float  # R_i (s)
    floor: float  # R_i - (E_i - e_i) d_i : remaining time the window cannot remove
    min_rounds: int = 0  # planned at least this many rounds (a finishing job: to completion)

    @property
    def nmax(self) -> int:
        return len(self.utility) - 1


@dataclass
class WindowProblem:
    jobs: list[WindowJob]
    num_gpus: int
    rounds: int
    round_length: float
    k: float


@dataclass
class WindowSolution:
    counts: dict[Any, Any]  # job_id -> n_i
    objective: float
    status: str  # optimal | time_limit | ...
    solve_time: float
    mip_gap: float | None = None
    info: dict[Any, Any] = field(default_factory=dict)


def make_window_job(
    job_id: Any,
    gpus: int,
    weight: float,
    epochs_done: float,
    total_epochs: float,
    mean_epoch_duration: float,
    remaining: float,
    rounds: int,
    round_length: float,
    bases: Iterable[float] | None = None,
    offset: float = 0.0,
) -> WindowJob:
    """Utility table f(0..nmax) for one job (see module docstring).

    ``mean_epoch_duration``: the duration of the epochs still to run (the policy passes R-hat / epochs left, the
    predicted regimes' durations); ``offset``: see ``log_utility``.
    """
    E = max(float(total_epochs), 1e-9)
    e = min(max(float(epochs_done), 0.0), E)
    d = max(float(mean_epoch_duration), 1e-9)
    left = E - e
    nmax = int(min(rounds, math.ceil(left * d / round_length - 1e-9))) if left > 0 else 0
    nmax = max(nmax, 0)
    m = np.arange(nmax + 1, dtype=float)
    x = (e + np.minimum(round_length * m / d, left)) / E
    f = log_utility(x, bases, offset)
    w = float(min(max(weight, 0.0), MAX_SOLVER_WEIGHT))
    return WindowJob(job_id, int(gpus), w, f, float(remaining), float(remaining) - left * d)


def capacity_classes(gpus: np.ndarray, num_gpus: int) -> list[tuple[int, float]]:
    """(size s, capacity per round for jobs with g >= s) for every distinct gang size."""
    out = []
    for s in sorted(set(int(g) for g in gpus)):
        out.append((s, float(s * (num_gpus // s))))
    return out


def objective_value(problem: WindowProblem, counts: dict[Any, Any]) -> float:
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


def is_count_feasible(problem: WindowProblem, counts: dict[Any, Any]) -> bool:
    g = np.array([j.gpus for j in problem.jobs])
    n = np.array([counts.get(j.job_id, 0) for j in problem.jobs])
    if np.any(n < 0) or any(c > j.nmax for c, j in zip(n, problem.jobs, strict=False)):
        return False
    for s, cap in capacity_classes(g, problem.num_gpus):
        if float(np.sum((g * n)[g >= s])) > problem.rounds * cap + 1e-9:
            return False
    return True


def build_milp(
    problem: WindowProblem,
) -> tuple[np.ndarray, Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Matrices for ``min c.x  s.t.  rl <= A x <= ru, lb <= x <= ub``; plus integrality (and the constant).

    x = [n (N, integer), y (sum_i nmax_i, in [0, 1]), M]: ``n_i = sum_m y_im`` and job i's utility is
    ``f_i(0) + sum_m (f_i(m+1) - f_i(m)) y_im``.  f_i is concave, so an optimum fills each job's y in order and
    this equals the hypograph of f_i at every integer n_i; the model has one row per job (not one per piece),
    which HiGHS solves several times faster.  Returns (c, A, rl, ru, lb, ub, integ, const) where the program's
    objective is ``-(c.x) - const``.
    """
    jobs = problem.jobs
    N, W, D = len(jobs), problem.rounds, problem.round_length
    scale = 1.0 / (N * W)
    nm = np.array([j.nmax for j in jobs], dtype=np.int64)
    off = np.concatenate([[0], np.cumsum(nm)]).astype(np.int64)
    Y = int(off[-1])
    nv = N + Y + 1
    iM = N + Y
    c = np.zeros(nv)
    lb = np.zeros(nv)
    ub = np.zeros(nv)
    integ = np.zeros(nv, dtype=np.uint8)
    integ[:N] = 1
    ub[:N] = nm
    lb[:N] = [min(max(int(j.min_rounds), 0), j.nmax) for j in jobs]
    ub[N : N + Y] = 1.0
    const = 0.0
    for i, j in enumerate(jobs):
        if j.nmax:
            c[N + off[i] : N + off[i + 1]] = -scale * j.weight * np.diff(j.utility)
        const -= scale * j.weight * float(j.utility[0])
    g = np.array([j.gpus for j in jobs], dtype=float)
    c0 = max([0.0] + [j.floor for j in jobs])
    rows = [np.arange(N), np.repeat(np.arange(N), nm)]
    cols = [np.arange(N), N + np.arange(Y)]
    vals = [np.ones(N), -np.ones(Y)]
    rl, ru = [np.zeros(N)], [np.zeros(N)]
    r = N
    rem = np.array([j.remaining for j in jobs], dtype=float)
    bind = np.nonzero(rem > c0)[0]  # M + D n_i >= R_i only where it can bind above c0
    kb = len(bind)
    rows += [r + np.arange(kb), r + np.arange(kb)]
    cols += [np.full(kb, iM), bind]
    vals += [np.ones(kb), np.full(kb, float(D))]
    rl.append(rem[bind])
    ru.append(np.full(kb, np.inf))
    r += kb
    for s, cap in capacity_classes(g, problem.num_gpus):
        idx = np.nonzero(g >= s)[0]
        rows.append(np.full(len(idx), r))
        cols.append(idx)
        vals.append(g[idx])
        rl.append(np.array([-np.inf]))
        ru.append(np.array([W * cap]))
        r += 1
    c[iM] = problem.k
    lb[iM], ub[iM] = c0, np.inf
    A = sparse.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, nv))
    return c, A, np.concatenate(rl), np.concatenate(ru), lb, ub, integ, const


def _round_and_fill(problem: WindowProblem, x_n: np.ndarray) -> dict[Any, Any]:
    """Integer counts from an LP solution: round down (never over capacity), then add rounds greedily by
    utility gain per GPU while every capacity class has room (adding a round never lowers the objective)."""
    jobs = problem.jobs
    W = problem.rounds
    n = np.clip(np.floor(x_n + 1e-6), 0, [j.nmax for j in jobs]).astype(int)
    for i, j in enumerate(jobs):
        n[i] = max(n[i], min(int(j.min_rounds), j.nmax))
    g = np.array([j.gpus for j in jobs])
    classes = capacity_classes(g, problem.num_gpus)
    room = {s: W * cap - float(np.sum((g * n)[g >= s])) for s, cap in classes}
    sizes = [s for s, _ in classes]

    def step_gain(i: int) -> float:
        j = jobs[i]
        return -j.weight * float(j.utility[n[i] + 1] - j.utility[n[i]]) / j.gpus

    heap = [(step_gain(i), -j.remaining, i) for i, j in enumerate(jobs) if n[i] < j.nmax]
    heapq.heapify(heap)
    while heap:
        _, neg_rem, i = heapq.heappop(heap)
        gi = int(g[i])
        if not all(room[s] >= gi for s in sizes if s <= gi):
            continue
        n[i] += 1
        for s in sizes:
            if s <= gi:
                room[s] -= gi
        if n[i] < jobs[i].nmax:
            heapq.heappush(heap, (step_gain(i), neg_rem, i))
    return {j.job_id: int(v) for j, v in zip(jobs, n, strict=False)}


def solve_window(problem: WindowProblem, backend: Backend, time_limit: float, rel_gap: float) -> WindowSolution:
    """Build and solve; raises whatever the backend raises (the policy catches).

    With ``LP_FIRST_MIN_JOBS`` jobs or more, first the LP relaxation, rounded (``_round_and_fill``): the LP
    optimum bounds the program's optimum, so when the rounded counts are within ``rel_gap`` of it they carry
    the same guarantee as the MILP's answer (the LP leaves at most one fractional count per coupling row);
    otherwise (and for smaller programs) the MILP itself, and the better of the two is kept.
    """
    t0 = time.perf_counter()
    jobs = problem.jobs
    if not jobs:
        return WindowSolution({}, 0.0, "optimal", 0.0)
    c, A, rl, ru, lb, ub, integ, const = build_milp(problem)
    N = len(jobs)
    best, status, gap, lp_bound = None, "", None, None
    lp = None
    if N >= LP_FIRST_MIN_JOBS:
        lp = backend.solve(c, A, rl, ru, lb, ub, np.zeros_like(integ), time_limit=time_limit, rel_gap=rel_gap)
    if lp is not None and lp.x is not None and lp.status == "optimal":
        lp_bound = -float(np.dot(c, lp.x)) - const
        counts = _round_and_fill(problem, np.asarray(lp.x[:N]))
        if is_count_feasible(problem, counts):
            obj = objective_value(problem, counts)
            gap = (lp_bound - obj) / max(abs(lp_bound), abs(obj), 1e-9)
            best, status = (counts, obj), "optimal_lp_rounded"
    if best is None or gap is None or gap > rel_gap:
        left = max(time_limit - (time.perf_counter() - t0), 0.05 * time_limit)
        res = backend.solve(c, A, rl, ru, lb, ub, integ, time_limit=left, rel_gap=rel_gap)
        if res.x is not None:
            n = np.rint(res.x[:N]).astype(int)
            counts = {j.job_id: int(min(max(v, 0), j.nmax)) for j, v in zip(jobs, n, strict=False)}
            if is_count_feasible(problem, counts):
                obj = objective_value(problem, counts)
                if best is None or obj > best[1]:
                    best, status, gap = (counts, obj), res.status, res.mip_gap
        elif best is None:
            raise RuntimeError(f"window program: no solution ({res.status}: {res.message})")
    if best is None:
        raise RuntimeError("window program: solver answer violates capacity")
    counts, obj = best
    return WindowSolution(
        counts,
        obj,
        status,
        time.perf_counter() - t0,
        gap,
        {"rows": A.shape[0], "cols": A.shape[1], "lp_bound": lp_bound},
    )
