"""Real Slurm with several GPU types against the simulator: the default moves running jobs to faster types.

    nice -n 10 .venv/bin/python bench/replay_typed.py --gpu-types v100,v100,k80,k80 --jobs 16 --seed 5 --gpus 16 \
        --time-scale 15 --hours 0.5,2

A generated trace (`bench/replay.py`'s `elastic_trace`: ResNet-18, ResNet-50 and Transformer jobs of 1-4 GPUs, rigid
here) replayed on a local cluster of one GPU type per node (`--gpu-types`, in node order), each emulated job
sleeping its epochs at its own throughput on its node's type (the TACC file's column, as the simulator's job runs:
replay/emujob.py); the controller is given one speed per type (`gpu_type_speeds`: each type's median speed over the
jobs relative to the fastest, `replay/api.py` `site_speeds`, what a site would measure), so it places and moves jobs
on those speeds while the simulator knows each job's own.  Writes the result under bench/results/replay/ and
docs/replay-typed.md (real against simulated makespan, average JCT, restarts, wasted preemptions; the dynamic FTF rows
count the real cluster's GPUs untyped, the simulator's at each job's speed, so they are not compared), and the
simulated spread, as the other replays have it (`bench/replay.py`): 16 simulations with each arrival moved by up to
1 wall s, whose makespans and JCTs this small trace spreads over several percent; one real run is read against their
mean and range too.  `--from-json R.json --notes N.md` rewrites the doc from a kept result with its reading (and
adds the spread to a result kept without one).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from shockwave_lab.bench import ROOT
from shockwave_lab.bench.replay import RESULTS, add_spread, elastic_trace, mean_of, spread_line
from shockwave_lab.data_files import DEFAULT_EXPERIMENT, experiment_paths
from shockwave_lab.replay.api import replay
from shockwave_lab.replay.compare import deviation, render_markdown
from slurm_shockwave.strict_json import dumps

DOC = ROOT / "docs" / "replay-typed.md"
TITLE = ("# Real Slurm with several GPU types: replay vs simulator\n\nWritten by `bench/replay_typed.py` (its "
         "docstring says what runs); the setting and the measures are docs/replay.md's.\n\n")


def spread_lines(res: dict) -> str:
    """Real against the mean of the simulated spread, and whether it lies inside the spread's range."""
    spread, real = res.get("simulated_spread"), res["real"]
    if not spread:
        return ""
    d = deviation(real, mean_of(spread))
    out = []
    for k, label in (("makespan_s", "makespan"), ("avg_jct_s", "average JCT")):
        inside = "inside" if spread[k]["min"] <= real[k] <= spread[k]["max"] else "outside"
        out.append(f"- {label} against the mean of the simulated spread: {'yes' if abs(d[k]) <= 0.05 else '**no**'} "
                   f"(real / mean {1 + d[k]:.3f}; {inside} its range)\n")
    return "".join(out)


def section(res: dict, notes: str = "") -> str:
    real, sim, dev = res["real"], res["simulated"], res["deviation"]
    load = " / ".join(f"{x:.1f}" for x in res["load_before"]) + " before, " + \
        " / ".join(f"{x:.1f}" for x in res["load_after"]) + " after"
    ok = {k: "yes" if abs(dev[k]) <= 0.05 else "**no**" for k in ("makespan_s", "avg_jct_s")}
    who = "every job at these speeds, `--uniform`" if res.get("uniform_speeds") else "each job at its own speeds"
    return (f"    {res.get('command')}\n\n"
            f"{res['date']}; Slurm {res['slurm_version']}; {res['jobs']} jobs on {res['gpus']} GPUs, {res['nodes']} "
            f"nodes of types {', '.join(res['gpu_types'])} (in node order); the controller's `gpu_type_speeds` "
            f"{res['gpu_type_speeds']} ({who}); {res['users']} users; policy {res['policy']}; rounds "
            f"{res['round_seconds']:g} s; "
            f"wall {res['wall_s']:.0f} s; load average (1/5/15 min) {load} on {res['cpus']} cores; restart cost "
            f"measured {res['restart_cost_s'] or 0:.0f} trace s.\n\n" + render_markdown(res) + "\n\n" + spread_line(res)
            + f"- makespan within 5% of the simulator: {ok['makespan_s']} (real / simulated "
            f"{real['makespan_s'] / sim['makespan_s']:.3f})\n"
            f"- average JCT within 5%: {ok['avg_jct_s']} (real / simulated {real['avg_jct_s'] / sim['avg_jct_s']:.3f})\n"
            + spread_lines(res)
            + (f"\n{notes.strip()}\n" if notes.strip() else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu-types", default="v100,v100,k80,k80", help="one GPU type per node, in node order")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--gpus", type=int, default=16)
    ap.add_argument("--time-scale", type=float, default=15.0)
    ap.add_argument("--hours", default="0.5,2", help="MIN,MAX hours of the generated jobs")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's folder (logs, journal)")
    ap.add_argument("--uniform", action="store_true", help="every job at the site's speed of each type (the "
                    "controller's speeds true for every job: real against simulated measures the enactment alone)")
    ap.add_argument("--from-json", default=None, help="rewrite the doc from this kept result")
    ap.add_argument("--notes", default=None, help="a file whose text is appended to the doc (the reading)")
    args = ap.parse_args(argv)
    notes = Path(args.notes).read_text() if args.notes else ""
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
        if not res.get("simulated_spread"):
            add_spread(res)
            Path(args.from_json).write_text(dumps(res, indent=1))
        DOC.write_text(TITLE + section(res, notes))
        return 0
    from shockwave_lab.workload.throughputs import ThroughputTable
    from slurm_shockwave.policy_settings import default_name
    types = [t.strip() for t in args.gpu_types.split(",") if t.strip()]
    thr = experiment_paths(DEFAULT_EXPERIMENT)["throughputs"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    hours = tuple(float(h) for h in args.hours.split(","))
    trace = elastic_trace(RESULTS / f"typed-{args.jobs}jobs-seed{args.seed}-{args.hours.replace(',', '-')}h.trace",
                          args.jobs, args.seed, ThroughputTable.load(thr), hours)
    res = replay(str(trace), str(thr), gpus=args.gpus, nodes=len(types), time_scale=args.time_scale,
                 policy=default_name(), users=4, out=lambda m: print(m, flush=True), keep=args.keep, gpu_types=types,
                 uniform=args.uniform)
    res["command"] = (f"nice -n 10 .venv/bin/python bench/replay_typed.py --gpu-types {','.join(types)} --jobs "
                      f"{args.jobs} --seed {args.seed} --gpus {args.gpus} --time-scale {args.time_scale:g} "
                      f"--hours {args.hours}{' --uniform' if args.uniform else ''}")
    add_spread(res)
    kind = "-uniform" if args.uniform else ""
    path = RESULTS / f"typed-{'-'.join(types)}{kind}-s{args.time_scale:g}-{time.strftime('%Y%m%d-%H%M')}.json"
    path.write_text(dumps(res, indent=1))
    DOC.write_text(TITLE + section(res, notes))
    print(f"typed: wall {res['wall_s']:.0f} s; deviation {res['deviation']}; kept {path}; wrote {DOC}", flush=True)
    return 0
