"""Several GPU types on Slurm: what each node has, what a job asked for or runs on, and how a pending job that the
round placed on a type is steered there before its release.

* Nodes: ``gres`` ``gpu:v100:4`` (22.05 ``sinfo --json``, newer ``scontrol show nodes --json``; a suffix such as
  ``(S:0)`` or ``(IDX:0-1)`` is ignored); an untyped ``gpu:4`` is the pool ``GPU`` of solver/types.py.  The
  capacity per type is that of the available nodes of the partition, less the GPUs of running unmanaged jobs on it.
* Jobs: a type named in the request (``tres_per_node`` ``gres:gpu:v100:2`` on 22.05, ``gres/gpu:v100:2`` newer) is
  the user's pin, and so is a constraint that is exactly one GPU type (``--constraint=v100``), unless the controller
  wrote it (its journal: verbs ``place_tres`` / ``place_features``).  A running job runs on the type of its
  ``gres_detail`` (``gpu:v100:2(IDX:0-1)``), else of its node; on a cluster of several types its view carries that
  type (it only moves through a checkpoint and requeue).
* Steering (only a pending job the round runs, never one whose user pinned a type, never a running one, only when the
  cluster has more than one type): Slurm 23.11 and later (24.11 and 26.05 checked) ``scontrol update JobId=N
  TresPerNode=gres:gpu:<type>:<n>``; earlier ones through the node Feature named after the type, ``Features=<type>``
  (22.05 accepts a type change of a pending job and then leaves it pending for good, ``BadConstraints``; fixed in
  23.02.6).  A job with a constraint of its own, or (TresPerNode) whose request has other GRES or is not per node,
  or (Features) placed on a type whose nodes do not carry it as a Feature (and only they), is left to Slurm.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace

from slurm_shockwave.journal.verbs import Verb
from slurm_shockwave.slurm.enact import Action
from slurm_shockwave.slurm.models import SlurmJob, SlurmNode, in_partition, node_in_partition
from slurm_shockwave.slurm.shapes import feature_list as _features
from slurm_shockwave.slurm.type_speeds import TypeRates, by_type, describe, sourced
from solver.types import GPU, JobView

log = logging.getLogger("slurm_shockwave.slurm")

_COUNT_RE = re.compile(r"^\d+$")
_TYPE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: Slurm versions (major, minor) from which a pending job's GPU type is changed through its GRES request
TRES_FROM = (23, 11)
VERBS = (Verb.PLACE_TRES, Verb.PLACE_FEATURES)


def split_top(spec: str) -> list[str]:
    """Split on commas that are not inside parentheses (``gpu:2(IDX:0,2)`` stays whole)."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in spec:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def gpu_entry(item: str) -> tuple[str | None, int] | None:
    """``(type, count)`` of one GPU GRES/TRES item, or None if the item is not a GPU.

    Accepts ``gres:gpu:2``, ``gres/gpu:2``, ``gpu:2``, ``gpu``, ``gres:gpu:a100:2``,
    ``gres/gpu=2``, ``gres/gpu:a100=2``, ``gpu:(null):2(IDX:0-1)``.
    """
    item = item.replace("(null)", "").split("(", 1)[0]
    for prefix in ("gres:", "gres/"):
        if item.startswith(prefix):
            item = item[len(prefix) :]
    if "=" in item:
        item, count_s = item.split("=", 1)
        item = f"{item}:{count_s}"
    fields = item.split(":")
    if fields[0] != "gpu":
        return None
    rest = fields[1:]
    if rest and _COUNT_RE.match(rest[-1]):
        count = int(rest[-1])
        rest = rest[:-1]
    else:
        count = 1
    gtype = rest[0] if rest and rest[0] not in ("", "(null)") else None
    return gtype, count


def gpus_by_type(spec: str | None) -> dict[str, int]:
    """{type: GPUs} of a node's gres string; untyped GPUs under ``GPU`` (an untyped total beside typed entries,
    ``gres/gpu=4,gres/gpu:a100=4``, adds only what the typed ones do not cover)."""
    typed: dict[str, int] = {}
    untyped = 0
    for item in split_top(spec or ""):
        entry = gpu_entry(item)
        if entry is None:
            continue
        if entry[0] is None:
            untyped += entry[1]
        else:
            typed[entry[0]] = typed.get(entry[0], 0) + entry[1]
    rest = untyped - sum(typed.values())
    return {**typed, GPU: rest} if rest > 0 else typed


def request_type(spec: str | None) -> tuple[str | None, bool]:
    """(the one GPU type a request names, or None; whether the request is that one GPU entry and nothing else)."""
    items = split_top(spec or "")
    entries = [e for e in (gpu_entry(i) for i in items) if e is not None]
    types = {t for t, _n in entries if t}
    return (types.pop() if len(types) == 1 else None), len(items) == 1 and len(entries) == 1


