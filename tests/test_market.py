import itertools
import math
import random

import numpy as np
import pytest

from solver.market import (REFERENCE_BASES, FairShareTracker, HighsBackend, WindowProblem, backfill,
                           is_count_feasible, log_utility, make_window_job, max_min_round, momentum_average,
                           objective_value, pack_rounds, priority_weight, rho_hat, solve_window, uniform_share)
from solver.market.program import build_milp

EXACT = dict(time_limit=30, rel_gap=0.0)


def rand_jobs(rng, n, W, D, gangs=(1,), bases=None, weights=False):
    jobs, raw = [], []
    for i in range(n):
        E = rng.randint(2, 12)
        e = rng.randint(0, E - 1)
        d = rng.uniform(30, 400)
        R = rng.uniform(0.3, 1.5) * (E - e) * d
        w = rng.choice([1.0, 2.0, 5.0]) if weights else 1.0
        g = rng.choice(gangs)
        raw.append(dict(E=E, e=e, d=d, R=R, w=w, g=g))
        jobs.append(make_window_job(i, g, w, e, E, d, R, W, D, bases))
    return jobs, raw


def reference_objective(raw, x, W, D, k, bases):
    """The reference's relaxed objective for per-round binaries x[i][t] (p_i at its best value)."""
    N = len(raw)
    welfare, worst = 0.0, 0.0
    for r, row in zip(raw, x):
        n = sum(row)
        p = min(D * n / r["d"], r["E"] - r["e"])
        welfare += r["w"] * float(log_utility((r["e"] + p) / r["E"], bases))
        worst = max(worst, r["R"] - p * r["d"])
    return welfare / (N * W) - k * worst


def brute_force(raw, G, W, D, k, bases):
    """Enumerate every per-round schedule (each round: a subset of jobs fitting in G GPUs)."""
    N = len(raw)
    subsets = [s for s in itertools.product((0, 1), repeat=N) if sum(r["g"] * b for r, b in zip(raw, s)) <= G]
    best = -math.inf
    for rounds in itertools.product(subsets, repeat=W):
        x = [[rounds[t][i] for t in range(W)] for i in range(N)]
        best = max(best, reference_objective(raw, x, W, D, k, bases))
    return best


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("bases", [None, REFERENCE_BASES])
def test_window_program_matches_brute_force_unit_gangs(seed, bases):
    rng = random.Random(seed)
    W, D, G = 3, 120.0, rng.choice([1, 2])
    k = rng.choice([0.0, 1e-3, 1e-1])
    jobs, raw = rand_jobs(rng, 3, W, D, bases=bases, weights=True)
    prob = WindowProblem(jobs, G, W, D, k)
    sol = solve_window(prob, HighsBackend(), **EXACT)
    assert sol.objective == pytest.approx(brute_force(raw, G, W, D, k, bases), abs=1e-7)


@pytest.mark.parametrize("seed", range(10))
def test_window_program_with_gangs_bounds_brute_force(seed):
    # with gangs > 1 the aggregate (per-size) capacity rows relax per-round capacity: the program's optimum is
    # an upper bound, reached whenever its counts pack into the rounds (then the packed plan is a per-round
    # schedule with the same objective)
    rng = random.Random(100 + seed)
    W, D, G = 3, 120.0, 4
    k = rng.choice([1e-4, 1e-2])
    jobs, raw = rand_jobs(rng, 4, W, D, gangs=(1, 2, 4), weights=True)
    prob = WindowProblem(jobs, G, W, D, k)
    sol = solve_window(prob, HighsBackend(), **EXACT)
    best = brute_force(raw, G, W, D, k, None)
    assert sol.objective >= best - 1e-7
    gpus = {j.job_id: j.gpus for j in jobs}
    plan, short = pack_rounds(list(sol.counts), gpus, sol.counts, G, W)
    for t_ids in plan:
        assert sum(gpus[i] for i in t_ids) <= G
    realised = {i: sum(i in t_ids for t_ids in plan) for i in sol.counts}
    for i, n in sol.counts.items():
        assert realised[i] == n - short.get(i, 0)
    assert objective_value(prob, realised) <= best + 1e-7
    if not short:
        assert sol.objective == pytest.approx(best, abs=1e-7)


