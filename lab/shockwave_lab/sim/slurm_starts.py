"""Where and when Slurm itself starts a job between two rounds (SimulatedCluster(slurm_starts=True)).

On a Slurm cluster the controller holds only the pending jobs a round has seen; a job submitted since is not held,
and Slurm starts it on its own request (its asked count, never a range) as soon as its gang fits on idle GPUs: at its
arrival, or when a job that ends frees GPUs, before the controller's next round (docs/replay-elastic.md).
The next round sees it running there (an elastic job that round grows restarts, as on Slurm).  The fit is Slurm's
for one job: a gang of up to a node's GPUs on the first node (by name) with room, a larger one on whole free nodes;
without nodes, room in the type's pool; the job's reference type first, then the other types its request allows.

`busy` lists what holds GPUs during the round: (start, stop, type, GPUs, nodes) of every run of it, a run that does
not end its job holding its GPUs to the round's end.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence


def place(gpus: int, types: Sequence[str], t0: float, end: float, busy: Sequence[tuple], capacity: Mapping[str, int],
          nodes: Mapping[str, tuple[str, int]]) -> tuple[float, str, tuple] | None:
    """(when, type, nodes) of the first moment in [t0, end) at which the gang fits (at t0, or when a run frees its
    GPUs), else None.  Nodes () without nodes."""
    times = sorted({t0} | {stop for _start, stop, *_rest in busy if t0 < stop < end})
    for t in times:
        running = [b for b in busy if b[0] <= t < b[1]]
        for gpu_type in types:
            if nodes:
                on = _fit_nodes(gpus, gpu_type, running, nodes)
                if on:
                    return t, gpu_type, on
            elif capacity.get(gpu_type, 0) - sum(g for _s, _e, ty, g, _n in running if ty == gpu_type) >= gpus:
                return t, gpu_type, ()
    return None


def _fit_nodes(gpus: int, gpu_type: str, running: Sequence[tuple], nodes: Mapping[str, tuple[str, int]]) -> tuple:
    used: dict[str, float] = {}
    for _s, _e, _ty, g, on in running:
        for n in on:
            used[n] = used.get(n, 0.0) + g / len(on)
    free = {n: size - used.get(n, 0.0) for n, (ty, size) in sorted(nodes.items()) if ty == gpu_type}
    size = max((nodes[n][1] for n in free), default=0)
    if not size:
        return ()
    if gpus <= size:
        return next(((n,) for n, f in free.items() if f >= gpus), ())
    if gpus % size:
        return ()
    whole = [n for n, f in free.items() if f >= size]
    return tuple(whole[: gpus // size]) if len(whole) >= gpus // size else ()
