"""Acme (NSDI '24, Shanghai AI Lab): `data/job_trace/trace_seren.csv` and `trace_kalos.csv`.

Columns (header line): job_id, user, node_num, gpu_num, cpu_num, type, state, submit_time, start_time, end_time,
duration, queue, gpu_time (Kalos adds mem_per_pod_GB, shared_mem_per_pod, fail_time, stop_time, which are not
read).  Times carry their zone (`2023-03-01 00:18:22+08:00`).  The same rules as Helios (shockwave_lab/imports/
helios.py): run time end_time - start_time, GPUs `gpu_num`, user `user`; the trace has no account (each user is its
own), no GPU type and says nothing of preemption.  `type` (pretrain, SFT, eval, debug, ...) is not a model: the
jobs are static unless --adaptation-mix says otherwise.
"""

from __future__ import annotations

from shockwave_lab.imports import helios
from shockwave_lab.imports.common import Row, Tally


def read(path, tally: Tally) -> list[Row]:
    return helios.read(path, tally, account=None)
