"""Waiting on a local cluster's nodes: all idle with their GPUs after a start, every job off them before a stop."""
from __future__ import annotations

import logging
import time

from slurm_shockwave.slurm import SlurmCLI, SlurmError
from shockwave_lab.localcluster import daemons as d
from shockwave_lab.localcluster.config import ClusterSettings, Paths

log = logging.getLogger(__name__)


def wait_nodes_idle(cli: SlurmCLI, paths: Paths, settings: ClusterSettings, deadline: float) -> None:
    """Poll until every node is idle, without flags, with its GPUs; DaemonError (with the slurmd logs) if not by
    ``deadline`` (time.monotonic)."""
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            nodes = {n.name: n for n in cli.sinfo_nodes()}
        except SlurmError as exc:  # transient while the controller settles
            last = str(exc)
            time.sleep(0.1)
            continue
        ready = [name for name in settings.node_names
                 if name in nodes and nodes[name].state == "idle" and not nodes[name].state_flags
                 and nodes[name].gpus == settings.gpus_per_node]
        if len(ready) == settings.nodes:
            return
        last = ", ".join(f"{n.name}={n.state}{'+' + '+'.join(n.state_flags) if n.state_flags else ''}"
                         f" gpu:{n.gpus}" + (f" ({n.reason})" if n.reason else "")
                         for n in nodes.values())
        time.sleep(0.1)
    tails = " ; ".join(f"{n}: {d.log_tail(paths.log_file('slurmd.' + n), 2)}"
                       for n in settings.node_names)
    raise d.DaemonError(f"nodes not idle in time: {last}; slurmd logs: {tails}")


def cancel_all_jobs(cli: SlurmCLI, wait: float) -> None:
    """scancel every unfinished job, then wait up to ``wait`` s for them to leave the nodes."""
    try:
        active = [j.job_id for j in cli.squeue_jobs() if not j.finished]
        if active:
            cli.cancel(active)
        deadline = time.monotonic() + wait
        while active and time.monotonic() < deadline:
            time.sleep(0.2)
            active = [j.job_id for j in cli.squeue_jobs(job_ids=active)
                      if j.state in ("RUNNING", "COMPLETING", "CONFIGURING")]
    except SlurmError as exc:
        log.info("could not cancel jobs before stopping: %s", exc)
