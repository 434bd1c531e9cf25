"""Nodes on Slurm: what each node has for the managed jobs, where a managed job runs, and how a pending job that the
round placed on nodes is pinned there before its release.

* The view (``ClusterView.nodes``): every available node of the partition with GPUs, as (its GPU type, its GPUs less
  those of the running jobs the controller does not manage on it, whatever their partition).  A running job's GPUs
  on each of its nodes come from its ``gres_detail`` (one entry per node), else its per-node request, else its total
  spread over its nodes.  The capacity per type is the sum of the nodes' values (``NodePins.capacity``).  A node with
  GPUs of several types cannot be one (type, count) pair: then the view lists no nodes (one pool per type, as before).
* A running managed job's nodes (``JobView.nodes``) are its ``nodes`` hostlist, expanded (``gpu[01-03],x5``).
* Pinning (only a pending job the round runs, never one whose user asked for nodes, ``--nodelist``/``-w``: the squeue
  JSON's ``required_nodes``, unless the controller wrote it; the solver places such a job on exactly those nodes,
  ``JobView.allowed_nodes``): ``scontrol update JobId=<id> NodeList=<a,b>`` before its
  release; ``NodeList=`` clears it.  Slurm 22.05, 24.11 and 26.05 all refuse an id list with ``NodeList``
  (``Invalid job ID 2,4``, rc 1, nothing updated), so each job is a line ``update JobId=<id> NodeList=<a,b>``, all
  of a round's read by one scontrol from its standard input (commands.SlurmCLI.scontrol_update_jobs).
  What the controller wrote is journalled (verb ``place_nodes``, intents too), which tells its pin from the user's.
* A move (authoritative mode): a running managed job whose assigned nodes differ from the nodes it runs on is treated
  by the reconcile like one that lost its round (held, signalled, requeued held), and pinned to its new nodes when
  a later round runs it; a job whose user asked for its nodes never moves.
"""

from __future__ import annotations

import json
import logging
import re

from slurm_shockwave.slurm.enact import PIN_VERB, Action
from slurm_shockwave.slurm.gpu_types import gpu_entry
from slurm_shockwave.slurm.models import SlurmJob, SlurmNode, node_in_partition
from solver.types import GPU

log = logging.getLogger("slurm_shockwave.slurm")

VERB = PIN_VERB
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")
#: one item of a hostlist: names and bracket groups up to a comma outside brackets (``a[1,3]-b[2-4]``)
_ITEM_RE = re.compile(r"(?:[^,\[\]]|\[[^\[\]]*\])+")
#: node names a hostlist may expand to before it is refused as unreadable (a typo such as node[1-999999999])
MAX_HOSTS = 100_000


