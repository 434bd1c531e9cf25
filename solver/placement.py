"""Placement: which GPUs a decided round runs on.  Policies decide *who* runs; this stage decides *where*.

A cluster's free GPUs are counted per GPU type (`ClusterView.capacity`); a gang takes all its GPUs from one
type (a job spanning two GPU generations runs at the slower one's pace).  A job whose user asked for a type
(`JobView.gpu_type`) only goes there.  A job whose view lists its speed per type (`JobView.throughput_by_type`)
goes only to those types, to the fastest one with room for its gang (equal speeds: the type with the most free
GPUs, then by name): a greedy fill in priority order gives the fastest GPUs to the first jobs.  Any other job
takes the type with the most free GPUs that fits it.  Both first go where they leave out the fewest GPUs of the
round's later jobs pinned to a type (a running job's view asks for its own): `Packer(capacity, reserve)`.

* `Packer`: one round's free GPUs, for policies that fill a round greedily (`take` a gang or skip it);
* `place(view, run)`: the placement of a decided round (job -> {type: count}), or `PlacementError`;
* `check_placement(view, decision)`: a decision's placement is complete, type-correct and within capacity;
* `free_gpus(view, placement)`: the GPUs per type a partial placement leaves free.

A job runs on its whole requested gang (`num_gpus`), except an elastic job (one whose view lists throughputs per
GPU count, `JobView.throughput_by_gpus`), which a policy may place on any of those counts (Pollux does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from solver.types import GPU, ClusterView, JobView, RoundDecision


class PlacementError(ValueError):
    """A decided round does not fit the cluster's GPUs (one line)."""


class Packer:
    """Free GPUs per type during one round; gangs are taken whole from one type."""

    def __init__(self, capacity: Mapping[str, int] | int, reserve: Iterable[JobView] = ()) -> None:
        """`capacity`: free GPUs per type, or untyped GPUs; `reserve`: later jobs (GPUs of those pinned to a type)."""
        if not isinstance(capacity, Mapping):
            capacity = {GPU: int(capacity)}
        self.free = {t: int(n) for t, n in capacity.items()}
        self.held = {j.job_id: (j.gpu_type, j.num_gpus) for j in reserve if j.gpu_type is not None and j.num_gpus > 0}
        self.reserved = {t: sum(n for u, n in self.held.values() if u == t) for t in self.free}
        self.placed: dict[Any, str] = {}  # job -> the type take_job gave it

    @property
    def total(self) -> int:
        return sum(self.free.values())

    def _type_for(self, gpus: int, gpu_type: str | None, speeds: Mapping[str, float] | None = None) -> str | None:
        if gpu_type is not None:
            return gpu_type if self.free.get(gpu_type, 0) >= gpus and (not speeds or gpu_type in speeds) else None
        speeds = speeds or dict.fromkeys(self.free, 1.0)  # no speeds: the most free GPUs
        room = [t for t in speeds if speeds[t] > 0 and self.free.get(t, 0) >= gpus]
        out = {t: min(gpus, max(0, self.reserved.get(t, 0) - self.free[t] + gpus)) for t in room}  # reserved left out
        return max(room, key=lambda t: (-out[t], speeds[t], self.free[t], t), default=None)

    def fits(self, gpus: int, gpu_type: str | None = None, speeds: Mapping[str, float] | None = None) -> bool:
        return gpus > 0 and self._type_for(gpus, gpu_type, speeds) is not None

    def take(self, gpus: int, gpu_type: str | None = None, speeds: Mapping[str, float] | None = None) -> str | None:
        """Take a gang of `gpus` GPUs (of `gpu_type`; with `speeds` {type: it/s}, on the fastest of those types with
        room); the type it got, or None (nothing taken) when it does not fit."""
        if gpus <= 0:
            return None
        t = self._type_for(gpus, gpu_type, speeds)
        if t is not None:
            self.free[t] -= gpus
        return t

    def take_job(self, job: JobView) -> str | None:
        """`take` a JobView's whole gang on its requested type, else on the fastest type it can run on."""
        t = self.take(job.num_gpus, job.gpu_type, job.throughput_by_type)
        if t is not None:
            self.placed[job.job_id] = t
            self.reserved[t] -= self.held.pop(job.job_id, (t, 0))[1]
        return t


