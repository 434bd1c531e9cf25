"""Elastic GPU counts on Slurm: a job that declares ``gpus=MIN-MAX`` (hints.py) may be run on another count than it
asked for; its global batch stays (per-GPU batch = global / GPUs).

* Its base count (`JobView.num_gpus`, its fair share is defined on it) is its count when the controller first saw it,
  kept in its AdminComment mark (ownership.py ``base=N``), written before its first resize (`base_marks`): it survives
  a restart of the controller and a lost state directory.
* The counts it may run on (`JobView.throughput_by_gpus`, `counts`): those of its range that divide its global batch
  and fit one node or whole nodes; at each, its own throughput there when it reported one at its batch size
  (`Measured`, kept in the state), else scaled from one it reported, else from its throughput at its base count: by
  its declared profile for the counts it lists (``speedup=2x1.9/4x3.5`` hint: thr(n) = thr(m) * f(n) / f(m), f of
  its own count 1), the others by thr(n) = thr(m) * (n / m) ** e (e: the controller's ``elastic_speedup_exponent``).
* A count change (`wanted`) reuses the GPU-count update of enact.py: a pending job's request is updated before its
  release (``TresPerNode=gres:gpu:<per node>`` and, on whole nodes, ``NumNodes=<k>-<k>``; one ``scontrol update`` on
  22.05, 24.11 and 26.05 alike); a running one (authoritative mode) is first checkpointed and requeued held, as a job
  that lost its round, then updated while pending and released.  A job without a range is never resized.
* `ResizeLog` counts them (``shockwave_resizes_total{outcome}``): ``started`` (its first step enacted), ``done``
  (seen running at its new count), ``wasted`` (the next change came before it ran a round at its count, or it never
  ran at it: solver/elastic.py `wasted_change`).  Times are the rounds' starts (`SlurmBackend.observe`'s ``begun``,
  a round length apart but for early rounds): a job that runs at its new count from the round of its change, after
  its restart, has run that round there, as in the simulator.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace

from slurm_shockwave.journal.verbs import Verb
from slurm_shockwave.slurm.enact import Action
from slurm_shockwave.slurm.kept_rates import KeptRates, positive, saved_dict
from slurm_shockwave.slurm.models import node_in_partition
from slurm_shockwave.slurm.ownership import base_of, with_base
from solver.elastic import wasted_change
from solver.types import JobView

log = logging.getLogger("slurm_shockwave.slurm")

OUTCOMES = ("started", "done", "wasted")
#: the first step of a count change: the update of a pending job's request, or a running job's hold or signal
STEPS = frozenset({Verb.UPDATE_GPUS, Verb.HOLD, Verb.SIGNAL, Verb.REQUEUE_HOLD})


def nodes_for(count: int, node_gpus: int) -> int:
    """Nodes a gang of `count` GPUs runs on: one when it fits one, else whole nodes."""
    return 1 if node_gpus <= 0 or count <= node_gpus else count // node_gpus


def counts(gpus_range, base: int, batch_size: int, node_gpus: int, whole_nodes: int) -> list[int]:
    """The counts of the range an elastic job may run on: each divides its global batch and fits one node or whole
    nodes (`node_gpus` GPUs each, `whole_nodes` of them); its base count always (its user's own request)."""
    lo, hi = gpus_range
    ok = [
        n
        for n in range(lo, hi + 1)
        if batch_size % n == 0
        and (n <= node_gpus or (node_gpus > 0 and n % node_gpus == 0 and n <= whole_nodes * node_gpus))
    ]
    return sorted({*ok, base})


def throughputs(
    ns: list[int], known: dict[int, float], base: int, base_thr: float, exponent: float, profile=()
) -> dict:
    """{count: iterations/s}: its own where known (`known` at its batch size; none known: its throughput at its base
    count), then each count its `profile` lists ((count, factor) pairs relative to its base count) scaled from the
    nearest of those by the profile, then every other count scaled from the nearest so far by the exponent."""
    anchors = {m: t for m, t in known.items() if t > 0} or {base: base_thr}
    factor = {base: 1.0, **dict(profile or ())}
    points = dict(anchors)
    listed = [m for m in anchors if m in factor]
    for n in factor:
        if n not in points and listed:
            m = _nearest(n, listed)
            points[n] = anchors[m] * factor[n] / factor[m]
    return {n: points[n] if n in points else points[(m := _nearest(n, points))] * (n / m) ** exponent for n in ns}


def _nearest(n: int, counts) -> int:
    return min(counts, key=lambda c: (abs(math.log(n / c)), c))


class Measured(KeptRates):
    """Each elastic job's own throughput per GPU count at a batch size (iterations/s: its last reported samples/s at
    that count over the batch size), from its events; kept in the state ("elastic_throughput")."""

    KEY = "elastic_throughput"

    def __init__(self, state):
        super().__init__(state)
        self.by_job: dict[str, dict[str, list]] = {
            str(k): {str(n): [int(e[0]), positive(e[1])] for n, e in v.items() if _readable(e)}
            for k, v in saved_dict(state, self.KEY).items()
            if isinstance(v, dict)
        }

    def update(self, job_id, progress) -> None:
        thr, bs, n = progress.last_throughput, progress.last_throughput_bs, progress.last_throughput_gpus
        if not (thr and bs and n and thr > 0 and math.isfinite(thr)):
            return
        entry = self.by_job.setdefault(str(job_id), {})
        if entry.get(str(n)) != [int(bs), thr / bs]:
            entry[str(n)] = [int(bs), thr / bs]
            self._dirty = True

    def at(self, job_id, batch_size: int) -> dict[int, float]:
        """{count: iterations/s} it reported at this batch size."""
        return {int(n): float(t) for n, (b, t) in self.by_job.get(str(job_id), {}).items() if b == batch_size}


def _readable(e) -> bool:
    """A kept [batch size, iterations/s] pair."""
    return isinstance(e, list) and len(e) == 2 and isinstance(e[0], int) and e[0] >= 1 and positive(e[1]) is not None


def base_marks(observed: dict, bases: dict) -> list[Action]:
    """The mark actions that record the base count of the elastic jobs whose AdminComment lacks it (one per text;
    `observed`: job -> enact.Observed, `bases`: job -> base count)."""
    groups: dict[str, list] = {}
    for j, base in sorted(bases.items()):
        ob = observed.get(j)
        if ob is not None and base_of(ob.admin_comment) is None:
            groups.setdefault(with_base(ob.admin_comment, base), []).append(j)
    return [Action(Verb.MARK, tuple(ids), text) for text, ids in groups.items()]


def wanted(placement, run: set, observed: dict, elastic: dict, node_gpus: int) -> dict:
    """job -> (GPUs, nodes) of each elastic job the round runs on another count than its request (`elastic`: job ->
    the counts it may run on, `counts`); a job without a range, or on a count not its, is refused (logged)."""
    out = {}
    for j in sorted(run):
        ob, by = observed.get(j), placement.get(j) or placement.get(str(j)) or {}
        n = sum(by.values())
        if ob is None or not n or n == ob.gpus:
            continue
        if j not in elastic:
            log.warning(
                "job %s: placed on %d GPU(s), it asked for %d and declared no range: not resized", j, n, ob.gpus
            )
            continue
        if n not in elastic[j]:
            log.warning("job %s: placed on %d GPU(s), not one of its counts %s: not resized", j, n, sorted(elastic[j]))
            continue
        out[j] = (n, nodes_for(n, node_gpus))
    return out


def per_node_wanted(observed: dict) -> dict:
    """job -> the GPUs per node of the new request of each job whose count changes (gpu_types.GpuTypes.steer)."""
    return {
        j: o.wanted_gpus // (o.wanted_nodes or 1)
        for j, o in observed.items()
        if o.wanted_gpus and o.wanted_gpus != o.gpus
    }


class ResizeLog:
    """The controller's count changes and their outcomes (module docstring), kept in the state ("resizes")."""

    KEY = "resizes"

    def __init__(self, state, metrics=None):
        self.state, self.metrics = state, metrics
        saved = state.get(self.KEY, {}) or {}
        self.counts = {k: int((saved.get("counts") or {}).get(k, 0)) for k in OUTCOMES}
        self.open: dict[str, dict] = {str(k): dict(v) for k, v in (saved.get("open") or {}).items()}
        self.begun: float | None = None  # the previous round's start, in this process (observe)

    def _count(self, outcome: str) -> None:
        self.counts[outcome] += 1
        if self.metrics is not None:
            self.metrics.resizes.labels(outcome).inc()

    def started(self, job_id, old: int, new: int, now: float, round_length: float, pending: bool = False) -> None:
        """Its first step was enacted (an update of its request, or its checkpoint signal or hold); `pending`: an
        update of a pending job's request.  A change that has not run yet, revised by such an update, stays one
        change (no restart more): its target moves; one taken back to the count before it ends, wasted only if the
        job was requeued for it."""
        key, entry = str(job_id), self.open.get(str(job_id))
        if entry is not None and entry["to"] == new:
            return  # the same change, still under way (or re-entered after a restart of the controller)
        if entry is not None and entry["ran_at"] is None and pending:
            if new != entry["from"]:
                log.info(
                    "job %s: resize %d -> %d GPU(s) revised to %d while pending", key, entry["from"], entry["to"], new
                )
                entry["to"] = new
                return
            if entry.get("requeued", True):
                self._count("wasted")
            log.warning("job %s: resize to %d GPU(s) taken back while pending", key, entry["to"])
            del self.open[key]
            return
        if entry is not None and wasted_change(entry["ran_at"], now, round_length):
            self._count("wasted")
            log.warning(
                "job %s: wasted resize to %d GPU(s) (changed again to %d before it ran a round)", key, entry["to"], new
            )
        self._count("started")
        log.info("job %s: resize %d -> %d GPU(s) started", key, old, new)
        self.open[key] = {"from": old, "to": new, "t": now, "ran_at": None, "requeued": not pending}

    def observe(self, jobs: dict, now: float, round_length: float) -> None:
        """At the start of a round (`now`): a resize is done when its job runs at its new count (``ran_at``: the
        start of the round in which it began there: the previous one's when it started since, else its own start,
        never before the change's round); forgotten once it ran a round there, or its job left the queue.
        `jobs`: job id -> SlurmJob."""
        for key, entry in list(self.open.items()):
            j = jobs.get(int(key))
            if j is None or j.finished:
                # it ran at its new count and ended within the round that released it: done all the same
                started = j is not None and j.start_time and j.start_time >= entry["t"]
                if j is not None and entry["ran_at"] is None and started and max(j.gpus, 1) == entry["to"]:
                    self._count("done")
                del self.open[key]
                continue
            if entry["ran_at"] is None and j.state == "RUNNING" and max(j.gpus, 1) == entry["to"]:
                start, prev = float(j.start_time or now), self.begun
                fresh = prev is not None and now - prev <= 2 * round_length and start >= prev
                entry["ran_at"] = max(entry["t"], prev if fresh else start)
                self._count("done")
            elif entry["ran_at"] is not None and not wasted_change(entry["ran_at"], now, round_length):
                del self.open[key]
        self.begun = now

    def save(self) -> None:
        self.state.put(self.KEY, {"counts": self.counts, "open": self.open})


class Elastic:
    """One round's elastic jobs, the backend's side (module docstring): their views, their base marks, the counts
    their round asks for, and the resize log."""

    def __init__(self, state, metrics=None):
        self.measured = Measured(state)
        self.log = ResizeLog(state, metrics)
        self.ranges: dict[int, list[int]] = {}  # elastic job -> the counts it may run on
        self.bases: dict[int, int] = {}
        self.want: dict[int, tuple[int, int, int]] = {}  # job -> (its count now, its round's count, nodes)
        self.node_gpus = self.whole_nodes = 0

    def observe(self, jobs, nodes, partition: str | None, now: float, round_length: float) -> None:
        """The partition's node size (the largest) and how many nodes have it; the resizes seen done."""
        sizes = [n.gpus for n in nodes if n.available and node_in_partition(n, partition) and n.gpus > 0]
        self.node_gpus = max(sizes, default=0)
        self.whole_nodes = sum(1 for g in sizes if g == self.node_gpus)
        self.ranges, self.bases = {}, {}
        self.log.observe({j.job_id: j for j in jobs}, now, round_length)

    def view(self, job, marker: dict, progress, view: JobView, exponent: float) -> JobView:
        """The job's view with its running count, and for an elastic job its range, base count and counts."""
        running = max(job.gpus, 1) if job.state == "RUNNING" else None
        rng = marker.get("gpus_range")
        if rng is None:
            return replace(view, running_gpus=running)
        lo, hi = int(rng[0]), int(rng[1])
        base = base_of(job.admin_comment) or max(job.gpus, 1)
        self.measured.update(job.job_id, progress)
        ns = counts((lo, hi), base, view.batch_size, self.node_gpus, self.whole_nodes)
        self.ranges[job.job_id], self.bases[job.job_id] = ns, base
        known = self.measured.at(job.job_id, view.batch_size)
        thr = throughputs(ns, known, base, view.throughput, exponent, marker.get("speedup"))
        return replace(view, num_gpus=base, gpus_range=(lo, hi), running_gpus=running, throughput_by_gpus=thr)

    def prepare(self, decision, run: set, observed: dict, enactor, round_index: int, restarts: dict) -> None:
        """Before the reconcile: the base counts not in Slurm yet are marked (first: a job is resized only once its
        base is there), then each elastic job's `Observed.wanted_gpus` is its round's count (never its events')."""
        marks = base_marks(observed, self.bases)
        unsafe = set()
        for a, result in enactor.execute(round_index, marks, restarts) if marks else []:
            for j in a.job_ids:
                if result == "done":
                    observed[j].admin_comment = a.value
                else:
                    unsafe.add(j)
        asked = wanted(decision.placement, run, observed, self.ranges, self.node_gpus)
        self.want = {j: (observed[j].gpus, *asked[j]) for j in asked if j not in unsafe}
        for j in self.ranges:
            if j in observed:
                now, observed[j].wanted_gpus, observed[j].wanted_nodes = self.want.get(j, (0, None, None))
                observed[j].grow = bool(observed[j].wanted_gpus and observed[j].wanted_gpus > now)
        self.measured.keep(self.ranges)

    def enacted(self, results, now: float, round_length: float) -> None:
        """After the enactment: a resize whose first step was done has started."""
        for a, result in results:
            if result == "done" and a.verb in STEPS:
                for j in a.job_ids:
                    if j in self.want:
                        pending = a.verb == Verb.UPDATE_GPUS
                        self.log.started(j, self.want[j][0], self.want[j][1], now, round_length, pending)
        self.log.save()
