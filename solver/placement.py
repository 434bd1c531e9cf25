"""Placement: which GPUs a decided round runs on.  Policies decide *who* runs; this stage decides *where*.

A cluster's free GPUs are counted per GPU type (`ClusterView.capacity`); a gang takes all its GPUs from one
type (a job spanning two GPU generations runs at the slower one's pace).  A job whose user asked for a type
(`JobView.gpu_type`) only goes there; any other job takes the type with the most free GPUs that fits it.

* `Packer`: one round's free GPUs, for policies that fill a round greedily (`take` a gang or skip it);
* `place(view, run)`: the placement of a decided round (job -> {type: count}), or `PlacementError`;
* `check_placement(view, decision)`: a decision's placement is complete, type-correct and within capacity.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from .types import GPU


class PlacementError(ValueError):
    """A decided round does not fit the cluster's GPUs (one line)."""


class Packer:
    """Free GPUs per type during one round; gangs are taken whole from one type."""

    def __init__(self, capacity: Mapping[str, int] | int):
        """`capacity`: free GPUs per type, or a number of untyped GPUs."""
        if not isinstance(capacity, Mapping):
            capacity = {GPU: int(capacity)}
        self.free = {t: int(n) for t, n in capacity.items()}

    @property
    def total(self) -> int:
        return sum(self.free.values())

    def _type_for(self, gpus: int, gpu_type: str | None) -> str | None:
        if gpu_type is not None:
            return gpu_type if self.free.get(gpu_type, 0) >= gpus else None
        best = max(self.free, key=lambda t: (self.free[t], t), default=None)
        return best if best is not None and self.free[best] >= gpus else None

    def fits(self, gpus: int, gpu_type: str | None = None) -> bool:
        return gpus > 0 and self._type_for(gpus, gpu_type) is not None

    def take(self, gpus: int, gpu_type: str | None = None) -> str | None:
        """Take a gang of `gpus` GPUs; the type it got, or None (nothing taken) when it does not fit."""
        if gpus <= 0:
            return None
        t = self._type_for(gpus, gpu_type)
        if t is not None:
            self.free[t] -= gpus
        return t


def place(view, run: Iterable) -> dict:
    """{job: {type: gpus}} for the jobs of `run` in order; PlacementError when one does not fit."""
    jobs = {j.job_id: j for j in view.jobs}
    packer = Packer(view.capacity)
    out = {}
    for jid in run:
        j = jobs[jid]
        t = packer.take(j.num_gpus, j.gpu_type)
        if t is None:
            want = f"{j.num_gpus} {j.gpu_type} GPU(s)" if j.gpu_type else f"{j.num_gpus} GPU(s)"
            raise PlacementError(f"round {view.round_index}: job {jid} needs {want}; free: {packer.free}")
        out[jid] = {t: j.num_gpus}
    return out


def check_placement(view, decision) -> None:
    """Every running job placed on exactly its gang, on its requested type, within each type's capacity."""
    jobs = {j.job_id: j for j in view.jobs}
    placement = decision.placement
    if set(placement) != set(decision.run):
        raise PlacementError(f"round {view.round_index}: placement names {sorted(map(str, placement))}, "
                             f"the decision runs {sorted(map(str, decision.run))}")
    used: dict = {}
    for jid, by_type in placement.items():
        j = jobs[jid]
        if sum(by_type.values()) != j.num_gpus or any(n <= 0 for n in by_type.values()):
            raise PlacementError(f"round {view.round_index}: job {jid} placed on {dict(by_type)}, "
                                 f"its gang is {j.num_gpus} GPU(s)")
        if j.gpu_type is not None and set(by_type) != {j.gpu_type}:
            raise PlacementError(f"round {view.round_index}: job {jid} asked for {j.gpu_type}, placed on "
                                 f"{dict(by_type)}")
        for t, n in by_type.items():
            used[t] = used.get(t, 0) + n
    over = {t: n for t, n in used.items() if n > view.capacity.get(t, 0)}
    if over:
        raise PlacementError(f"round {view.round_index}: decision uses {over} GPUs of {dict(view.capacity)}")
