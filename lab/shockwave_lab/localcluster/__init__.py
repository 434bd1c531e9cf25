"""A real Slurm cluster on this machine for tests and demos (Debian's Slurm 22.05, fake GPUs).

>>> from shockwave_lab.localcluster import LocalCluster, SlurmUnavailable
>>> with LocalCluster(root="/tmp/x", nodes=2, gpus_per_node=4) as c:   # doctest: +SKIP
...     c.run(["squeue", "--json"])

Modules: :mod:`.install` (apt), :mod:`.config` (files, ports), :mod:`.daemons` (start/stop by
pid), :mod:`.accounting` (MariaDB, slurmdbd, associations), :mod:`.readiness` (idle nodes, jobs
cancelled), :mod:`.chroot` and :mod:`.root_packages` (other versions' Debian roots), :mod:`.cluster`
(the :class:`LocalCluster` API).
"""
from shockwave_lab.localcluster import signals
from shockwave_lab.localcluster.cluster import ClusterStartError, LocalCluster
from shockwave_lab.localcluster.install import SlurmUnavailable, ensure_installed, missing_packages

__all__ = ["LocalCluster", "SlurmUnavailable", "ClusterStartError", "ensure_installed", "signals",
           "missing_packages"]
