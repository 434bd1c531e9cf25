"""Gavel-format throughput profiles: `{worker_type: {"('<Model> (batch size B)', sf)": {"null": it/s}}}`.

One worker type's `"null"` entries make a table (`load(path, worker_type)`; `v100` by default): the isolated
throughput, in iterations per second, of the whole job on `sf` GPUs.  A value of 0 means the combination is
unavailable.  A cluster of several GPU types reads one column per type (workload/gpu_types.py).
"""
from __future__ import annotations

import ast
from pathlib import Path

from slurm_shockwave.loader import load
from shockwave_lab.workload.errors import WorkloadError
from shockwave_lab.workload.models import model_of


class ThroughputTable:
    def __init__(self, table: dict[tuple[str, int], float], source: str = "<memory>"):
        self._t = table
        self.source = source
        self._by_model: dict[tuple[str, int], dict[int, float]] = {}
        for (job_type, sf), thr in table.items():
            if thr <= 0:
                continue
            model = model_of(job_type)
            bs = _batch_size_of(job_type)
            if bs is not None:
                self._by_model.setdefault((model, sf), {})[bs] = thr

    @classmethod
    def load(cls, path, worker_type: str = "v100") -> "ThroughputTable":
        path = Path(path)
        raw = load(path, "json")
        if not isinstance(raw, dict) or worker_type not in raw or not isinstance(raw[worker_type], dict):
            raise WorkloadError(path, 0, worker_type, "worker type missing from throughputs file")
        table = {}
        for key, entry in raw[worker_type].items():
            try:
                job_type, sf = ast.literal_eval(key)
                thr = float(entry["null"])
            except (ValueError, SyntaxError, TypeError, KeyError):
                raise WorkloadError(path, 0, key, "expected \"('<model> (batch size B)', sf)\": {\"null\": it/s}") from None
            table[(str(job_type), int(sf))] = thr
        return cls(table, str(path))

    def get(self, model: str, batch_size: int, num_gpus: int) -> float | None:
        """Iterations per second of the whole job, or None if not profiled (or 0)."""
        return self._by_model.get((model, num_gpus), {}).get(batch_size)

    def batch_sizes(self, model: str, num_gpus: int) -> dict[int, float]:
        """All profiled batch sizes (-> it/s) of a model at a gang size."""
        return dict(self._by_model.get((model, num_gpus), {}))

    def scaled(self, model: str, batch_size: int, num_gpus: int) -> float | None:
        """Iterations per second on `num_gpus` GPUs: profiled, else the largest profiled count below it at this
        batch size scaled linearly (thr(g) = thr(g0) x g / g0: the importers' rule for a count a trace asks and
        the table lacks); None when no count below is profiled."""
        thr = self.get(model, batch_size, num_gpus)
        if thr is not None:
            return thr
        below = [g for g in self.gpu_counts(model, batch_size) if g < num_gpus]
        return self.get(model, batch_size, max(below)) * num_gpus / max(below) if below else None

    def gpu_counts(self, model: str, batch_size: int) -> dict[int, float]:
        """Every profiled GPU count (-> it/s of the whole job) of a model at a batch size."""
        return {sf: by_bs[batch_size] for (m, sf), by_bs in sorted(self._by_model.items())
                if m == model and batch_size in by_bs}

    def models(self) -> set[str]:
        return {m for (m, _sf) in self._by_model}


def _batch_size_of(job_type: str) -> int | None:
    if "(batch size " not in job_type:
        return None
    try:
        return int(job_type.split("(batch size ", 1)[1].rstrip(")"))
    except ValueError:
        return None