def free_gpus(view: ClusterView, placement: Mapping[Any, Mapping[str, int]]) -> dict[str, int]:
    """The GPUs per type the cluster has left once `placement` (job -> {type: count}) runs."""
    free = {t: int(n) for t, n in view.capacity.items()}
    for by_type in placement.values():
        for t, n in by_type.items():
            free[t] = free.get(t, 0) - n
    return free


def place(view: ClusterView, run: Iterable[Any]) -> dict[Any, dict[str, int]]:
    """{job: {type: gpus}} for the jobs of `run`: each in order on the fastest type with room (Packer.take_job), or,
    when that leaves one out on a cluster of several types, the largest gangs first each on the type with the most
    free GPUs it can run on (a run set chosen without speeds may only fit so); PlacementError when neither fits."""
    jobs = {j.job_id: j for j in view.jobs}
    ids = list(run)
    packer, out = Packer(view.capacity, [jobs[i] for i in ids]), {}
    for jid in ids:
        t = packer.take_job(jobs[jid])
        if t is None:
            break
        out[jid] = {t: jobs[jid].num_gpus}
    if len(out) == len(ids) or len(view.capacity) < 2:
        if len(out) < len(ids):
            j = jobs[ids[len(out)]]
            want = f"{j.num_gpus} {j.gpu_type} GPU(s)" if j.gpu_type else f"{j.num_gpus} GPU(s)"
            raise PlacementError(f"round {view.round_index}: job {j.job_id} needs {want}; free: {packer.free}")
        return out
    packer, out = Packer(view.capacity), {}
    for jid in sorted(ids, key=lambda i: -jobs[i].num_gpus):
        j = jobs[jid]
        flat = {t: 1.0 for t in j.throughput_by_type} or None  # no speed preference: the most free GPUs
        t = packer.take(j.num_gpus, j.gpu_type, flat)
        if t is None:
            raise PlacementError(
                f"round {view.round_index}: the run set does not fit the GPU types "
                f"{dict(view.capacity)} (job {jid}, {j.num_gpus} GPU(s))"
            )
        out[jid] = {t: j.num_gpus}
    return {jid: out[jid] for jid in ids}


def check_placement(view: ClusterView, decision: RoundDecision) -> None:
    """Every running job placed on exactly its gang (an elastic job: on one of its profiled counts), on one type it
    can run on (its requested one, one it has a throughput on), within each type's capacity."""
    jobs = {j.job_id: j for j in view.jobs}
    placement = decision.placement
    if set(placement) != set(decision.run):
        raise PlacementError(
            f"round {view.round_index}: placement names {sorted(map(str, placement))}, "
            f"the decision runs {sorted(map(str, decision.run))}"
        )
    used: dict[Any, Any] = {}
    for jid, by_type in placement.items():
        j = jobs[jid]
        count = sum(by_type.values())
        if any(n <= 0 for n in by_type.values()) or (count != j.num_gpus and count not in j.throughput_by_gpus):
            allowed = sorted({j.num_gpus, *j.throughput_by_gpus})
            raise PlacementError(
                f"round {view.round_index}: job {jid} placed on {dict(by_type)}, "
                f"its gang is {j.num_gpus} GPU(s)" + (f" (elastic: {allowed})" if j.throughput_by_gpus else "")
            )
        if j.gpu_type is not None and set(by_type) != {j.gpu_type}:
            raise PlacementError(
                f"round {view.round_index}: job {jid} asked for {j.gpu_type}, placed on {dict(by_type)}"
            )
        if len(by_type) != 1 or (j.throughput_by_type and not set(by_type) <= set(j.throughput_by_type)):
            raise PlacementError(
                f"round {view.round_index}: job {jid} placed on {dict(by_type)}: a gang runs on one "
                f"type it has a throughput on ({', '.join(sorted(j.throughput_by_type)) or 'any'})"
            )
        for t, n in by_type.items():
            used[t] = used.get(t, 0) + n
    over = {t: n for t, n in used.items() if n > view.capacity.get(t, 0)}
    if over:
        raise PlacementError(f"round {view.round_index}: decision uses {over} GPUs of {dict(view.capacity)}")