def test_objective_value_consistent_with_milp_encoding():
    rng = random.Random(7)
    jobs, raw = rand_jobs(rng, 6, 5, 120.0, gangs=(1, 2))
    prob = WindowProblem(jobs, 4, 5, 120.0, 1e-3)
    c, A, rl, ru, lb, ub, integ, const = build_milp(prob)
    assert A.shape[1] == len(jobs) + sum(j.nmax for j in jobs) + 1
    sol = solve_window(prob, HighsBackend(), **EXACT)
    assert is_count_feasible(prob, sol.counts)
    assert sol.objective == pytest.approx(objective_value(prob, sol.counts))
    # the encoding's objective at the solution (y filled in order) is the program's objective
    x = np.zeros(len(c))
    N, off = len(jobs), 0
    for i, j in enumerate(jobs):
        n = sol.counts[j.job_id]
        x[i] = n
        x[N + off: N + off + n] = 1.0
        off += j.nmax
    x[-1] = max([0.0] + [max(j.remaining - prob.round_length * sol.counts[j.job_id], j.floor) for j in jobs])
    assert -(c @ x) - const == pytest.approx(sol.objective)


@pytest.mark.parametrize("seed", range(6))
def test_lp_first_rounding_is_within_the_gap_of_the_exact_program(seed, monkeypatch):
    """Large programs take the LP relaxation's rounding when it is certified within the gap."""
    import solver.market.program as program
    rng = random.Random(100 + seed)
    jobs, _ = rand_jobs(rng, 40, 10, 120.0, gangs=(1, 2, 4))
    prob = WindowProblem(jobs, 16, 10, 120.0, 1e-4)
    exact = solve_window(prob, HighsBackend(), **EXACT)
    monkeypatch.setattr(program, "LP_FIRST_MIN_JOBS", 1)
    fast = solve_window(prob, HighsBackend(), time_limit=30, rel_gap=1e-3)
    assert is_count_feasible(prob, fast.counts)
    assert fast.objective >= exact.objective - 1e-3 * max(abs(exact.objective), 1e-9) - 1e-9


@pytest.mark.parametrize("seed", range(40))
def test_capacity_never_exceeded_per_round(seed):
    rng = random.Random(seed)
    G = rng.choice([3, 8, 10, 12, 32])
    W = rng.choice([1, 4, 20])
    gangs = [g for g in (1, 2, 3, 4, 8) if g <= G]
    n = rng.randint(1, 40)
    gpus = {i: rng.choice(gangs) for i in range(n)}
    counts = {i: rng.randint(0, W) for i in range(n)}
    order = list(range(n))
    rng.shuffle(order)
    plan, short = pack_rounds(order, gpus, counts, G, W)
    plan = backfill(plan, order, gpus, G)
    assert len(plan) == W
    for ids in plan:
        assert len(set(ids)) == len(ids)
        assert sum(gpus[i] for i in ids) <= G
    placed = {i: sum(i in ids for ids in plan) for i in range(n)}
    for i in range(n):
        assert placed[i] >= counts[i] - short.get(i, 0)


@pytest.mark.parametrize("seed", range(40))
def test_pack_realises_counts_of_a_real_schedule_mostly(seed):
    # counts taken from a random per-round-feasible schedule: packing + repair never over-fills a round and
    # loses at most a few job-rounds (fragmentation), which backfill then reuses
    rng = random.Random(seed)
    G, W = rng.choice([8, 16, 32]), rng.choice([2, 5, 20])
    n = rng.randint(1, 60)
    gpus = {i: rng.choice([1, 1, 1, 2, 2, 4, 8]) for i in range(n)}
    counts = {i: 0 for i in range(n)}
    for t in range(W):
        free = G
        for i in rng.sample(range(n), n):
            if gpus[i] <= free and rng.random() < 0.7:
                free -= gpus[i]
                counts[i] += 1
    order = list(range(n))
    rng.shuffle(order)
    plan, short = pack_rounds(order, gpus, counts, G, W)
    for ids in plan:
        assert sum(gpus[i] for i in ids) <= G
    lost = sum(gpus[i] * s for i, s in short.items())
    assert lost <= 0.05 * G * W + 8


def test_priority_order_puts_high_priority_first():
    gpus = {"a": 1, "b": 1, "c": 1}
    plan, short = pack_rounds(["c", "a", "b"], gpus, {"a": 1, "b": 1, "c": 1}, 1, 3)
    assert plan == [["c"], ["a"], ["b"]] and short == {}


def test_equal_jobs_equal_shares():
    D, W = 120.0, 4
    for G, n in [(2, 4), (1, 2), (3, 6)]:
        jobs = [make_window_job(i, 1, 1.0, 2, 100, 200.0, 98 * 200.0, W, D) for i in range(n)]
        sol = solve_window(WindowProblem(jobs, G, W, D, 1e-3), HighsBackend(), **EXACT)
        vals = list(sol.counts.values())
        assert max(vals) - min(vals) <= 0 and sum(vals) == G * W


