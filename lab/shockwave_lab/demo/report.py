"""The demo's tables: plain Slurm vs Shockwave, real and simulated, side by side (terminal and Markdown)."""
from __future__ import annotations

import time

COLUMNS = (("slurm", "real", "plain Slurm"), ("shockwave", "real", "Shockwave"),
           ("slurm", "simulated", "plain Slurm, simulated (FIFO+backfill)"), ("shockwave", "simulated", "Shockwave, simulated"))


def _f(x, nd=0, pct=False):
    if x is None:
        return "-"
    return f"{100 * x:.0f}%" if pct else f"{x:,.{nd}f}"


def summary_rows(res: dict) -> tuple[list[str], list[list[str]]]:
    runs = res.get("runs") or {"shockwave": {"real": res.get("real", {}), "simulated": res.get("simulated", {})}}
    cols = [(k, kind, title) for k, kind, title in COLUMNS if k in runs and runs[k].get(kind)]
    get = lambda k, kind: runs[k].get(kind) or {}  # noqa: E731
    users = sorted({u for k, kind, _ in cols for u in ((get(k, kind).get("user_share") or {}).get("share") or
                                                       get(k, kind).get("user_jct") or {})})
    rows = [["makespan s"] + [_f(get(k, kind).get("makespan_s")) for k, kind, _ in cols],
            ["average JCT s"] + [_f(get(k, kind).get("avg_jct_s")) for k, kind, _ in cols],
            ["worst rho"] + [_f(get(k, kind).get("worst_rho"), 2) for k, kind, _ in cols],
            ["unfair (rho > 1.05)"] + [(_f(get(k, kind).get("unfair_fraction"), 0) + "%")
                                       if get(k, kind).get("unfair_fraction") is not None else "-"
                                       for k, kind, _ in cols],
            ["restarts (preemptions)"] + [_f(get(k, kind).get("restarts")) for k, kind, _ in cols],
            # the preemption gate: kept running (preempting would not pay) / wasted (target 0), and the cost
            # a preemption was charged (measured in the real run, the same in its simulation)
            ["preemptions kept / wasted"] + [
                f"{_f(get(k, kind).get('preemptions_kept'))} / {_f(get(k, kind).get('preemptions_wasted'))}"
                if get(k, kind).get("preemptions_wasted") is not None else "-" for k, kind, _ in cols],
            ["preemption cost s"] + [_f(get(k, kind).get("preempt_cost_s"), 1) for k, kind, _ in cols]]
    for u in users:
        rows.append([f"{u}: mean JCT s"] + [
            _f(((get(k, kind).get("user_share") or {}).get("user_jct") or get(k, kind).get("user_jct") or {}).get(u))
            for k, kind, _ in cols])
    for u in users:
        rows.append([f"{u}: GPU share while all wait"] + [
            _f(((get(k, kind).get("user_share") or {}).get("share") or {}).get(u), pct=True) for k, kind, _ in cols])
    return ["", *[t for _k, _kind, t in cols]], rows


def job_rows(res: dict) -> tuple[list[str], list[list[str]]]:
    runs = res.get("runs") or {}
    by = {k: {r["name"]: r for r in (runs.get(k) or {}).get("jobs") or []} for k in ("slurm", "shockwave")}
    sim = {k: ((runs.get(k) or {}).get("simulated") or {}).get("per_job", {}) for k in ("slurm", "shockwave")}
    names = [r["name"] for r in (runs.get("shockwave") or {}).get("jobs") or res.get("jobs") or []]
    head = ["job", "user", "mode", "GPUs", "epochs", "batch sizes", "JCT s Slurm", "JCT s Shockwave",
            "sim JCT s FIFO+bf", "sim JCT s Shockwave", "rho Slurm", "rho Shockwave", "restarts"]
    rows = []
    for n in names:
        a, b = by["slurm"].get(n, {}), by["shockwave"].get(n, {})
        rows.append([n, b.get("user", ""), b.get("mode", ""), str(b.get("gpus", "")), b.get("epochs", ""),
                     ",".join(map(str, b.get("batch_sizes") or [])), _f(a.get("jct_s")), _f(b.get("jct_s")),
                     _f(sim["slurm"].get(n)), _f(sim["shockwave"].get(n)), _f(a.get("rho"), 2), _f(b.get("rho"), 2),
                     str(b.get("restarts", "-"))])
    return head, rows


def _table(title: str, head, rows):
    from rich.table import Table

    from slurm_shockwave.cli.common import esc
    t = Table(title=title)
    for h in head:
        t.add_column(esc(h))
    for r in rows:
        t.add_row(*(esc(x) for x in r))             # job and user names are text, never markup
    return t


def render_tables(res: dict, c) -> None:
    head, rows = job_rows(res)
    if rows:
        c.print(_table("Jobs: the same workload on the same local Slurm cluster", head, rows))
    c.print(_table("Plain Slurm vs Shockwave (real runs and their simulations)", *summary_rows(res)))
    if res.get("where") == "slurm":
        done = {k: f"{(v.get('real') or {}).get('completed', 0)}/{(v.get('real') or {}).get('jobs', 0)}"
                for k, v in (res.get("runs") or {}).items()}
        c.print("all daemons stopped; jobs completed: " + ", ".join(f"{k} {v}" for k, v in done.items()) +
                (f"; whole demo {res['wall_s']:.0f} s" if res.get("wall_s") else ""))


