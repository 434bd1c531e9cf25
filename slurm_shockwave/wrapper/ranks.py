"""Which rank of a multi-process job this process is, and how the ranks agree to stop.

The rank is read from the launcher's environment: ``RANK`` / ``LOCAL_RANK`` / ``WORLD_SIZE`` (torchrun,
``accelerate launch``, deepspeed), else ``SLURM_PROCID`` / ``SLURM_LOCALID`` / ``SLURM_NTASKS`` (``srun``, one task
per GPU; a plain one-task batch job is rank 0 of 1), else from an initialized ``torch.distributed``.  Global rank 0
reports events and writes the checkpoint.

:func:`agree` makes every rank take the same decision: when the program has imported and initialized
``torch.distributed`` with more than one process, it is an ``all_reduce(MAX)`` of the local flags (a collective:
every rank must call it the same number of times); otherwise the local flag (the shared request file is then
the agreement).  :func:`spread` gives every rank the minimum and maximum of some integers over all ranks (``Training``
checks with it that every rank resumes at the same epoch and step).  torch is never imported here: only looked up
in ``sys.modules``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_VARS = (("RANK", "LOCAL_RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"))


@dataclass(frozen=True)
class Rank:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def leader(self) -> bool:
        """Global rank 0: reports and writes the checkpoint."""
        return self.rank == 0


def detect(env: Mapping[str, str] = os.environ) -> Rank:
    """This process's rank from the launcher's environment (rank 0 of 1 when there is none)."""
    for rank_var, local_var, size_var in _VARS:
        rank, size = _int(env.get(rank_var)), _int(env.get(size_var))
        if rank is not None and size is not None and 0 <= rank < size:
            return Rank(rank, _int(env.get(local_var)) or 0, size)
    dist = distributed()  # e.g. torch.multiprocessing.spawn, which sets no variables
    return Rank(dist.get_rank(), 0, dist.get_world_size()) if dist is not None else Rank()


def distributed() -> Any:
    """``torch.distributed`` if the program imported it and initialized a group of more than one process."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist
    except Exception:  # noqa: BLE001 - a half-torn-down group: no collective, each rank decides alone
        return None
    return None


def agree(flag: bool) -> bool:
    """True on every rank if it is true on any (see the module docstring: a collective under torch.distributed)."""
    dist = distributed()
    if dist is None:
        return bool(flag)
    t = _tensor(dist, [1 if flag else 0])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def spread(values: list[int]) -> tuple[list[int], list[int]]:
    """(minimum, maximum) of each of ``values`` over all ranks: one collective under torch.distributed (every
    rank passes as many values), else ``(values, values)``."""
    dist = distributed()
    if dist is None:
        return list(values), list(values)
    t = _tensor(dist, [*values, *(-v for v in values)])
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    out = [int(v) for v in t.tolist()]
    n = len(values)
    return out[:n], [-v for v in out[n:]]


def _tensor(dist: Any, values: list[int]) -> Any:
    torch = sys.modules["torch"]
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    return torch.tensor(values, dtype=torch.int64, device=device)


def _int(val: str | None) -> int | None:
    try:
        return int(val) if val is not None and val.strip() else None
    except ValueError:
        return None
