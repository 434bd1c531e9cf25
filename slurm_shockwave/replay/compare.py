"""The replay's simulated column, and the two columns side by side.

The simulated column runs the same JobSpecs (same users) through the simulator with the restart cost measured in
the real run (collect.py) as its `restart_penalty` and as its preemption gate's cost (the controller gates
preemptions the same way in authoritative mode, controller/loop.py), rounds of 120 trace seconds, on the real
cluster's nodes (each gang on one node, solver/nodes.py).

For policy "slurm" (no controller) the model of a Slurm site is the `slurm-multifactor` policy when the policy
registry has it, with the real cluster's PriorityCalcPeriod (1 minute of wall time, in trace seconds); until then
`fifo_backfill` below: continuous time, jobs in submission order (ignoring fair-share), a job starts as soon as a node
has its GPUs free (best fit, a gang on one node, as `--nodes=1` asks), a later job starts first when it fits
(backfill with no time limits), nobody is preempted.
"""
from __future__ import annotations

from solver.policies import make_policy, policy_class

from ..backends.base import JobRecord
from ..controller.loop import RoundLoop
from ..metrics import compute
from ..sim.cluster import SimulatedCluster
from .collect import figures, user_share
from .site import model_settings

SLURM_MODEL = "slurm-multifactor"
KEYS = (("makespan_s", "makespan (s)", 0), ("avg_jct_s", "average JCT (s)", 0), ("worst_rho", "worst rho", 3),
        ("unfair_fraction", "unfair fraction (rho > 1.05, %)", 1),
        ("ftf_dynamic_worst", "dynamic FTF worst", 3), ("ftf_dynamic_p95", "dynamic FTF p95", 3),
        ("ftf_dynamic_unfair", "dynamic FTF unfair (%)", 1), ("restarts", "restarts", 0),
        ("wasted_preemptions", "wasted preemptions", 0), ("utilization", "GPU utilisation", 3))


def slurm_model() -> str:
    """The simulator's model of plain Slurm: the registry's slurm-multifactor when it exists."""
    try:
        return policy_class(SLURM_MODEL).name
    except ValueError:
        return "fifo+backfill"


