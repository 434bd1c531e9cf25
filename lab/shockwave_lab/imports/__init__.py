"""Importers of real workloads (`shockwave trace import`, docs/trace-import.md): a site's own Slurm accounting
(`sacct --json` of 22.05, 24.11, 26.05 and `sacct -P`) and the public traces of GPU clusters (Philly, Helios, Acme,
Alibaba PAI 2020, Alibaba spot GPU 2026), one module per format, into our job spec (docs/job-spec.md).

`load(fmt, path, rules, tasks=None)` reads a file into the jobs it keeps (`common.Row`) and the `Tally` of what it
dropped or clipped and why; `entries.to_entries` turns them into job-spec entries.
"""

from __future__ import annotations

from importlib import import_module

from shockwave_lab.imports.common import Row, Rules, Tally, admit

#: format name -> (module, what it reads)
FORMATS = {
    "sacct-json": ("sacct_json", "sacct --json (Slurm 22.05, 24.11, 26.05)"),
    "sacct": ("sacct_text", "sacct -P with a header line"),
    "philly": ("philly", "Philly cluster_job_log (ATC '19)"),
    "helios": ("helios", "Helios cluster_log.csv (SC '21)"),
    "acme": ("acme", "Acme trace_seren.csv / trace_kalos.csv (NSDI '24)"),
    "pai": ("pai", "Alibaba PAI 2020 pai_job_table.csv, with --tasks pai_task_table.csv (NSDI '22)"),
    "alibaba-spot": ("alibaba_spot", "Alibaba spot GPU 2026 job_info_df.csv (ASPLOS '26)"),
    "alibaba-openb": ("alibaba_openb", "Alibaba GPU 2023 openb_pod_list_*.csv (ATC '23)"),
    "pollux-philly": ("pollux", "Philly as Pollux's artifact ships it: simulator/traces/philly.csv (OSDI '21)"),
    "pollux-workload": ("pollux_workloads", "Pollux's realistic workloads: workload-N.csv of its artifact (OSDI '21)"),
}


def load(fmt: str, path, rules: Rules | None = None, tasks=None) -> tuple[list[Row], Tally]:
    """(the jobs kept, the tally of the rest).  WorkloadError (one line: file, row, field) on bad input."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    if tasks is not None and fmt != "pai":
        raise ValueError("--tasks is for --format pai only")
    reader = import_module(f"shockwave_lab.imports.{FORMATS[fmt][0]}")
    tally = Tally()
    rows = reader.read(path, tally, tasks=tasks) if fmt == "pai" else reader.read(path, tally)
    return admit(rows, tally, rules or Rules()), tally
