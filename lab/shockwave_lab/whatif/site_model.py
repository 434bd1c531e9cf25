"""The site's Slurm in the simulator: the `slurm-multifactor` baseline (baselines/slurm_multifactor.py: multifactor
priority, conservative backfill; `slurm-preempt`'s requeue by priority when the site preempts) with the site's own
settings and its association tree, so that fair-share ranks associations as the site's Slurm does.

* `AssocTree`: accounts and user associations (account, user) with their RawShares, from sshare (slurm/shares.py);
  an association of the history that sshare does not list gets 1 share under its account (an account it does not
  list: 1 share under root).  No sshare at all: every account 1 share under root, every user 1 share in it
  (sacctmgr's default Fairshare=1).
* Fair Tree (PriorityFlags without NO_FAIR_TREE, Slurm's default): at each level the siblings are ordered by
  LevelFS = S / U (S = its RawShares over its siblings', U = its usage over its parent's; no usage: infinite), the
  tree is walked depth first in that order and the n user associations get 1, (n-1)/n, ..., 1/n in the order
  reached (users tied at one level: the same factor; accounts tied: their children merged and ranked
  together).  Checked against sshare's FairShare column on real trees of 22.05, 24.11 and 26.05
  (lab/tests/test_whatif.py).
* Classic (NO_FAIR_TREE): 2^(-U / S), S = the product of the normalised shares from root down to the association,
  U = its usage over everyone's (the baseline's formula with the site's shares; Slurm's classic also propagates a
  parent's effective usage: not modelled).

Usage is decayed GPU-seconds (the baseline's RawUsage: TRESBillingWeights billing GPUs), keyed by association.
Not registered as a policy (no `label`): `whatif.run` builds it and drives the round loop itself.
"""

from __future__ import annotations

import math

from shockwave_lab.baselines.slurm_multifactor import SlurmConfig, SlurmMultifactor

ROOT = "root"


class AssocTree:
    """Accounts (by name) and user associations ((account, user)) under root, with RawShares."""

    def __init__(self):
        self.parent: dict = {}  # node -> parent account
        self.shares: dict = {}  # node -> RawShares
        self.children: dict = {ROOT: []}

    def add(self, node, parent: str, shares: int | None) -> None:
        if node in self.parent or node == ROOT:
            return
        if parent not in self.children:
            self.add(parent, ROOT, 1)
        self.parent[node] = parent
        self.shares[node] = 1 if shares is None else max(0, int(shares))
        self.children[parent].append(node)
        if isinstance(node, str):
            self.children.setdefault(node, [])

    @classmethod
    def build(cls, share_rows, associations) -> AssocTree:
        """From sshare's rows (accounts before their users, as sshare lists them) and the history's (account, user)
        pairs."""
        tree = cls()
        for r in share_rows or ():
            if r.user:
                tree.add((r.account, r.user), r.account, r.raw_shares)
            elif r.account != ROOT:
                tree.add(r.account, r.parent or ROOT, r.raw_shares)
        for account, user in sorted(associations):
            tree.add((account, user), account, 1)
        return tree

    @property
    def users(self) -> list:
        return [n for n in self.parent if isinstance(n, tuple)]

    def norm_shares(self) -> dict:
        """{user association: product of its normalised shares from root down} (classic's S)."""
        out: dict = {}

        def walk(node, s):
            kids = self.children.get(node, [])
            total = sum(self.shares[k] for k in kids)
            for k in kids:
                x = s * self.shares[k] / total if total else 0.0
                if isinstance(k, tuple):
                    out[k] = x
                else:
                    walk(k, x)

        walk(ROOT, 1.0)
        return out

    def fair_tree(self, usage: dict) -> dict:
        """{user association: Fair Tree factor} for decayed usage {user association: GPU-seconds}."""
        below: dict = {}

        def used(node) -> float:
            if isinstance(node, tuple):
                x = usage.get(node, 0.0)
            else:
                x = sum(used(k) for k in self.children.get(node, []))
            below[node] = x
            return x

        used(ROOT)
        order: list = []  # (association, tie group)
        groups: list = []

        def level(k) -> float:
            kids = self.children[self.parent[k]]
            s_total = sum(self.shares[x] for x in kids)
            s = self.shares[k] / s_total if s_total else 0.0
            u_parent = below[self.parent[k]]
            u = below[k] / u_parent if u_parent > 0 else 0.0
            return math.inf if u <= 0 else s / u

        def walk(parents):
            """The children of `parents` (one account, or sibling accounts tied on LevelFS: their children are
            merged and ranked together, as Fair Tree does), in LevelFS order; tied users share a rank."""
            kids = [k for p in parents for k in self.children.get(p, [])]
            levels = {k: level(k) for k in kids}
            ranked = sorted(kids, key=lambda k: (-levels[k], str(k)))
            i = 0
            while i < len(ranked):
                tie = [k for k in ranked[i:] if levels[k] == levels[ranked[i]]]
                group = len(groups)
                groups.append(group)
                order.extend((k, group) for k in tie if isinstance(k, tuple))
                accounts = [k for k in tie if not isinstance(k, tuple)]
                if accounts:
                    walk(accounts)
                i += len(tie)

        walk([ROOT])
        n = len(order)
        out, first_of = {}, {}
        for i, (k, group) in enumerate(order):
            first_of.setdefault(group, i)
            out[k] = (n - first_of[group]) / n if n else 1.0
        return out


class SiteSlurm(SlurmMultifactor):
    """The slurm-multifactor model keyed by association, with the site's shares and fair-share algorithm."""

    name = "slurm-site"  # no label: not listed in the registry (built by whatif.run only)
    description = "the site's Slurm as `scontrol show config` and sshare describe it (whatif)"

    def __init__(
        self, config: SlurmConfig, tree: AssocTree, fair_tree: bool = True, preempt: bool = False, limits=None
    ):
        super().__init__(config, limits)
        self.tree = tree
        self.fair_tree_mode = fair_tree
        self.preempt = preempt
        self.norm = tree.norm_shares()
        self.factors: dict = {}

    @staticmethod
    def key(job) -> tuple:
        return (job.account or job.user, job.user)

    def _tick(self) -> None:
        self.factors = self.tree.fair_tree(self.seen) if self.fair_tree_mode else {}

    def fairshare(self, key) -> float:
        if self.fair_tree_mode:
            return self.factors.get(key, 1.0)
        total = sum(self.seen.values())
        s = self.norm.get(key, 0.0)
        if total <= 0:
            return 1.0
        return 2.0 ** (-(self.seen.get(key, 0.0) / total) / s) if s > 0 else 0.0
