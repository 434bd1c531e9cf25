"""The free-GPU profile Slurm's backfill plans on (used by slurm_multifactor.py): free GPUs per type over time,
from now on, as running jobs are expected to end and reservations hold GPUs.

Segments [times[k], times[k+1]) (the last one open-ended) each with its free GPUs per type.  `earliest(gpus,
types, duration)` is the first segment start from which a gang fits on one type for the whole duration: a
prefix count of the segments too full for it makes each test O(1) (numpy), so a pass over the queue is
O(jobs x segments).
"""
from __future__ import annotations

import bisect
import math

import numpy as np


class Profile:
    def __init__(self, now: float, free: dict[str, int]):
        self.types = sorted(free)
        self.times = [float(now)]
        self.free = [[int(free[t]) for t in self.types]]       # per segment, per type (in self.types order)

    def _split(self, t: float) -> int:
        """The index of the segment starting at `t` (made if needed; `t` >= now)."""
        k = bisect.bisect_right(self.times, t) - 1
        if self.times[k] != t:
            self.times.insert(k + 1, t)
            self.free.insert(k + 1, list(self.free[k]))
            k += 1
        return k

    def add(self, gpu_type: str, gpus: int, start: float, end: float) -> None:
        """Change the free GPUs of a type by `gpus` over [start, end) (negative: hold them)."""
        ti = self.types.index(gpu_type)
        a = self._split(max(start, self.times[0]))
        b = self._split(end) if math.isfinite(end) else len(self.times)
        for k in range(a, b):
            self.free[k][ti] += gpus

    def earliest(self, gpus: int, types, duration: float, fullest: bool = False) -> tuple[float, str] | None:
        """(start, type) of the earliest fit of a gang of `gpus` on one of `types` for `duration` seconds (ties: the
        type with the most free GPUs at that start, with `fullest` the fewest (best fit: columns that are nodes),
        then by name), or None when it never fits."""
        times = np.array(self.times)
        free = np.array(self.free)
        ends = np.searchsorted(times, times + duration, side="left")       # first segment at or after the end
        best = None
        for t in types:
            if t not in self.types:
                continue
            col = free[:, self.types.index(t)]
            too_full = np.concatenate([[0], np.cumsum(col < gpus)])
            ok = np.nonzero(too_full[ends] - too_full[np.arange(len(times))] == 0)[0]
            if len(ok):
                k = int(ok[0])
                key = (times[k], int(col[k]) if fullest else -int(col[k]), t)
                if best is None or key < best:
                    best = key
        return None if best is None else (float(best[0]), best[2])

    def free_now(self, gpu_type: str) -> int:
        return self.free[0][self.types.index(gpu_type)]
