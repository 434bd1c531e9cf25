"""Turning round counts into per-round job lists (docs/reference.md §2.4 rank step, §2.7 construct_schedules).

1. ``pack_rounds``: jobs in priority order (high w first) take the earliest rounds that still have room for their
   gang; this is the reference's rank MILP (min sum_i w_i * mean round index of i) done greedily.  Fragmentation
   (gangs > 1) can leave a job short; a cheap repair then moves other jobs (lowest priority first) out of the
   way into rounds where they still fit, and as a last resort the counts are re-packed by water-filling in
   decreasing gang size (kept only if it loses less).  Pinned jobs (run now) are never moved by either.
   Whatever still does not fit is reported as shortfall.  Capacity is checked at every placement, so no round
   is ever over-full.
2. ``backfill``: idle GPUs in each round go to jobs not yet in it, in the caller's order (Shockwave: its
   priority order), while they fit (work conservation).
3. ``max_min_round``: the fallback when there is neither a solution nor a usable cached plan: least attained
   (weighted) run time first, greedily while it fits.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence, Set
from typing import Any, cast

from solver.placement import Packer

# job ids are whatever the caller keys its jobs by (JobView.job_id: int | str; tests use other hashables)
_Gpus = Mapping[Any, int]
_Packing = tuple[list[int], list[set[Any]], dict[Any, int]]  # (free GPUs, members, shortfall) per round


def _by_rank(rank: dict[Any, int]) -> Callable[[Any], int]:
    """``rank.get`` as a sort key (every sorted id is ranked)."""
    return cast("Callable[[Any], int]", rank.get)


def _greedy_priority(order: Sequence[Any], gpus: _Gpus, counts: Mapping[Any, int], G: int, W: int) -> _Packing:
    free = [G] * W
    members: list[set[Any]] = [set() for _ in range(W)]
    short: dict[Any, int] = {}
    for j in order:
        g, n = gpus[j], counts.get(j, 0)
        if n <= 0:
            continue
        took = 0
        for t in range(W):
            if took >= n:
                break
            if free[t] >= g:
                free[t] -= g
                members[t].add(j)
                took += 1
        if took < n:
            short[j] = n - took
    return free, members, short


def _repair(
    order: Sequence[Any],
    gpus: _Gpus,
    free: list[int],
    members: list[set[Any]],
    short: dict[Any, int],
    W: int,
    pinned: Set[Any] = frozenset(),
) -> dict[Any, int]:
    rank = {j: r for r, j in enumerate(order)}
    for i in sorted(short, key=_by_rank(rank)):
        g = gpus[i]
        for t in range(W):
            if short[i] <= 0:
                break
            if i in members[t]:
                continue
            if free[t] < g:
                moves: list[tuple[Any, int]] = []
                victims = sorted((j for j in members[t] if j != i and j not in pinned), key=lambda j: -rank[j])
                for j in victims:
                    if free[t] >= g:
                        break
                    gj = gpus[j]
                    dest = next(
                        (
                            u
                            for u in list(range(t + 1, W)) + list(range(t))
                            if u != t and j not in members[u] and free[u] >= gj
                        ),
                        None,
                    )
                    if dest is None:
                        continue
                    members[t].discard(j)
                    free[t] += gj
                    members[dest].add(j)
                    free[dest] -= gj
                    moves.append((j, dest))
                if free[t] < g:  # undo
                    for j, dest in reversed(moves):
                        members[dest].discard(j)
                        free[dest] += gpus[j]
                        members[t].add(j)
                        free[t] -= gpus[j]
                    continue
            members[t].add(i)
            free[t] -= g
            short[i] -= 1
    return {j: s for j, s in short.items() if s > 0}


def _water_fill(
    order: Sequence[Any], gpus: _Gpus, counts: Mapping[Any, int], G: int, W: int, pinned: Set[Any] = frozenset()
) -> _Packing:
    rank = {j: r for r, j in enumerate(order)}
    free = [G] * W
    members: list[set[Any]] = [set() for _ in range(W)]
    short: dict[Any, int] = {}
    for j in order:  # pinned jobs keep the first rounds of the window, as in the greedy packing
        if j in pinned:
            for t in range(min(counts.get(j, 0), W)):
                if free[t] >= gpus[j]:
                    free[t] -= gpus[j]
                    members[t].add(j)
    for j in sorted((j for j in order if counts.get(j, 0) > 0 and j not in pinned), key=lambda j: (-gpus[j], rank[j])):
        g, n = gpus[j], counts[j]
        cand = sorted((t for t in range(W) if free[t] >= g), key=lambda t: (-free[t], t))[:n]
        for t in cand:
            free[t] -= g
            members[t].add(j)
        if len(cand) < n:
            short[j] = n - len(cand)

    # earlier rounds for the rounds holding higher-priority work
    def key(t: int) -> tuple[int, float]:
        ms = members[t]
        # rounds holding more pinned GPUs first: pinned jobs' rounds are nested prefixes, so they stay in front
        return (
            -sum(gpus[j] for j in ms if j in pinned),
            sum(rank[j] * gpus[j] for j in ms) / max(1, sum(gpus[j] for j in ms)) if ms else len(order),
        )

    perm = sorted(range(W), key=key)
    return [free[t] for t in perm], [members[t] for t in perm], short


def pack_rounds(
    order: Sequence[Any],
    gpus: _Gpus,
    counts: Mapping[Any, int],
    num_gpus: int,
    rounds: int,
    pinned: Iterable[Any] = (),
) -> tuple[list[list[Any]], dict[Any, int]]:
    """Per-round job lists realising ``counts`` as far as possible.

    ``order``: job ids, highest priority first.  ``pinned``: jobs that must hold the first ``counts[j]`` rounds
    of the window (jobs the policy runs now; first in ``order`` and fitting together in one round): the repair
    never moves them and the water-filling keeps them in front (without this, water-filling could drop them
    for a larger gang).  Returns (list of per-round id lists in priority order, shortfall dict job -> rounds
    it could not get).
    """
    G, W = int(num_gpus), int(rounds)
    order = [j for j in order if 0 < gpus[j] <= G]
    free, members, short = _greedy_priority(order, gpus, counts, G, W)
    pinned_set = frozenset(pinned)
    if short:
        short = _repair(order, gpus, free, members, dict(short), W, pinned_set)
    if short:
        free2, members2, short2 = _water_fill(order, gpus, counts, G, W, pinned_set)
        if sum(gpus[j] * s for j, s in short2.items()) < sum(gpus[j] * s for j, s in short.items()):
            free, members, short = free2, members2, short2
    rank = {j: r for r, j in enumerate(order)}
    plan = [sorted(m, key=_by_rank(rank)) for m in members]
    return plan, short


def backfill(plan: list[Any], candidates: Sequence[Hashable], gpus: _Gpus, num_gpus: int) -> list[list[Any]]:
    """Fill idle GPUs of every round with ``candidates`` (already sorted, first choice first)."""
    out: list[list[Any]] = []
    for ids in plan:
        ids = list(ids)
        used = sum(gpus[j] for j in ids)
        present = set(ids)
        free = num_gpus - used
        if free > 0:
            for j in candidates:
                if free <= 0:
                    break
                if j not in present and gpus[j] <= free:
                    ids.append(j)
                    present.add(j)
                    free -= gpus[j]
        out.append(ids)
    return out


def max_min_round(jobs: Iterable[tuple[Any, ...]], num_gpus: Mapping[str, int] | int) -> list[Any]:
    """Fallback allocation for one round: least attained run time per unit weight first, while it fits.

    ``jobs``: iterable of (job_id, gpus, run_time, weight, arrival_time[, gpu type asked for[, {type: it/s}]]);
    ``num_gpus``: the free GPUs, a number or {type: count} (solver/placement.py: with speeds, the fastest type).
    Repeated every round, this is a round-robin that equalises weighted attained service (max-min fairness in time)
    and never exceeds capacity.
    """
    packer = Packer(num_gpus)
    return [
        jid
        for jid, g, rt, w, arr, *gpu_type in sorted(jobs, key=lambda x: (x[2] / max(x[3], 1e-9), x[4], str(x[0])))
        if packer.take(g, *gpu_type)
    ]
