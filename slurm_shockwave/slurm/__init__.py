"""Everything that knows Slurm, behind the backend contract (backends/base.py).

* the command-line layer: validated argument lists in, plain dataclasses out (`commands`, `parse`,
  `shapes`, `models`, `errors`); reads Slurm 22.05, 24.11 and 26.05 (each output's declared version picks
  the shapes; see :mod:`.shapes`);
* the backend (`backend`): the round loop's view of the queue (`jobview`) and the enactment of a decision
  (`enact`), with the ownership marks that make holds crash-safe (`ownership`);
* the job-comment marker and hints (`hints`), the Slurm side of `controller check` (`preflight`) and
  `controller uninstall` (`uninstall`).

>>> cli = SlurmCLI(env={"SLURM_CONF": "/path/slurm.conf"})   # doctest: +SKIP
>>> [j.job_id for j in cli.squeue_jobs(states=["PENDING"])]  # doctest: +SKIP
"""

from slurm_shockwave.slurm.commands import SlurmCLI
from slurm_shockwave.slurm.errors import SlurmError, SlurmTimeout
from slurm_shockwave.slurm.models import ACTIVE_STATES, FINISHED_STATES, HELD_REASONS, SlurmJob, SlurmNode, in_partition
from slurm_shockwave.slurm.parse import (
    filter_jobs,
    parse_gpu_count,
    parse_nodes_json,
    parse_sbatch_parsable,
    parse_sinfo_json,
    parse_sprio_site,
    parse_squeue_json,
    parse_squeue_meta,
)

# fmt: off
__all__ = ["ACTIVE_STATES", "FINISHED_STATES", "HELD_REASONS", "SlurmCLI", "SlurmError", "SlurmJob", "SlurmNode",
           "SlurmTimeout", "filter_jobs", "in_partition", "parse_gpu_count", "parse_nodes_json",
           "parse_sbatch_parsable", "parse_sinfo_json", "parse_sprio_site", "parse_squeue_json", "parse_squeue_meta"]
# fmt: on
