"""Each job's own measured rates, kept in the controller's state under one key (`KeptRates`): the throughput per GPU
count of an elastic job (slurm/resize.py `Measured`), per GPU type of any job (slurm/type_speeds.py `TypeRates`).
A job no longer managed is forgotten; the tables are saved only when they changed."""

from __future__ import annotations

import math


def positive(x) -> float | None:
    """A finite positive number as a float, else None (a value read back from the state may be anything)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def saved_dict(state, key: str) -> dict:
    """The dict kept under `key`, or {} (no state, nothing kept, or not a dict)."""
    saved = state.get(key, {}) if state is not None else None
    return saved if isinstance(saved, dict) else {}


class KeptRates:
    """Per-job tables (`tables`: each a dict keyed by job id; by default the one `by_job`) saved under `KEY` as
    `saved()` gives them (by default `by_job`)."""

    KEY = ""
    by_job: dict

    def __init__(self, state):
        self.state = state
        self._dirty = False

    def tables(self) -> tuple[dict, ...]:
        return (self.by_job,)

    def saved(self):
        return self.by_job

    def keep(self, job_ids) -> None:
        """Forget the jobs no longer managed; save when anything changed."""
        keep = {str(j) for j in job_ids}
        for table in self.tables():
            for k in [k for k in table if k not in keep]:
                del table[k]
                self._dirty = True
        self.save()

    def save(self) -> None:
        """Put the tables in the state when they changed."""
        if self._dirty and self.state is not None:
            self.state.put(self.KEY, self.saved())
            self._dirty = False
