"""The study's issue-24 tables (study_report.py puts them in docs/results.md): several GPU types (TYPED: the
default against Gavel's heterogeneity-aware max-min fairness) and users (USERS: each user's GPU share)."""
from __future__ import annotations

from solver.policies import default_policy, policy_class

GAVEL_HET = "max_min_fairness_het"
TYPED_TARGETS = ("makespan < Gavel-het", "worst dyn. FTF < Gavel-het")
TYPED_TEXT = (
    "Study traces on clusters of three GPU types, each at its column of the TACC throughput file (`shockwave "
    "simulate --gpus v100:16,p100:8,k80:8`, `lab/shockwave_lab/workload/gpu_types.py`): a job's exclusive time (rho, "
    "dynamic FTF, LB) is on its fastest type, and its dynamic FTF's cluster counts each type's GPUs at the job's "
    "speed there (`docs/fairness.md`); LB counts every GPU at each job's fastest type, so it is looser than on one "
    "type.  Every policy places gangs on one type it can run on; only Gavel-het "
    "(`max_min_fairness_het`) and Pollux choose types by what they gain there, the others take the fastest type with "
    "room in their own order.  The Shockwave policies run as the controller on Slurm does: a running job stays on "
    "the type it runs on (since 2026-12-07, `docs/results_notes.md`: the simulator moved it each round before, a "
    "restart each time) and moves to a faster one only when that pays for two restarts, within the restart bound "
    "(`solver/type_moves.py`; on Slurm with the site's `gpu_type_speeds`); the baselines, as published, may move a "
    "job every round.  Target: the default beats Gavel-het on makespan and worst dynamic FTF on every trace.")
USERS_TEXT = (
    "Study traces with users (`shockwave trace generate --users N --splitter K`, `lab/shockwave_lab/workload/users.py`): "
    "jobs go to the users in turn, and the user `splitter` submits each of its jobs as K jobs of 1/K the steps (the "
    "same work).  Cells: *share* (*fair share*) / worst dynamic FTF: the user's share of the GPU-seconds held while "
    "every user had an active job, its max-min fair share of them by the GPUs its jobs demanded, and its jobs' worst "
    "dynamic FTF (`docs/fairness.md`); *min share / fair*: the smallest share over fair share (1.000: every user got "
    "its fair share).  A policy fair between jobs gives the splitter more than its fair share.")


def _label(policy: str) -> str:
    try:
        return policy_class(policy).label
    except ValueError:
        return policy


def _mark(ok) -> str:
    return "n/a" if ok is None else ("yes" if ok else "**no**")


def typed_targets(rows: list[tuple]) -> tuple[list[str], dict]:
    """The default against Gavel-het per typed trace: (table lines, {target: [met, judged]})."""
    name = default_policy().name
    lines = ["| trace | GPUs | LB s | default makespan s (/LB) | Gavel-het makespan s (/LB) | default worst dyn. FTF | "
             "Gavel-het worst dyn. FTF | default p95 dyn. FTF | Gavel-het p95 dyn. FTF | "
             + " | ".join(TYPED_TARGETS) + " |", "|---" * (9 + len(TYPED_TARGETS)) + "|"]
    met = {t: [0, 0] for t in TYPED_TARGETS}
    for spec, runs in rows:
        sw, gh = runs.get(name), runs.get(GAVEL_HET)
        gpus = ", ".join(f"{t} {n}" for t, n in spec.types)
        if not sw or not gh:
            lines.append(f"| {spec.name} | {gpus} | *not run* |" + " |" * (7 + len(TYPED_TARGETS)))
            continue
        ok = [sw["makespan"] < gh["makespan"], sw["ftf_dynamic_worst"] < gh["ftf_dynamic_worst"]]
        for t, o in zip(TYPED_TARGETS, ok):
            met[t][0] += o
            met[t][1] += 1
        lines.append(f"| {spec.name} | {gpus} | {sw['lower_bound']:,.0f} | {sw['makespan']:,.0f} "
                     f"({sw['makespan_over_lb']:.3f}) | {gh['makespan']:,.0f} ({gh['makespan_over_lb']:.3f}) | "
                     f"{sw['ftf_dynamic_worst']:.3f} | {gh['ftf_dynamic_worst']:.3f} | {sw['ftf_dynamic_p95']:.3f} | "
                     f"{gh['ftf_dynamic_p95']:.3f} | " + " | ".join(_mark(o) for o in ok) + " |")
    return lines, met


def users_tables(rows: list[tuple]) -> list[str]:
    """Per trace with more than one user: each policy's per-user share and worst dynamic FTF."""
    lines = []
    for spec, runs in rows:
        users = sorted({u for r in runs.values() if r for u in r.get("user_gpu_share") or {}})
        if len(users) < 2:
            continue
        lines += [f"### {spec.name}: {spec.describe()}, {spec.gpus} GPUs", "",
                  "| policy | " + " | ".join(users) + " | min share / fair |", "|---" * (len(users) + 2) + "|"]
        for p, r in runs.items():
            if not r:
                lines.append(f"| {_label(p)} | *not run* |" + " |" * len(users))
                continue
            share, worst = r.get("user_gpu_share") or {}, r.get("user_ftf_dynamic_worst") or {}
            fair = r.get("user_fair_share") or {}
            cells = " | ".join(f"{100 * share[u]:.1f}% ({100 * fair.get(u, 0):.1f}%) / {worst.get(u, 0):.2f}"
                               if u in share else "-" for u in users)
            lines.append(f"| {_label(p)} | {cells} | {r.get('user_share_min', 0):.3f} |")
        lines.append("")
    return lines