def simulate(specs, table, gpus: int, nodes: int, policy: str, restart_cost: float,
             time_scale: float | None = None) -> dict:
    """`time_scale`: the replay's, for the model of its cluster's configuration (policy "slurm", replay/site.py)."""
    model = slurm_model() if policy == "slurm" else policy_class(policy).name
    if model == "fifo+backfill":
        return fifo_backfill(specs, gpus, nodes, table)
    cluster = SimulatedCluster(specs, table, gpus, round_length=120.0, restart_penalty=restart_cost,
                               gpus_per_node=gpus // nodes if nodes else None)
    loop = RoundLoop(cluster, make_policy(model, model_settings(time_scale) if policy == "slurm" and time_scale
                                          else None),
                     keep_records=True, mode="authoritative",
                     preemption_cost_s=restart_cost if policy != "slurm" else None)
    loop.run()
    m = compute(model, cluster.finished, gpus, n_trace=len(specs), busy_gpu_seconds=cluster.busy_gpu_seconds,
                start_time=min(s.arrival_time for s in specs))
    finish = {r.job_id: r.finish_time for r in cluster.finished}
    spec = {s.job_id: s for s in specs}
    intervals = []
    for i, rec in enumerate(loop.records):
        end = loop.records[i + 1].view.now if i + 1 < len(loop.records) else max(finish.values())
        for jid in rec.decision.run:
            s = spec[jid]
            intervals.append((s.user, rec.view.now, min(end, finish.get(jid, end)), s.num_gpus))
    out = figures(m)
    out.update(policy=model, restarts=sum(r.restarts for r in cluster.finished),
               wasted_preemptions=loop.preemptions["wasted"], preemptions=loop.preemptions["preempted"],
               rounds=loop.rounds, restart_penalty_s=restart_cost,
               user_share=_share(intervals, cluster.finished),
               per_job={f"t{int(r.job_id):03d}": round(r.jct, 1) for r in cluster.finished})
    return out


def _share(intervals, records) -> dict:
    arrivals, finishes = {}, {}
    for r in records:
        arrivals.setdefault(r.user, []).append(r.arrival_time)
        finishes.setdefault(r.user, []).append(r.finish_time)
    return user_share(intervals, arrivals, finishes)


def fifo_backfill(specs, gpus: int, nodes: int, table=None) -> dict:
    """The model of plain Slurm described in the module docstring.  A job runs for its work under the schedule it
    follows (what the emulated job sleeps: profiles.isolated_runtime); its rho still divides by the profiled
    exclusive time, as the simulator's."""
    from ..workload import profiles
    work = {s.job_id: (profiles.isolated_runtime(s, table) if table is not None else s.isolated_runtime)
            for s in specs}
    per_node = gpus // nodes
    free = [per_node] * nodes
    waiting = sorted(specs, key=lambda s: (s.arrival_time, s.job_id))
    running, records, intervals, t = [], [], [], min(s.arrival_time for s in specs)
    while waiting or running:
        for s in [s for s in waiting if s.arrival_time <= t]:
            fits = [n for n in range(nodes) if free[n] >= s.num_gpus]
            if fits:
                node = min(fits, key=lambda n: (free[n], n))        # best fit
                free[node] -= s.num_gpus
                waiting.remove(s)
                running.append((t + work[s.job_id], node, s, t))
        nxt = [e for e, *_ in running] + [s.arrival_time for s in waiting if s.arrival_time > t]
        if not nxt:
            raise ValueError("a job asks for more GPUs than a node has")
        t = min(nxt)
        for item in [r for r in running if r[0] <= t]:
            end, node, s, began = item
            running.remove(item)
            free[node] += s.num_gpus
            records.append(JobRecord(s.job_id, s.user, s.num_gpus, s.arrival_time, end, s.isolated_runtime,
                                     work[s.job_id], 1, 0))
            intervals.append((s.user, began, end, s.num_gpus))
    m = compute("fifo+backfill", records, gpus, n_trace=len(specs), start_time=min(s.arrival_time for s in specs))
    out = figures(m)
    out.update(policy="fifo+backfill", restarts=0, wasted_preemptions=0, preemptions=0,
               user_share=_share(intervals, records),
               per_job={f"t{int(r.job_id):03d}": round(r.jct, 1) for r in records})
    return out


def deviation(real: dict, sim: dict) -> dict:
    """real / simulated - 1 for times; differences (real - simulated) for ratios and percentages."""
    out = {}
    for k in ("makespan_s", "avg_jct_s"):
        if real.get(k) and sim.get(k):
            out[k] = real[k] / sim[k] - 1.0
    for k in ("worst_rho", "unfair_fraction", "ftf_dynamic_worst", "ftf_dynamic_unfair"):
        if real.get(k) is not None and sim.get(k) is not None:
            out[k] = real[k] - sim[k]
    return out


def _fmt(v, nd) -> str:
    if v is None:
        return "-"
    return f"{v:,.{nd}f}"


def rows(result: dict) -> list[list[str]]:
    """[label, real, simulated, deviation] rows of one replay's result."""
    real, sim, dev = result["real"], result["simulated"], result.get("deviation", {})
    out = []
    for key, label, nd in KEYS:
        d = dev.get(key)
        dtext = "" if d is None else (f"{100 * d:+.1f}%" if key.endswith("_s") else f"{d:+.{max(nd, 1)}f}")
        out.append([label, _fmt(real.get(key), nd), _fmt(sim.get(key), nd), dtext])
    for u in sorted(set(real.get("user_share") or {}) | set(sim.get("user_share") or {})):
        a, b = (real.get("user_share") or {}).get(u), (sim.get("user_share") or {}).get(u)
        out.append([f"GPU share {u}", "-" if a is None else f"{100 * a:.1f}%", "-" if b is None else f"{100 * b:.1f}%",
                    "" if a is None or b is None else f"{100 * (a - b):+.1f} pt"])
    return out


def render_text(result: dict) -> str:
    head = ["", "real", f"simulated ({result['simulated'].get('policy')})", "real vs simulated"]
    table = [head, *rows(result)]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in table]
    return "\n".join(lines)


def render_markdown(result: dict) -> str:
    head = ["", "real", f"simulated ({result['simulated'].get('policy')})", "real vs simulated"]
    out = ["| " + " | ".join(head) + " |", "|---|---:|---:|---:|"]
    out += ["| " + " | ".join(r) + " |" for r in rows(result)]
    return "\n".join(out)
