"""The demo as a short replay: a small contended trace (more jobs than GPUs), emulated jobs, several users, run
twice on the same kind of local Slurm cluster, plain Slurm first, then the Shockwave controller, with the
simulated figures of each beside the real ones (shockwave_lab/replay/).

Emulated jobs sleep their profiled epochs (replay/emujob.py): no job competes for the CPU, so the comparison
is the schedulers' alone, not the 2 cores'.  The real CPU-training job templates (job_templates/, train_cnn.py)
still work and are tested on their own (tests/test_templates_slurm.py).
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from shockwave_lab.data_files import experiment_paths
from shockwave_lab.replay.site import controller_timing
from shockwave_lab.workload.generate import GeneratorOptions, generate, trace_text
from shockwave_lab.workload.throughputs import ThroughputTable

#: the demo's workload: 24 jobs of 1-4 GPUs (0.1-0.6 h each at full speed, GNS / Accordion / static), a job a
#: minute of trace time, on 8 GPUs: three times more jobs than GPUs, so the paper's rho has a contention factor
DEMO_TRACE = GeneratorOptions(jobs=24, seed=15, interarrival=60, min_hours=0.1, max_hours=0.6,
                              gpu_mix=(0.5, 0.35, 0.15, 0.0), max_gpus=4)
#: what CI runs (`--short`): the first 5 jobs of it
SHORT_JOBS = 5
USERS = 3
COLUMNS = (("slurm", "real", "plain Slurm"), ("shockwave", "real", "Shockwave"),
           ("slurm", "simulated", "plain Slurm, simulated"), ("shockwave", "simulated", "Shockwave, simulated"))


def demo_trace(directory: Path) -> tuple[Path, Path]:
    """(trace, throughputs) of the demo workload, written into `directory`."""
    thr = experiment_paths("tacc_32gpus")["throughputs"]
    path = Path(directory) / "demo.trace"
    path.write_text(trace_text(generate(DEMO_TRACE, ThroughputTable.load(thr))))
    return path, thr


def run_demo(nodes: int = 2, gpus_per_node: int = 4, time_scale: float = 40.0, short: bool = False,
             compare: bool = True, slurm: str | None = None, out=print, keep: bool = False,
             timeout_s: float | None = None, policy: str | None = None) -> dict:
    """Both runs (or the Shockwave one only): "where" ("slurm", or "simulated" where Slurm cannot start), "runs" ->
    label -> "real" / "simulated" / "jobs", "root", the workload."""
    from shockwave_lab.localcluster import SlurmUnavailable
    from slurm_shockwave.policy_settings import default_name
    from shockwave_lab.replay.api import load, replay
    from shockwave_lab.replay.compare import simulate
    policy = policy or default_name()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="shockwave-demo-trace-"))
    trace, thr = demo_trace(work)
    first = SHORT_JOBS if short else None
    gpus = nodes * gpus_per_node
    labels = ("slurm", "shockwave") if compare else ("shockwave",)
    runs, where = {}, "slurm"
    for label in labels:
        out(f"=== {'run 1: plain Slurm (no controller: multifactor priority + backfill)' if label == 'slurm' else 'run 2: the same jobs under the Shockwave controller (' + policy + ')'} ===")
        try:
            res = replay(trace, thr, gpus=gpus, nodes=nodes, time_scale=time_scale,
                         policy="slurm" if label == "slurm" else policy, users=USERS, first=first, out=out,
                         keep=keep, slurm=slurm, timeout_s=timeout_s)
        except SlurmUnavailable as e:
            out(f"Slurm cannot be started here ({e}); the same workload on the simulated cluster only.")
            where = "simulated"
            break
        real = dict(res["real"])
        runs[label] = {"real": real, "simulated": res["simulated"], "jobs": real.pop("jobs_detail"),
                       "deviation": res["deviation"], "root": res["root"], "wall_s": res["wall_s"],
                       "restart_cost_s": res["restart_cost_s"], "slurm_version": res["slurm_version"]}
    if where == "simulated":
        _jobs, specs, table = load(trace, thr, gpus, USERS, first)
        runs = {label: {"real": {}, "jobs": [], "simulated": simulate(specs, table, gpus, nodes,
                                                                       "slurm" if label == "slurm" else policy, 60.0,
                                                                       time_scale)}
                for label in labels}
    jobs, _specs, _table = load(trace, thr, gpus, USERS, first)
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    last = runs.get("shockwave") or {}
    return {"where": where, "policy": policy, "time_scale": time_scale, "round_seconds": 120 / time_scale,
            "nodes": nodes, "gpus_per_node": gpus_per_node, "runs": runs, "root": last.get("root"),
            "jobs": last.get("jobs", []), "deviation": last.get("deviation", {}),
            "workload": [{"name": j.name, "user": j.user, "mode": j.mode, "model": j.model, "gpus": j.gpus,
                          "epochs": j.epochs, "arrival_s": round(j.arrival_s), "work_s": round(j.work_s)}
                         for j in jobs],
            "wall_s": round(time.monotonic() - started, 1), "short": short}


def _v(runs, label, kind, key):
    return ((runs.get(label) or {}).get(kind) or {}).get(key)


def summary_rows(res: dict) -> tuple[list[str], list[list[str]]]:
    from shockwave_lab.replay.compare import KEYS, fmt_figure
    runs = res.get("runs") or {}
    cols = [(label, kind, title) for label, kind, title in COLUMNS if (runs.get(label) or {}).get(kind)]
    rows = [[title] + [fmt_figure(_v(runs, label, kind, key), nd) for label, kind, _ in cols]
            for key, title, nd in KEYS]
    users = sorted({u for label, kind, _ in cols for u in (_v(runs, label, kind, "user_share") or {})})
    for u in users:
        rows.append([f"GPU share {u} while all wait"] + [
            "-" if (_v(runs, label, kind, "user_share") or {}).get(u) is None
            else f"{100 * _v(runs, label, kind, 'user_share')[u]:.0f}%" for label, kind, _ in cols])
    return ["(trace seconds)", *[t for _l, _k, t in cols]], rows


def reading(res: dict) -> str:
    runs = res.get("runs") or {}
    a, b = (runs.get("slurm") or {}).get("real") or {}, (runs.get("shockwave") or {}).get("real") or {}
    if not a.get("makespan_s") or not b.get("makespan_s"):
        return ""
    return (f"Real runs, plain Slurm -> Shockwave: makespan {a['makespan_s']:,.0f} -> {b['makespan_s']:,.0f} s "
            f"({b['makespan_s'] / a['makespan_s'] - 1:+.0%}), average JCT {a['avg_jct_s']:,.0f} -> "
            f"{b['avg_jct_s']:,.0f} s ({b['avg_jct_s'] / a['avg_jct_s'] - 1:+.0%}), worst rho {a['worst_rho']:.2f} -> "
            f"{b['worst_rho']:.2f}, unfair jobs {a['unfair_fraction']:.0f}% -> {b['unfair_fraction']:.0f}%, at the cost "
            f"of {b.get('restarts', 0)} checkpoint/requeue restarts.")


def distance(res: dict) -> str:
    """How far each real run is from its simulation (makespan, average JCT), and why, in one paragraph."""
    runs = res.get("runs") or {}
    parts = [f"{'plain Slurm' if k == 'slurm' else 'Shockwave'} makespan {100 * d['makespan_s']:+.0f}%, average JCT "
             f"{100 * d['avg_jct_s']:+.0f}%" for k, v in runs.items() for d in [v.get("deviation") or {}]
             if "makespan_s" in d and "avg_jct_s" in d]
    if not parts:
        return ""
    return ("Real vs simulated: " + "; ".join(parts) + f". At time scale {res['time_scale']:g} every job start costs "
            f"1-2 wall seconds (Slurm's scheduling pass, the wrapper and the program starting) = "
            f"{res['time_scale']:g}-{2 * res['time_scale']:g} trace seconds on jobs of a few hundred to two thousand "
            "(the simulator charges Shockwave's restarts the measured cost, plain Slurm's starts the programs' "
            "start-up alone); `docs/replay.md` measures both on the 120-job trace at a lower time scale.")


def render_text(res: dict) -> str:
    head, rows = summary_rows(res)
    table = [head, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in table]
    return "\n".join(lines + ["", reading(res)])


#: what the plain-Slurm simulated column models
MODEL_WORDS = ("the simulator's model of a Slurm site: multifactor priority, conservative backfill with the same time "
               "limits, decided at each of the cluster's scheduler passes, 1 s of wall time")


def load_result(path: Path) -> dict:
    """A demo's stored result (the JSON `--write-doc` writes beside the page); one-line ValueError if it is not one."""
    import json
    try:
        res = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable demo result ({e})") from None
    if not isinstance(res, dict) or not isinstance(res.get("runs"), dict) or "time_scale" not in res:
        raise ValueError(f"{path}: not a demo result (no runs or time_scale)")
    return res


