"""The Slurm site of slurm_multifactor.py with PreemptMode=REQUEUE: a pending job that cannot start requeues
running jobs of lower priority (lowest first, the youngest first among equals) when that lets it start now; a
requeued job goes back to the queue with its age reset (Slurm resets its eligible time) and, in the simulator,
restarts from its checkpoint and pays the restart penalty.

Slurm itself decides preemption by partition PriorityTier or QOS (PreemptType=preempt/partition_prio or
preempt/qos), never by the multifactor priority: this is the site whose QOS tiers follow the job priority, the
idealised form of priority preemption.
"""
from __future__ import annotations

from shockwave_lab.baselines.slurm_multifactor import SlurmMultifactor


class SlurmPreempt(SlurmMultifactor):
    name = "slurm-preempt"
    label = "Slurm+preempt"
    description = "the Slurm site (multifactor priority, backfill) with requeue preemption by priority."
    order = 66
    preempt = True
