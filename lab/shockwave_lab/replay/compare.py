"""The replay's simulated column, and the two columns side by side.

The simulated column runs the same JobSpecs (same users) through the simulator (simulate.py `run_simulation`, as
`shockwave simulate` and the study do) with the restart cost measured in the real run (collect.py) as its
`restart_penalty` and as its preemption gate's cost (the controller gates preemptions the same way in
authoritative mode, controller/loop.py), rounds of 120 trace seconds that end early as the controller's do (a job
ends while another waits: the replay controller's poll and min gap, site.py `model_early_rounds`), on the real
cluster's nodes (each gang on one node, solver/nodes.py).

For policy "slurm" (no controller) the model of a Slurm site is the `slurm-multifactor` policy with the real
cluster's settings in trace seconds (site.py): its PriorityCalcPeriod, and rounds of its scheduler pass (1 s of wall
time) rather than 120 s.  `spread` runs either with the arrivals moved by up to 1 s of wall time, as the real
cluster moves them.

Elastic jobs (`replay --elastic N`) carry their range in the JobSpecs (replay/api.py `load`), so the simulated column
runs them as `simulate --elastic N` does.  Its count changes (`sim_resizes`) are read from the round log as the round
loop counts them (`RoundLoop.resizes`: a job placed on another count than it ran on, or than its own when it did not
run), and one is wasted by the controller's rule (solver/elastic.py `wasted_change`): the job's next change comes less
than a round after the round it was made in (the job runs that round at its new count).
"""
from __future__ import annotations

import dataclasses
import random
import statistics

from solver.elastic import wasted_change
from solver.policies import policy_class

from shockwave_lab.replay.collect import figures, user_share
from shockwave_lab.simulate import run_simulation
from shockwave_lab.replay.site import model_early_rounds, model_round_s, model_settings

SLURM_MODEL = "slurm-multifactor"
KEYS = (("makespan_s", "makespan (s)", 0), ("avg_jct_s", "average JCT (s)", 0), ("worst_rho", "worst rho", 3),
        ("unfair_fraction", "unfair fraction (rho > 1.05, %)", 1),
        ("ftf_dynamic_worst", "dynamic FTF worst", 3), ("ftf_dynamic_p95", "dynamic FTF p95", 3),
        ("ftf_dynamic_unfair", "dynamic FTF unfair (%)", 1), ("restarts", "restarts", 0),
        ("wasted_preemptions", "wasted preemptions", 0), ("utilization", "GPU utilisation", 3))
#: the rows of a replay with elastic jobs: the count changes (real: the controller's ResizeLog)
ELASTIC_KEYS = (("resizes", "GPU count changes started", 0), ("resizes_done", "GPU count changes done", 0),
                ("wasted_resizes", "wasted count changes", 0))
#: the row of a replay with jobs submitted with --no-requeue (`preemptible: false` in the simulation)
PINNED_KEYS = (("no_requeue_restarts", "restarts of --no-requeue jobs", 0),)
#: the row of a replay on several GPU types: runs that started on another type than the job's run before
TYPED_KEYS = (("type_moves", "moves to another GPU type", 0),)
SPREAD_KEYS = ("makespan_s", "avg_jct_s", "worst_rho", "unfair_fraction")


def simulate(specs, table, gpus, nodes: int, policy: str, restart_cost: float,
             time_scale: float | None = None, round_s: float = 120.0, early: bool = True,
             slurm_starts: bool = True) -> dict:
    """`gpus`: a number, or {type: GPUs} with `table` {type: table} (replay/api.py `load`); `time_scale`: the replay's, for the model of its cluster's configuration (policy "slurm", replay/site.py)
    and of its controller's early rounds (None: production's); `round_s`: the controller's round in trace seconds
    (plain Slurm's model keeps its scheduler pass); `early`: False for the reference's rounds (no early ones);
    `slurm_starts`: Slurm starts an arrival between the controller's rounds where it fits (sim/slurm_starts.py)."""
    model = SLURM_MODEL if policy == "slurm" else policy_class(policy).name
    site = policy == "slurm" and time_scale
    total = gpus if isinstance(gpus, int) else sum(gpus.values())   # {type: GPUs}: a cluster of several types
    gated = policy != "slurm"                     # the controller's gate; plain Slurm preempts nobody
    r = run_simulation(specs, table, gpus, model, round_length=model_round_s(time_scale) if site else round_s,
                       policy_config=model_settings(time_scale) if site else None, keep_round_log=True,
                       restart_penalty=restart_cost, gpus_per_node=total // nodes if nodes else None,
                       early_rounds=model_early_rounds(time_scale, round_s) if early and gated else None,
                       preemption_cost_s=restart_cost if gated else None, mode="authoritative",
                       slurm_starts=slurm_starts and early and gated)
    finish = {rec.job_id: rec.finish_time for rec in r.records}
    spec = {s.job_id: s for s in specs}
    intervals = []
    for i, rec in enumerate(r.round_log):
        end = r.round_log[i + 1].view.now if i + 1 < len(r.round_log) else max(finish.values())
        for jid in rec.decision.run:
            s = spec[jid]
            intervals.append((s.user, rec.view.now, min(end, finish.get(jid, end)), _placed(rec, jid, s.num_gpus)))
    out = figures(r.metrics)
    out.update(policy=model, restarts=sum(rec.restarts for rec in r.records),
               wasted_preemptions=r.preemptions["wasted"], preemptions=r.preemptions["preempted"],
               rounds=r.rounds, restart_penalty_s=restart_cost, user_share=_share(intervals, r.records),
               per_job={f"t{int(rec.job_id):03d}": round(rec.jct, 1) for rec in r.records})
    if any(s.gpus_range for s in specs):
        out.update(sim_resizes(r.round_log, round_s))
    if not isinstance(gpus, int):
        runs = {}
        for rec in r.round_log:
            for jid in rec.decision.run:
                runs.setdefault(jid, []).append(next(iter(rec.decision.placement[jid])))
        out["type_moves"] = sum(changes(ts) for ts in runs.values())
    if any(s.preemptible is False for s in specs):
        out["no_requeue_restarts"] = sum(rec.restarts for rec in r.records if spec[rec.job_id].preemptible is False)
    return out