@pytest.mark.parametrize("seed", range(15))
def test_doubling_weight_never_lowers_share(seed):
    rng = random.Random(seed)
    W, D, G = 4, 120.0, rng.choice([1, 2, 3])
    jobs, raw = rand_jobs(rng, 5, W, D, weights=True, gangs=(1, 2) if G > 1 else (1,))
    k = rng.choice([0.0, 1e-4])
    base = solve_window(WindowProblem(jobs, G, W, D, k), HighsBackend(), **EXACT)
    for target in range(len(jobs)):
        j2 = list(jobs)
        old = jobs[target]
        j2[target] = type(old)(old.job_id, old.gpus, old.weight * 2, old.utility, old.remaining, old.floor)
        sol = solve_window(WindowProblem(j2, G, W, D, k), HighsBackend(), **EXACT)
        assert sol.counts[target] >= base.counts[target] or \
            old.utility[sol.counts[target]] == pytest.approx(old.utility[base.counts[target]])


def test_log_utility_reference_bases():
    x = np.array([0.0, 0.1, 0.2, 1.0])
    v = log_utility(x, REFERENCE_BASES)
    assert v[0] == pytest.approx(math.log(1e-6))
    assert v[1] == pytest.approx((math.log(1e-6) + math.log(0.2)) / 2)
    assert v[3] == 0.0
    assert log_utility(0.5)[()] == pytest.approx(math.log(0.5))


def test_window_job_nmax_and_utility():
    j = make_window_job("a", 1, 1.0, 8, 10, 100.0, 250.0, 20, 120.0)
    assert j.nmax == 2                      # ceil(2 epochs * 100 s / 120 s)
    assert j.utility[-1] == pytest.approx(0.0)
    assert j.floor == pytest.approx(250.0 - 200.0)
    assert make_window_job("b", 1, 1.0, 10, 10, 100.0, 0.0, 20, 120.0).nmax == 0


def test_fairshare_momentum_average():
    assert momentum_average([(0, 100.0)], 0) == pytest.approx(100.0)
    # estimates at rounds 0 and 6, now round 10: pi = (6/10, 4/10)
    v = momentum_average([(0, 100.0), (6, 200.0)], 10)
    assert v == pytest.approx(0.9 * (0.6 * 100 + 0.4 * 200) + 0.1 * 200)
    t = FairShareTracker()
    t.reestimate(0, {"a": 100.0, "b": 50.0})
    t.reestimate(6, {"a": 200.0})
    t.forget(["a"])
    assert not t.has("b") and t.fbar("a", 10) == pytest.approx(v)
    t2 = FairShareTracker()
    t2.load_state_dict(t.state_dict())
    assert t2.fbar("a", 10) == pytest.approx(v)


def test_rho_and_priority_rules():
    assert uniform_share(32, 64) == 0.5 and uniform_share(32, 10) == 1.0
    assert rho_hat(100.0, 50.0, 0.5, 400.0) == pytest.approx(0.5)
    lw, w = priority_weight(1.2, 1000.0, 120.0, 1.0, 12.0)
    assert w == pytest.approx(1.2 ** 12)
    lw, w = priority_weight(1.2, 60.0, 120.0, 1.0, 12.0)      # finishes within a round: rho^100
    assert lw == pytest.approx(100 * math.log(1.2))
    assert priority_weight(0.9, 60.0, 120.0, 1.0, 12.0)[1] == 1.0
    assert priority_weight(1.2, 1000.0, 120.0, 1.0, 12.0, budget=3.0)[1] == pytest.approx(3 * 1.2 ** 12)


def test_max_min_round_fallback():
    jobs = [("a", 2, 100.0, 1.0, 0.0), ("b", 1, 10.0, 1.0, 0.0), ("c", 2, 50.0, 1.0, 0.0),
            ("d", 1, 500.0, 1.0, 0.0)]
    assert max_min_round(jobs, 3) == ["b", "c"]
    assert max_min_round(jobs, 4) == ["b", "c", "d"]
    # weight 10 divides attained service
    jobs[0] = ("a", 2, 100.0, 10.0, 0.0)
    assert max_min_round(jobs, 3)[0] == "a"


def test_pinned_jobs_keep_the_first_rounds_when_packing_repairs():
    # the greedy packing leaves the 4-GPU gang short; water-filling (fewer GPU-rounds short) would place the
    # gang first and drop job "a", which the policy forces to run now: pinned, "a" keeps every round
    gpus, counts = {"a": 2, "b": 1, "c": 4}, {"a": 4, "b": 4, "c": 4}
    plan, short = pack_rounds(["a", "b", "c"], gpus, counts, 4, 4)
    assert all("a" not in r for r in plan)           # what happened before pinning
    plan, short = pack_rounds(["a", "b", "c"], gpus, counts, 4, 4, pinned=["a"])
    assert all("a" in r for r in plan) and short == {"c": 4}