def _expand_one(name: str) -> list[str]:
    """One hostlist item, each bracket group a range list (``rack[1-2]-gpu[01,03]`` -> 4 names, zero padding kept)."""
    head, sep, rest = name.partition("[")
    if not sep:
        return [name]
    body, close, tail = rest.partition("]")
    if not close:
        raise ValueError(f"unclosed bracket in {name!r}")
    values: list[str] = []
    for item in body.split(","):
        m = _RANGE_RE.match(item.strip())
        if not m:
            raise ValueError(f"bad range {item!r} in {name!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo) or int(hi) - int(lo) >= MAX_HOSTS:
            raise ValueError(f"bad range {item!r} in {name!r}")
        width = len(lo) if lo.startswith("0") else 0
        values.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    tails = _expand_one(tail)
    if len(values) * len(tails) > MAX_HOSTS:  # checked before the product is built
        raise ValueError(f"{name[:60]!r} names more than {MAX_HOSTS} nodes")
    return [f"{head}{v}{t}" for v in values for t in tails]


def expand_hostlist(text: str | None) -> tuple[str, ...]:
    """Slurm's hostlist syntax as node names, in order, without repeats: ``gpu[01-03],x5`` -> gpu01 gpu02 gpu03 x5.
    ``""`` and ``(null)`` are no nodes; raises ValueError on text that is not a hostlist."""
    text = (text or "").strip()
    if text in ("", "(null)", "None"):
        return ()
    items = _ITEM_RE.findall(text)
    if ",".join(items) != text:
        raise ValueError(f"unbalanced brackets or empty item in {text[:60]!r}")
    out: list[str] = []
    for item in items:
        out.extend(_expand_one(item))
        if len(out) > MAX_HOSTS:
            raise ValueError(f"hostlist {text[:60]!r} names more than {MAX_HOSTS} nodes")
    bad = [n for n in out if not _NAME_RE.match(n)]
    if bad:
        raise ValueError(f"bad node name {bad[0]!r} in {text[:60]!r}")
    return tuple(dict.fromkeys(out))


def _nodes_of(text) -> tuple[str, ...]:
    """expand_hostlist that never raises (an unreadable list is no nodes: nothing is pinned or moved on it)."""
    try:
        return expand_hostlist(text)
    except ValueError as e:
        log.debug("unreadable node list %r: %s", text, e)
        return ()


def pin_value(nodes) -> str:
    """The NodeList= value for these nodes (comma-separated names, which every version accepts)."""
    return ",".join(nodes)


def per_node_gpus(job, nodes: tuple) -> dict[str, int]:
    """{node: GPUs of this running job on it}: its gres_detail (one entry per node), else its per-node request,
    else its total spread over its nodes (the first ones take the remainder)."""
    if not nodes or job.gpus <= 0:
        return {}
    detail = [e for e in (gpu_entry(d) for d in job.gres_detail) if e is not None]
    if len(detail) == len(nodes):
        return {n: c for n, (_t, c) in zip(nodes, detail, strict=True)}
    if job.gpus_per_node:
        return {n: int(job.gpus_per_node) for n in nodes}
    share, extra = divmod(int(job.gpus), len(nodes))
    return {n: share + (1 if i < extra else 0) for i, n in enumerate(nodes)}


def journal_pins(state) -> dict[int, set]:
    """job -> every node set (frozenset) the controller wrote into its required node list (intents too)."""
    ours: dict[int, set] = {}
    rows = state.actions(verb=VERB) if state is not None else []
    for row in sorted(rows, key=lambda r: r["id"]):
        try:
            value = json.loads(row["value"]) if isinstance(row.get("value"), str) else row.get("value")
        except ValueError:
            value = row.get("value")
        nodes = _nodes_of(value) if isinstance(value, str) else ()
        if nodes:
            ours.setdefault(int(row["job_id"]), set()).add(frozenset(nodes))
    return ours


class NodePins:
    """One round's nodes on Slurm (see the module docstring).  ``ours``: job -> the node sets the controller wrote
    into its required node list, read back from the journal and kept up to date as it pins."""

    def __init__(self, state=None):
        self.ours: dict[int, set] = journal_pins(state)
        self.view: dict[str, tuple[str, int]] = {}
        self.jobs: dict = {}
        self._warned = False

    def observe(
        self, nodes: list[SlurmNode], jobs: list[SlurmJob], managed_ids: set, partition: str | None
    ) -> dict[str, tuple[str, int]]:
        """ClusterView.nodes: {node: (type, GPUs for managed jobs)}; {} when a node has several GPU types."""
        view: dict[str, tuple[str, int]] = {}
        self.jobs = {j.job_id: j for j in jobs if j.job_id in managed_ids}
        listed = {j.job_id for j in jobs}
        self.ours = {k: v for k, v in self.ours.items() if k in listed}
        for n in nodes:
            if not (n.available and node_in_partition(n, partition)):
                continue
            by = {t: c for t, c in n.by_type if c > 0} or ({GPU: n.gpus} if n.gpus else {})
            if len(by) > 1:
                if not self._warned:
                    log.warning(
                        "node %s has GPUs of several types (%s): jobs are not pinned to nodes",
                        n.name,
                        ", ".join(sorted(by)),
                    )
                    self._warned = True
                self.view = {}
                return {}
            if by:
                ((t, c),) = by.items()
                view[n.name] = (t, int(c))
        for j in jobs:
            if j.job_id in managed_ids or j.state != "RUNNING" or j.gpus <= 0:
                continue
            for name, used in per_node_gpus(j, _nodes_of(j.nodes)).items():
                if name in view:
                    t, c = view[name]
                    view[name] = (t, max(0, c - used))
        self.view = view
        return dict(view)

    def capacity(self) -> dict[str, int]:
        """{type: GPUs for managed jobs}: the sum of the nodes' values per type."""
        out: dict[str, int] = {}
        for t, c in self.view.values():
            out[t] = out.get(t, 0) + c
        return out

    @staticmethod
    def running_on(job: SlurmJob) -> tuple[str, ...]:
        """JobView.nodes: the nodes a running job runs on (empty otherwise)."""
        return _nodes_of(job.nodes) if job.state == "RUNNING" else ()

    def user_pinned(self, job: SlurmJob) -> bool:
        """Did the job's user (not the controller) ask for its nodes?"""
        return bool(self.user_nodes(job))

    def user_nodes(self, job: SlurmJob) -> tuple[str, ...]:
        """JobView.allowed_nodes: the nodes the job's user (not the controller) asked for; empty: none."""
        req = _nodes_of(job.required_nodes)
        return req if req and frozenset(req) not in self.ours.get(job.job_id, ()) else ()

    def pins(self, assigned: dict, run: set) -> list[Action]:
        """The actions that pin each pending job of `run` to its assigned nodes (one per node value; the job's
        required node list already says so: none; a per-node GPU request assigned another number of nodes than it
        asks for is left to Slurm), recorded as ours before any call.  A pending planned job that
        the round gave no nodes (a view without nodes) loses a pin of ours (``NodeList=``)."""
        groups: dict[str, list] = {}
        for jid in sorted(run):
            job = self.jobs.get(jid)
            if job is None or job.state != "PENDING" or self.user_pinned(job):
                continue
            want = tuple(assigned.get(jid) or ())
            have = frozenset(_nodes_of(job.required_nodes))
            if want and (
                not all(_NAME_RE.match(str(n)) for n in want)
                or (job.gpus_per_node and len(want) != max(job.num_nodes, 1))
            ):
                continue  # a per-node request on another node count would change its GPUs
            if frozenset(want) == have:
                continue
            groups.setdefault(pin_value(want), []).append(jid)
            if want:
                self.ours.setdefault(jid, set()).add(frozenset(want))
        return [Action(VERB, tuple(ids), value) for value, ids in sorted(groups.items())]

    def moves(self, assigned: dict, run: set) -> dict[int, tuple]:
        """{job: its new nodes} for the running managed jobs of `run` the round assigns other nodes than they run
        on (never a job whose user asked for its nodes, nor one whose nodes are unknown)."""
        out = {}
        for jid in sorted(run):
            job, want = self.jobs.get(jid), tuple(assigned.get(jid) or ())
            if job is None or job.state != "RUNNING" or not want or self.user_pinned(job):
                continue
            now = self.running_on(job)
            if now and frozenset(now) != frozenset(want):
                out[jid] = want
        return out


def assigned_nodes(decision) -> dict[int, tuple]:
    """decision.nodes with int job ids (the view's ids are Slurm's ints; a str id is read as one)."""
    out = {}
    for k, v in decision.nodes.items():
        try:
            out[int(k)] = tuple(v)
        except (TypeError, ValueError):
            continue
    return out


def our_pins_to_clear(live, ours: dict) -> list[int]:
    """Uninstall: the pending jobs whose required node list is one the controller wrote (`ours`: journal_pins)."""
    return sorted(
        j.job_id
        for j in live
        if j.state == "PENDING" and j.job_id in ours and frozenset(_nodes_of(j.required_nodes)) in ours[j.job_id]
    )