def _placed(rec, jid, asked: int) -> int:
    """The GPUs a round gave a job (its placement), else the count it asked for."""
    by = rec.decision.placement.get(jid) if rec.decision.placement else None
    return sum(by.values()) if by else asked


def sim_resizes(round_log, round_s: float) -> dict:
    """The simulated count changes: {"resizes", "resizes_done", "wasted_resizes", "grown", "shrunk"} (module
    docstring); in the simulator a change is done when it is made (the job runs the round at its new count)."""
    grown = shrunk = wasted = 0
    last: dict = {}                                   # job -> when its last change was made
    for rec in round_log:
        views = {j.job_id: j for j in rec.view.jobs}
        for jid in rec.decision.run:
            v = views.get(jid)
            if v is None or v.gpus_range is None:
                continue
            before, after = v.running_gpus or v.num_gpus, _placed(rec, jid, v.num_gpus)
            if after == before:
                continue
            grown, shrunk = grown + (after > before), shrunk + (after < before)
            if jid in last and wasted_change(last[jid], rec.view.now, round_s):
                wasted += 1
            last[jid] = rec.view.now
    return {"resizes": grown + shrunk, "resizes_done": grown + shrunk, "wasted_resizes": wasted, "grown": grown,
            "shrunk": shrunk}


def _share(intervals, records) -> dict:
    arrivals, finishes = {}, {}
    for r in records:
        arrivals.setdefault(r.user, []).append(r.arrival_time)
        finishes.setdefault(r.user, []).append(r.finish_time)
    return user_share(intervals, arrivals, finishes)


def changes(seq) -> int:
    """How often a sequence changes value (a job's GPU type from one run or round to the next)."""
    return sum(a != b for a, b in zip(seq, seq[1:]))


def spread(specs, table, gpus: int, nodes: int, policy: str, restart_cost: float, time_scale: float,
           runs: int = 16, seed: int = 0) -> dict:
    """The simulated column's spread: `runs` simulations of the same jobs, each one's arrival delayed by a uniform
    draw in [0, `time_scale`] trace seconds (up to 1 s of wall time: what a submission and a scheduler pass take on
    the real cluster).  Delays that small move the 120-job trace's makespan by several percent under plain Slurm (a
    different job ends last; the makespans fall in two groups), so one real run is read against this range and
    the mean, not one simulation.  Returns {key: {"mean", "median", "min", "max"}} for the headline figures, and
    "runs" and "jitter_s"."""
    rng = random.Random(seed)
    got = []
    for _ in range(runs):
        moved = [dataclasses.replace(s, arrival_time=s.arrival_time + rng.uniform(0.0, time_scale)) for s in specs]
        got.append(simulate(moved, table, gpus, nodes, policy, restart_cost, time_scale))
    out = {"runs": runs, "jitter_s": time_scale}
    for key in SPREAD_KEYS:
        values = [g[key] for g in got if g.get(key) is not None]
        if values:
            out[key] = {"mean": statistics.fmean(values), "median": statistics.median(values), "min": min(values),
                        "max": max(values)}
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


def fmt_figure(v, nd) -> str:
    if v is None:
        return "-"
    return f"{v:,.{nd}f}"


def rows(result: dict) -> list[list[str]]:
    """[label, real, simulated, deviation] rows of one replay's result."""
    real, sim, dev = result["real"], result["simulated"], result.get("deviation", {})
    out = []
    extra = (ELASTIC_KEYS if result.get("elastic") else ()) + (PINNED_KEYS if result.get("no_requeue") else ()) + (
        TYPED_KEYS if result.get("gpu_types") else ())
    for key, label, nd in KEYS + extra:
        d = dev.get(key)
        dtext = "" if d is None else (f"{100 * d:+.1f}%" if key.endswith("_s") else f"{d:+.{max(nd, 1)}f}")
        out.append([label, fmt_figure(real.get(key), nd), fmt_figure(sim.get(key), nd), dtext])
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