def render_markdown(res: dict) -> str:
    """docs/demo.md from a demo's result alone (what `--write-doc` stores beside it as JSON), so the page regenerates
    identically from the stored result (`shockwave demo --from-json docs/demo.json --write-doc docs/demo.md`)."""
    head, rows = summary_rows(res)
    load, cpus = res.get("load", "?"), res.get("cpus")
    table = "\n".join(["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
                      + ["| " + " | ".join(r) + " |" for r in rows])
    jobs = "\n".join(f"| {w['name']} | {w['user']} | {w['model']} | {w['mode']} | {w['gpus']} | {w['epochs']} | "
                     f"{w['arrival_s']:,} | {w['work_s']:,} |" for w in res.get("workload", []))
    runs = res.get("runs") or {}
    walls = ", ".join(f"{k} {v.get('wall_s', 0):.0f} s" for k, v in runs.items() if v.get("wall_s"))
    cmd = "shockwave demo" + (" --short" if res.get("short") else "") + " --write-doc docs/demo.md"
    return f"""# The demo: plain Slurm vs Shockwave, same jobs, real Slurm, simulated beside

Written by the demo itself on {res.get('written_at', '?')}:

    {cmd}

It ran on a local Slurm {(runs.get('shockwave') or {}).get('slurm_version', '?')} cluster ({res['nodes']} nodes x
{res['gpus_per_node']} fake GPUs) on a {cpus or '?'}-core machine (load average {load} at the end), in
{res['wall_s']:.0f} s from start to end ({walls}). The same {len(res.get('workload', []))} jobs were submitted twice,
each at its arrival time / {res['time_scale']:g}, round robin as {USERS} users:

1. **plain Slurm**: no controller; Slurm as a site configures it: multifactor priority (age, job size and
   fair-share between the users, each with an account in a real slurmdbd), backfill, and time limits of 1.5 x each
   job's run time alone;
2. **Shockwave**: the controller (policy `{res['policy']}`, authoritative, rounds of 120 s / {res['time_scale']:g} =
   {res['round_seconds']:g} s) holds deferred jobs, releases planned ones and checkpoints + requeues jobs that lose
   their round.

Each job is an emulated training program (`lab/shockwave_lab/replay/emujob.py`) under the real wrapper
(`shockwave-run`): it follows its trace job's batch-size schedule (GNS doubling, Accordion), sleeps each epoch's
profiled duration / {res['time_scale']:g}, reports every epoch through the Training API to the event store,
checkpoints after each epoch and on Slurm's signal, and resumes after a requeue. No job uses the CPU, so the
jobs do not slow each other: what differs between the runs is the scheduling. All figures are in trace seconds
(wall seconds x {res['time_scale']:g}). 24 jobs on 8 GPUs: the paper's rho has a contention factor of 3.

The simulated columns run the same jobs through the simulator, on the same nodes (each gang on one node): Shockwave
with the restart cost measured in its real run and the controller's early rounds (a job's end starts the next round
when another waits, polled every {controller_timing(res['time_scale'])[0]:g} wall s), plain Slurm through `{_v(runs, 'slurm', 'simulated', 'policy')}` ({MODEL_WORDS}).
`shockwave replay` does the same for any trace (`docs/replay.md`: the 120-job trace on 32 GPUs).

## Summary

{table}

{reading(res)}

{distance(res)}

## The jobs

| job | user | model | mode | GPUs | epochs | arrival s | work s (alone) |
|---|---|---|---|---:|---:|---:|---:|
{jobs}
"""
