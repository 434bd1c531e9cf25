"""Gandiva-Fair (proportional, equal tickets): X_i = min(1, G / m) for every job, not divided by the
gang size (as the reference's GandivProportionalPolicy)."""
from __future__ import annotations

from shockwave_lab.baselines.time_fraction import TimeFractionPolicy


class GandivaFair(TimeFractionPolicy):
    name = "gandiva_fair"
    label = "Gandiva-Fair"
    aliases = ("gandiva-fair",)
    reference_name = "gandiva_fair"
    description = "equal time shares per job (proportional share, equal tickets)."
    baseline = True
    order = 60

    def allocate(self, view):
        m = len(view.jobs)
        x = min(1.0, view.num_gpus / m) if m else 0.0
        return {j.job_id: x for j in view.jobs}