def tres_steering(version: str) -> bool:
    """Does this Slurm (major.minor, as its JSON declares) move a pending job through ``TresPerNode``?  An unknown
    version is steered through Features (works on every version whose nodes carry their type as a Feature)."""
    try:
        return tuple(int(x) for x in version.split(".")[:2]) >= TRES_FROM
    except ValueError:
        return False


class GpuTypes:
    """One round's GPU types on Slurm: the capacity per type, each managed job's pin and type, the steering actions.
    ``placed`` (job -> the type the controller last wrote into its request or constraint) and ``ours`` (job -> every
    type it wrote there: a failed or overtaken update may leave an earlier one) are read back from the journal
    (intents too: a crash right after the call must not turn our type into the user's pin)."""

    def __init__(self, state=None):
        self.placed: dict[int, str] = {}
        self.ours: dict[int, set] = {}
        rows = [r for verb in VERBS for r in (state.actions(verb=verb) if state is not None else [])]
        for row in sorted(rows, key=lambda r: r["id"]):
            t = _placed_type(row.get("value"))
            if t:
                self._record(int(row["job_id"]), t)
        self.capacity: dict[str, int] = {}
        self.node_type: dict[str, str] = {}
        self.feature_ok: set[str] = set()
        self.jobs: dict[int, SlurmJob] = {}
        self.rates = TypeRates(state)  # each job's own measured speed per type (type_speeds.py)
        self.speed_text: dict[int, str] = {}  # job -> its speeds per type and where each comes from (`meta`)

    @property
    def typed(self) -> bool:
        return len(self.capacity) > 1

    def observe(
        self, nodes: list[SlurmNode], jobs: list[SlurmJob], managed_ids: set, partition: str | None
    ) -> dict[str, int]:
        """{type: GPUs for managed jobs}: the partition's available nodes per type, less the running unmanaged jobs'
        (on their type; of unknown type: on the type with the most)."""
        total: dict[str, int] = {}
        self.node_type = {}
        carriers: dict[str, set] = {}
        for n in nodes:
            by = dict(n.by_type) or ({GPU: n.gpus} if n.gpus else {})
            if by:
                self.node_type[n.name] = max(by, key=lambda t: by[t])
            if not (n.available and node_in_partition(n, partition)):
                continue
            for t, c in by.items():
                total[t] = total.get(t, 0) + c
                carriers.setdefault(t, set()).add(t in n.features)
        others = {f for n in nodes for f in n.features if self.node_type.get(n.name) != f}
        self.feature_ok = {t for t, has in carriers.items() if has == {True} and t not in others}
        self.jobs = {j.job_id: j for j in jobs if j.job_id in managed_ids}
        for j in jobs:
            if j.job_id in managed_ids or j.state != "RUNNING" or j.gpus <= 0 or not in_partition(j, partition):
                continue
            rt = self.running_type(j)
            rt = rt if rt in total else max(total, key=lambda k: total[k], default=None)
            if rt is not None:
                total[rt] = max(0, total[rt] - j.gpus)
        self.placed = {k: v for k, v in self.placed.items() if k in self.jobs}
        self.ours = {k: v for k, v in self.ours.items() if k in self.jobs}
        self.speed_text = {}
        self.capacity = total or {GPU: 0}
        return dict(self.capacity)

    def _record(self, job_id: int, t: str) -> None:
        self.placed[job_id] = t
        self.ours.setdefault(job_id, set()).add(t)

    def running_type(self, job: SlurmJob) -> str | None:
        types = {e[0] or GPU for e in (gpu_entry(d) for d in job.gres_detail) if e is not None}
        if len(types) == 1:
            return types.pop()
        return self.node_type.get(job.nodes) if job.nodes else None

    def pinned(self, job: SlurmJob) -> str | None:
        """The GPU type the job's user asked for (request or constraint), None: any."""
        t = job.gpu_type
        ours = self.ours.get(job.job_id, ())
        if t and t not in ours:
            return t
        feats = _features(job.features)
        if len(feats) == 1 and feats[0] in self.capacity and feats[0] not in ours:
            return feats[0]
        return None

    def view_type(self, job: SlurmJob) -> str | None:
        """JobView.gpu_type: the user's pin; on a cluster of several types a running job's own type."""
        if self.typed and job.state == "RUNNING":
            return self.running_type(job) or self.pinned(job)
        return self.pinned(job)

    def speeds(self, job: SlurmJob, view: JobView, speeds: dict, hint=None, progress=None, moving=None) -> JobView:
        """The view on a cluster of several types: the type a running job runs on (`running_type`); with a speed for
        every type (the site's ``gpu_type_speeds``, over them its ``speed=`` `hint` and its own rates measured from
        its events, `progress`: slurm/type_speeds.py), its throughput on each type it may run on (its user's type
        only, when its user asked for one; `throughput_by_type`) and its view's throughput and epoch times those of
        the type it runs on (a waiting job's: the fastest for it; a requeued moving job's, `moving`: the type it was
        moved to, slurm/moving.py).  Without: no speeds, no moves."""
        if not self.typed:
            return view
        running = self.running_type(job) if job.state == "RUNNING" else (moving or {}).get("type")
        if progress is not None:
            self.rates.update(job, running, progress)
        pin = self.pinned(job)
        types = list(self.capacity) if pin is None else [pin] if pin in self.capacity else []
        measured, src = self.rates.of(job.job_id), self.rates.last.get(str(job.job_id))
        rel, why = sourced(types, speeds, hint, measured, src)
        if rel is None:
            return replace(view, running_type=running)
        self.speed_text[job.job_id] = describe(rel, why)
        ref = running if running in rel else max(rel, key=lambda t: (rel[t], t))
        key = (view.batch_size, max(job.gpus, 1))
        by = by_type(view.throughput, rel, ref, key, measured, src)
        f = by[ref] / view.throughput if view.throughput > 0 else 1.0
        durations = {b: d / f for b, d in view.epoch_duration_by_bs.items()}
        return replace(
            view, running_type=running, throughput_by_type=by, throughput=by[ref], epoch_duration_by_bs=durations
        )

    def moves(self, placement, run: set, assigned: dict, node_moves: dict, ours: bool) -> tuple[dict, dict]:
        """({job: its new nodes, () where the view lists none}, {job: its mark's reason}) of the round's moves
        (authoritative mode, `ours`): `node_moves` (slurm/nodes.py) and each running managed job of `run` placed on
        another type than it runs on (solver/type_moves.py: checkpointed and requeued as a node move, then
        steered to its type when a later round releases it)."""
        retyped = {}
        for jid in sorted(run) if ours else ():
            job, by = self.jobs.get(jid), placement.get(jid) or placement.get(str(jid)) or {}
            if job is None or job.state != "RUNNING" or len(by) != 1 or self.pinned(job) is not None:
                continue
            t, now = next(iter(by)), self.running_type(job)
            if now is not None and t != now:
                retyped[jid] = t
        moves = {**{j: tuple(assigned.get(j) or ()) for j in retyped}, **node_moves}
        return moves, {j: f"moving to {','.join(n) or retyped[j]}" for j, n in moves.items()}

    def meta(self, job) -> dict:
        """What status shows (on a cluster of several types): the type the job runs on, or is pinned to, or the
        controller placed it on; its speed on each type and where each comes from (after `speeds`)."""
        if not self.typed:
            return {}
        if job.state == "RUNNING" and self.running_type(job):
            kind, by = self.running_type(job), "slurm"
        elif self.pinned(job):
            kind, by = self.pinned(job), "user"
        elif job.job_id in self.placed:
            kind, by = self.placed[job.job_id], "controller"
        else:
            kind = by = None
        return {"gpu_type": kind, "gpu_type_by": by, "gpu_speeds": self.speed_text.get(job.job_id)}

    def steer(self, placement, run: set, version: str, wanted: dict) -> list:
        """The actions that move each pending, unpinned job of `run` to the type `placement` gives it (see the
        module docstring); `wanted`: job -> a new GPU count per node asked for (its update_gpus action comes first,
        and drops the type from the request).  The types are recorded as placed before any call."""
        if not self.typed:
            return []
        tres = tres_steering(version)
        groups: dict[tuple, list] = {}
        for jid in sorted(run):
            job = self.jobs.get(jid)
            by = placement.get(jid) or placement.get(str(jid)) or {}
            if job is None or job.state != "PENDING" or len(by) != 1 or self.pinned(job) is not None:
                continue
            t, feats = next(iter(by)), _features(job.features)
            own = len(feats) == 1 and feats[0] in self.ours.get(jid, ())  # a constraint we wrote
            if t == GPU or not _TYPE_RE.match(str(t)) or (feats and not own):
                continue  # a constraint of the user's own could exclude the type's nodes
            if tres:
                _typ, single = request_type(job.gpu_request)
                n = wanted.get(jid) or job.gpus_per_node
                if not single or not n or (job.gpu_type == t and not wanted.get(jid)):
                    continue
                key = (Verb.PLACE_TRES, f"gres:gpu:{t}:{n}")
            else:
                if feats == (t,) or t not in self.feature_ok:
                    continue
                key = (Verb.PLACE_FEATURES, t)
            groups.setdefault(key, []).append(jid)
            self._record(jid, t)
        return [Action(verb, tuple(ids), value) for (verb, value), ids in sorted(groups.items())]


def _placed_type(value) -> str | None:
    """The type of a journalled place_* action's value (``"k80"`` or ``"gres:gpu:k80:2"``, JSON-encoded)."""
    try:
        text = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        text = value
    if not isinstance(text, str):
        return None
    entry = gpu_entry(text) if text.startswith("gres") else (text, 1)
    return entry[0] if entry else None
