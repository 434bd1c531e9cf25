"""A reference point for docs/results.md, NOT a shipped policy: "critical first, then rho deadline".

    nice -n 10 .venv/bin/python bench/probe_deadline.py [--margin 0.15] [TRACE ...]   # names from bench/study.py

Each round, with rem_i = steps_remaining_i / throughput_i (the current batch size; no oracle):
  M = max(now + sum_i rem_i * g_i / G, max_i now + rem_i)          (the makespan lower bound, online)
  critical_i  = now + rem_i * (1 + margin) >= M                     (delaying it stretches the makespan)
  deadline_i  = arrival_i + (run_time_i + rem_i) * max(1, total_jobs / G)   (rho = 1 under the metric)
Jobs run in the order (critical first, then earliest deadline), gangs packed greedily, work-conserving.
It shows what the issue's targets ask of a policy on these workloads (docs/results_notes.md).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


import shockwave_lab.simulate as sim
from solver.types import Policy, RoundDecision
from shockwave_lab.bench.study_traces import ALL, SWEEP, trace_file


class CriticalThenDeadline(Policy):
    name = "probe_critical_then_deadline"

    def __init__(self, margin: float = 0.15):
        self.margin = margin

    def decide(self, view):
        g = view.num_gpus
        c = max(1.0, (view.total_jobs or len(view.jobs)) / g)
        rem = {j.job_id: (j.steps_remaining / j.throughput if j.throughput > 0 else 0.0) for j in view.jobs}
        if not view.jobs:
            return RoundDecision(run=())
        m = max(view.now + sum(rem[j.job_id] * j.num_gpus for j in view.jobs) / g,
                max(view.now + r for r in rem.values()))

        def key(j):
            critical = view.now + rem[j.job_id] * (1 + self.margin) >= m
            deadline = j.arrival_time + (j.run_time + rem[j.job_id]) * c
            return (0 if critical else 1, deadline, str(j.job_id))
        free, run = g, []
        for j in sorted(view.jobs, key=key):
            if j.num_gpus <= free:
                run.append(j.job_id)
                free -= j.num_gpus
        return RoundDecision(run=tuple(run))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--margin", type=float, default=0.15)
    args = ap.parse_args(argv)
    specs = {s.name: s for s in ALL + SWEEP}
    names = args.traces or [s.name for s in ALL]
    sim.make_policy = lambda name, cfg=None: CriticalThenDeadline(args.margin)
    tmp = Path(tempfile.gettempdir()) / "shockwave-probe"
    tmp.mkdir(exist_ok=True)
    for name in names:
        spec = specs[name]
        trace, thr = trace_file(spec, tmp)
        m = sim.run_simulation(trace, thr, spec.gpus, "probe").metrics
        print(f"{name:20s} mk/LB {m.makespan_over_lb:.3f} makespan {m.makespan:9,.0f} jct {m.avg_jct:8,.0f} "
              f"worst {m.worst_rho:.3f} unfair {m.unfair_fraction:5.2f}%", flush=True)


if __name__ == "__main__":
    main()
