"""The demo's simulated Shockwave column: its jobs simulated as the controller runs them, with its preemption
gate (solver/preemption.py) and the preemption cost measured in the real run, charged by the simulator as each
restart's cost (so real and simulated pay the same); and the real run's preemption counts, read back from the
controller's state and the jobs' events.  Wasted preemptions are counted in both: target 0.
"""
from __future__ import annotations

from solver.policies import default_policy, make_policy

from slurm_shockwave.controller.loop import RoundLoop
from shockwave_lab.metrics import compute
from shockwave_lab.sim.cluster import SimulatedCluster
from shockwave_lab.demo.summary import specs_from


def measured(store, progress: dict, default_cost_s: float) -> dict:
    """The real run's preemptions (controller state) and its mean measured preemption cost (jobs' events; the
    controller's default when none was measured)."""
    counts = ((store.get("preemptions") or {}).get("counts") or {}) if store is not None else {}
    costs = [p.preempt_cost_s for p in progress.values() if p is not None and p.preempt_cost_s is not None]
    return {"preemptions": counts.get("preempted", 0), "preemptions_kept": counts.get("kept", 0),
            "preemptions_wasted": counts.get("wasted", 0),
            "preempt_cost_s": sum(costs) / len(costs) if costs else default_cost_s,
            "preempt_cost_measured": len(costs)}


def simulate_gated(jobs, rows, num_gpus: int, round_seconds: float, cost_s: float, policy: str | None = None,
                   step_time_guess: float | None = None) -> dict:
    """The same jobs (demo/summary.py `specs_from`) on the simulated cluster under the controller's gate, each
    restart charged `cost_s`; the demo's summary keys plus the preemption counts."""
    specs, table = specs_from(jobs, rows, step_time_guess)
    pol = make_policy(policy or default_policy().name, None)
    cluster = SimulatedCluster(specs, table, num_gpus, round_length=round_seconds, restart_penalty=cost_s)
    loop = RoundLoop(cluster, pol, preemption_cost_s=cost_s)
    loop.run()
    m = compute(pol.name, cluster.finished, num_gpus, n_trace=len(specs), busy_gpu_seconds=cluster.busy_gpu_seconds,
                start_time=min(s.arrival_time for s in specs))
    users: dict = {}
    for rec in cluster.finished:
        users.setdefault(jobs[rec.job_id][0].user, []).append(rec.jct)
    return {"makespan_s": m.makespan, "avg_jct_s": m.avg_jct, "worst_rho": m.worst_rho,
            "unfair_fraction": m.unfair_fraction, "jobs": m.jobs, "policy": m.policy,
            "restarts": sum(r.restarts for r in cluster.finished), "preempt_cost_s": cost_s,
            "preemptions": loop.preemptions["preempted"], "preemptions_kept": loop.preemptions["kept"],
            "preemptions_wasted": loop.preemptions["wasted"],
            "user_jct": {u: sum(v) / len(v) for u, v in sorted(users.items())},
            "per_job": {jobs[rec.job_id][0].name: rec.jct for rec in cluster.finished}}
