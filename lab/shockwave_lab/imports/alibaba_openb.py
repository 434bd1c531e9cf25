"""Alibaba GPU cluster trace 2023 ("openb", ATC '23, Beware of Fragmentation): `cluster-trace-gpu-v2023/csv/
openb_pod_list_default.csv` from `alibaba/clusterdata` (8,152 pods of a 6,212-GPU Kubernetes cluster).

Columns (header line): name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time,
deletion_time, scheduled_time; times are whole seconds on the trace's own clock (creation_time 0 is its first pod).
**A job is a pod**: the trace has no job above its pods (each `name` is one task of its own).  Arrival
`creation_time`; run time `deletion_time - scheduled_time` (the pod held its GPUs from being bound to a node until
it was deleted); GPUs `num_gpu`, except a pod with `num_gpu` 1 and `gpu_milli` < 1000, which asks for that share of
one GPU (`gpu_milli / 1000`: the shared `--fractional` rule rounds it up or drops it).  `pod_phase`: Succeeded,
Failed and Running (deleted while running) ran; Pending (no `scheduled_time`): never started; a Running pod whose
`deletion_time` is the file's last one (the trace's end: 34 pods of the default list share it) was still running
when the trace was taken.  `gpu_spec` (the `gpuspec*` lists' added constraints, empty in the default list): one type
is the job's GPU type (lower case); several (`V100M16|V100M32`) leave it out (the job spec takes one type: any runs it).
Users: **none** (the trace names no users or tenants: each job is the job spec's default user); account: the pod's
`qos` (LS, BE, Burstable, Guaranteed), the only grouping the trace has.  Nothing on preemption is read (BE is a QoS
class: the trace does not say such pods were preempted).
"""

from __future__ import annotations

from pathlib import Path

from shockwave_lab.imports.common import Row, Tally, csv_rows, gpus, missing, name, number, span
from shockwave_lab.workload.errors import WorkloadError

COLUMNS = ("name", "num_gpu", "gpu_milli", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
PHASES = ("succeeded", "failed", "running", "pending")


def read(path, tally: Tally) -> list[Row]:
    path = Path(path)
    pods = []
    for line, cell in csv_rows(path, COLUMNS):
        phase = cell["pod_phase"].strip().lower()
        if phase not in PHASES:
            raise WorkloadError(
                path, line, "pod_phase", f"expected one of {', '.join(PHASES)}, got {cell['pod_phase']!r}"
            )
        created = number(path, line, "creation_time", cell["creation_time"])
        times = [
            None if missing(cell[f]) else number(path, line, f, cell[f]) for f in ("scheduled_time", "deletion_time")
        ]
        pods.append((line, cell, phase, created, *times))
    end = max((deleted for *_, deleted in pods if deleted is not None), default=None)
    out = []
    for line, cell, phase, created, scheduled, deleted in pods:
        if scheduled is not None and scheduled < created:
            raise WorkloadError(path, line, "scheduled_time", f"before its creation_time ({scheduled - created:g} s)")
        running = phase == "running" and (deleted is None or deleted == end)
        ran = phase != "pending" and not running
        out.append(
            Row(
                id=cell["name"].strip() or str(line),
                submit=created,
                runtime=span(path, line, "scheduled_time", scheduled, "deletion_time", deleted) if ran else None,
                gpus=_gpus(path, line, cell),
                account=name(cell["qos"]),
                gpu_type=_gpu_type(cell.get("gpu_spec")),
                unfinished=running and scheduled is not None,
            )
        )
    return out


def _gpus(path, line, cell) -> float:
    whole = gpus(path, line, "num_gpu", cell["num_gpu"])
    milli = number(path, line, "gpu_milli", cell["gpu_milli"], hi=1000, what=" for thousandths of a GPU")
    if whole != int(whole):
        raise WorkloadError(path, line, "num_gpu", f"not a whole number: {cell['num_gpu']!r}")
    return milli / 1000 if whole == 1 and 0 < milli < 1000 else whole


def _gpu_type(spec) -> str | None:
    text = name(spec)
    return None if text is None or text.lower() == "nan" or "|" in text else text.lower()