def _md(head, rows) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def reading(res: dict) -> str:
    """Plain words for the comparison, computed from this run's numbers."""
    runs = res.get("runs") or {}
    a, b = (runs.get("slurm") or {}).get("real") or {}, (runs.get("shockwave") or {}).get("real") or {}
    if not a.get("makespan_s") or not b.get("makespan_s"):
        return ""
    parts = []
    if a.get("worst_rho") and b.get("worst_rho"):
        parts.append(f"the worst finish-time fairness ratio went from {a['worst_rho']:.2f} (plain Slurm) to "
                     f"{b['worst_rho']:.2f} (Shockwave)")
    parts.append(f"the average JCT from {a['avg_jct_s']:.0f} s to {b['avg_jct_s']:.0f} s "
                 f"({b['avg_jct_s'] / a['avg_jct_s'] - 1:+.0%})")
    parts.append(f"the makespan from {a['makespan_s']:.0f} s to {b['makespan_s']:.0f} s "
                 f"({b['makespan_s'] / a['makespan_s'] - 1:+.0%})")
    ua = (a.get("user_share") or {}).get("user_jct") or {}
    ub = (b.get("user_share") or {}).get("user_jct") or {}
    per_user = [f"{u} {ua[u]:.0f} s -> {ub[u]:.0f} s" for u in sorted(ua) if ua.get(u) and ub.get(u)]
    text = "In this run " + ", ".join(parts) + "."
    if per_user:
        text += " Mean JCT per user: " + "; ".join(per_user) + "."
    text += (f" Shockwave preempted {b.get('restarts', 0)} time(s) to get there: the users who arrived "
             "later gain, the user who filled the cluster first pays.")
    return text


def render_markdown(res: dict, short: bool = False) -> str:
    """docs/demo.md, written by `shockwave demo --write-doc docs/demo.md` (the numbers are this run's)."""
    wl = res.get("workload") or []
    jobs_text = "\n".join(f"- `{w['name']}` ({w['user']}, {w['mode']}, {w['gpus']} GPU(s), {w['epochs']} epochs, "
                          f"submitted at +{w['delay_s']:g} s)" for w in wl)
    cmd = "shockwave demo" + (" --short" if short else "") + " --write-doc docs/demo.md"
    head, rows = summary_rows(res)
    jhead, jrows = job_rows(res)
    where = ("a local Slurm cluster" if res.get("where") == "slurm" else
             "the simulated cluster only (Slurm could not be started)")
    return f"""# The demo: plain Slurm vs Shockwave, same jobs, same cluster

Written by the demo itself on {time.strftime('%Y-%m-%d %H:%M %Z')}:

    {cmd}

It ran on {where} ({res.get('nodes', '?')} nodes x {res.get('gpus_per_node', '?')} fake GPUs), as root on a
{res.get('cpus', '?')}-core machine (load average {res.get('load', '?')} at the end: other work shared it){f", in {res['wall_s']:.0f} s from start to end" if res.get('wall_s') else ''}. The same jobs were
submitted twice, with the same arrival offsets, from three local users, using `job_templates/`:

{jobs_text}

1. **plain Slurm**: no controller; Slurm's own `priority/multifactor` + `sched/backfill` as the local
   cluster configures them (every job has the same priority factors, so first come, first served with backfill);
2. **Shockwave**: the controller ({res.get('mode', 'authoritative')}, {res.get('round_seconds', 20):g} s rounds)
   holds deferred jobs, releases planned ones and checkpoints + requeues jobs that lose their round
   (`grace_seconds = 10`; `min_run_seconds` = 2 rounds: a job that (re)started runs at least that long).

The workload is chosen so that adaptation and fairness matter: user ana fills all 8 GPUs first with two long
4-GPU jobs; ben's two 2-GPU jobs grow their batch size as they train (GNS, Accordion: later epochs are
shorter) and chi's three small jobs arrive 5-15 s later. Under first come, first served they wait for all of
ana's work; Shockwave shares the GPUs by finish-time fairness at once, at the cost of checkpoint/restart
overhead for ana's preempted jobs and of starting jobs at round boundaries.

The simulated columns run the same jobs (arrivals, GPUs, the epoch durations and batch sizes measured in the
plain-Slurm run) through two models: first come, first served with backfill in continuous time (a model of
plain Slurm: a job starts as soon as its GPUs are free, nobody is preempted) and the round-based simulator
with the Shockwave policy and the same round length. rho is the paper's finish-time fairness: JCT / (exclusive run time x max(1, jobs / GPUs)), with one
exclusive run time per job for both runs (the sum of its epoch times measured in the plain-Slurm run, where
nobody is preempted); a job is "unfair" when rho > 1.05. "GPU share while all wait" is each user's share of the GPU-seconds used while every
user had work in the system (from the epoch events). All JCTs use the time the demo submitted each job.

## Summary

{_md(head, rows)}

{reading(res)}

## Per job

{_md(jhead, jrows)}

Honest notes: the real runs share a 2-core machine (and, here, other work), so epoch times vary between the
two runs; Shockwave's preemptions cost a checkpoint, a requeue and a process start each (counted in its JCTs).
The simulator starts jobs only at round boundaries, Slurm as soon as GPUs are free.
"""
