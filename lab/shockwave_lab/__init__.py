"""slurm-shockwave-lab: what evaluates the controller, beside it and never inside it.

The simulator on the controller's own round loop (`sim/`, `simulate.py`), the paper's baselines and the peers a
site would pick instead (`baselines/`, registered with the decision core on import), workloads and the bundled
reference traces (`workload/`, `data/`), real local Slurm clusters (`localcluster/`), the replay and the demo on
them (`replay/`, `demo/`), the report (`report/`), the study and the benchmarks (`bench/`), and the `shockwave`
sub-commands that run them (`cli/`, plugged in through the ``slurm_shockwave.commands`` entry points).  It depends
on the product (`slurm_shockwave`, `solver`); nothing there imports it.
"""
from shockwave_lab import baselines  # noqa: F401  (registers the baseline policies)

__version__ = "0.1.0"
