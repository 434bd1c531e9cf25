"""Low-level Slurm command-line layer: validated argument lists in, plain dataclasses out.

Reads Slurm 22.05, 24.11 and 26.05 (each output's declared version picks the shapes; see
:mod:`.shapes`).

>>> cli = SlurmCLI(env={"SLURM_CONF": "/path/slurm.conf"})   # doctest: +SKIP
>>> [j.job_id for j in cli.squeue_jobs(states=["PENDING"])]  # doctest: +SKIP
"""
from .cli import SlurmCLI
from .errors import SlurmError, SlurmTimeout
from .models import FINISHED_STATES, HELD_REASONS, SlurmJob, SlurmNode
from .parse import (filter_jobs, parse_gpu_count, parse_nodes_json, parse_sbatch_parsable,
                    parse_sinfo_json, parse_sprio_site, parse_squeue_json, parse_squeue_meta)

__all__ = [
    "SlurmCLI", "SlurmError", "SlurmTimeout", "SlurmJob", "SlurmNode",
    "HELD_REASONS", "FINISHED_STATES",
    "parse_squeue_json", "parse_sinfo_json", "parse_sprio_site", "parse_sbatch_parsable",
    "parse_gpu_count", "filter_jobs", "parse_nodes_json", "parse_squeue_meta",
]
