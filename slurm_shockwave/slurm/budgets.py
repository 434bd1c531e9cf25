"""Market budgets from Slurm's association tree: shares, lowered by decayed usage, per user (docs/planning.md).

Only the associations with work count (those of this round's managed jobs, and their ancestor accounts). At each
node of the tree, its children with work split the node's part of the cluster; child c gets

    F_c = S_c * 2 ** (-U_c / S_c)        part_c = part_node * F_c / (sum of F over the children with work)

where S_c = RawShares_c / (sum of RawShares of those children) is its share and U_c = NormUsage_c / (sum of their
NormUsage) its part of their decayed usage (0 when they have none: shares alone).  NormUsage, not RawUsage: Slurm adds
an ended job's usage to RawUsage at once but a running job's only at its PriorityCalcPeriod ticks, so between ticks
RawUsage overstates whoever had jobs end (a preempted job's run ends too); NormUsage is recomputed for every
association at each tick (RawUsage stands in where sshare gives no NormUsage).  2 ** (-U/S) is Slurm's classic
fair-share factor; taken level by level among siblings, as Fair Tree compares them, an account that used more than
its share gets less, one that used less gets more, and one that used exactly its share keeps it (U = S for every
sibling gives F proportional to S): over time the GPU-time follows the shares.  A user's part is the product of the
parts down its path (root -> accounts -> user): account shares 3:1 give 3:1 whatever the number of users and jobs
in each, and a user's jobs share the user's part (solver/market/fairshare.py `user_shares`), so splitting a job
into ten buys nothing.

The budget of an association is ``n * part`` (n: the associations with work found in sshare; budgets average 1,
the budget of a job without shares), times the config's [weights] for its user and account; a job whose
association is not in sshare (no accounting, another cluster's account) gets budget 1 times those weights.  A
RawShares of ``parent`` counts as 1; all-zero siblings split equally.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from slurm_shockwave.slurm.shares import ShareRow

#: the smallest budget handed to the market (RawShares 0: it runs on what others leave)
MIN_BUDGET = 1e-6


@dataclass(frozen=True)
class Line:
    """What status shows of one account or user association with work."""

    account: str
    user: str
    raw_shares: int | None
    share: float  # its part of the cluster by shares alone (product of S down its path)
    usage: float  # its NormUsage over that of the accounts with work right under root
    part: float  # its part of the cluster: shares lowered (or raised) by usage
    raw_usage: float
    members: tuple = ()  # an account's (account, user) associations with work, at any depth below it


@dataclass(frozen=True)
class Budgets:
    """{(account, user): budget} of the associations with work, and the lines status shows."""

    budget: dict = field(default_factory=dict)
    users: tuple = ()
    accounts: tuple = ()
    missing: tuple = ()  # (account, user) with work but not in sshare

    def of(self, account: str, user: str) -> float | None:
        return self.budget.get((account, user))


def usage_of(rows: list[ShareRow]) -> list[float]:
    """The decayed usage the formula compares: NormUsage, or RawUsage where one of ``rows`` has none."""
    norm = [r.norm_usage for r in rows if r.norm_usage is not None]
    if len(norm) == len(rows):
        return [float(u) for u in norm]
    return [r.raw_usage for r in rows]


def _split(children: list[ShareRow], part: float) -> dict:
    """{row key: (share of the parent, usage of the parent, part of the cluster)} of these siblings."""
    shares = [1 if c.raw_shares is None else max(c.raw_shares, 0) for c in children]
    used = usage_of(children)
    total_s, total_u = sum(shares), sum(used)
    s = [x / total_s if total_s else 1 / len(children) for x in shares]
    u = [x / total_u if total_u else 0.0 for x in used]
    f = [si * 2.0 ** (-ui / si) if si > 0 else 0.0 for si, ui in zip(s, u, strict=True)]
    total_f = sum(f)
    parts = [part * fi / total_f if total_f > 0 else part / len(children) for fi in f]
    return {c.key: (si, ui, pi) for c, si, ui, pi in zip(children, s, u, parts, strict=True)}


def compute(rows: Iterable[ShareRow], active: Iterable[tuple[str, str]]) -> Budgets:
    """Budgets of the ``active`` (account, user) associations from sshare's ``rows`` (shares.py)."""
    rows = list(rows)
    by_key = {r.key: r for r in rows}
    accounts = {r.account: r for r in rows if not r.user}
    wanted = sorted(set(active))
    found = [k for k in wanted if k in by_key]
    missing = tuple(k for k in wanted if k not in by_key)
    # mark the path of every association with work, root first
    paths, on_path = {}, set()
    for key in found:
        path, a, seen = [key], key[0], set()
        while a in accounts and a not in seen:
            seen.add(a)
            path.append((a, ""))
            a = accounts[a].parent
        paths[key] = list(reversed(path))
        on_path |= set(path)
    children: dict = {}
    for key in on_path:
        row = by_key[key]
        parent = (row.account, "") if row.user else (row.parent, "")
        if parent != key and parent in on_path:
            children.setdefault(parent, []).append(row)
    below = {c.key for kids in children.values() for c in kids}
    tops = [by_key[k] for k in on_path if k not in below]
    figures: dict = {}  # key -> (share by shares alone, part of the cluster)
    todo = [(tops, 1.0, 1.0)] if tops else []
    while todo:
        kids, part, share = todo.pop()
        for key, (s, _u, p) in _split(sorted(kids, key=lambda r: r.key), part).items():
            figures[key] = (share * s, p)
            if key in children:
                todo.append((children[key], p, share * s))
    first = children.get(("root", ""), tops)  # the accounts with work right under root
    total_usage = sum(usage_of(first))
    n = len(found)

    def line(key) -> Line:
        row = by_key[key]
        share, part = figures[key]
        members = tuple(k for k in found if key in paths[k]) if not row.user else ()
        used = usage_of([row, *first])[0]
        return Line(
            row.account,
            row.user,
            row.raw_shares,
            share,
            used / total_usage if total_usage else 0.0,
            part,
            row.raw_usage,
            members,
        )

    budget = {k: max(n * figures[k][1], MIN_BUDGET) for k in found}
    if not all(math.isfinite(b) for b in budget.values()):
        raise ValueError("a budget is not finite")
    return Budgets(
        budget=budget,
        users=tuple(line(k) for k in found),
        accounts=tuple(line(k) for k in sorted(on_path) if k[1] == "" and k[0] != "root"),
        missing=missing,
    )
