"""Short jobs and the 120 s round: the demo's shape of workload on traces it was not chosen on.

    nice -n 10 .venv/bin/python bench/round_length.py [--seeds 101-112] [--rounds 120,60] [--costs 30,60]

Each seed is a new trace of the demo's shape (`shockwave_lab/demo/emulated.py` DEMO_TRACE with only the seed
changed: 24 jobs of 0.1-0.6 h on 8 GPUs, 2 nodes, 3 users).  On each: the checked plain-Slurm model (scheduler
passes, minute limits: replay/site.py, at the demo's time scale 40) once, and the default policy under the round
loop at each round length and restart cost, with the reference's rounds and with the controller's early rounds
(a round starts early when a job ends while another waits: production's poll and min gap, 5 s each at 120 s
rounds; sim/cluster.py).  Printed and written to docs/round-length.md: the mean over the seeds of Shockwave's
figure over plain Slurm's (makespan, average JCT, worst rho), the unfair fraction's difference in points,
restarts, and on how many seeds Shockwave is ahead on all four.

Then (`--study`, on by default) the hour-long jobs: `shockwave-edf` on the study's traces and its held-out ones
(bench/study_traces.py ALL + HELDOUT, the study's settings: 120 s rounds, 20 s restart penalty, no nodes) with
the reference's rounds and with the controller's early rounds; per trace early over reference for makespan/LB,
average JCT, worst dynamic FTF and rounds, the unfair fraction (dynamic FTF) in points.

With the reference's rounds a restart is charged only in a round longer than max(round - 5 s, cost) (its rule),
so a cost is only reported there at round lengths where it is charged; early rounds charge every restart.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path

from shockwave_lab.bench import ROOT

from shockwave_lab.data_files import experiment_paths
from shockwave_lab.demo.emulated import DEMO_TRACE, USERS
from shockwave_lab.replay import compare
from shockwave_lab.replay.api import load
from shockwave_lab.replay.site import model_early_rounds
from shockwave_lab.simulate import run_simulation
from shockwave_lab.workload.generate import generate, trace_text
from shockwave_lab.workload.throughputs import ThroughputTable

GPUS, NODES, SCALE = 8, 2, 40.0
KEYS = compare.SPREAD_KEYS                            # the headline figures


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def measure(seeds: list[int], rounds: list[float], costs: list[float]) -> dict:
    thr = experiment_paths("tacc_32gpus")["throughputs"]
    table = ThroughputTable.load(thr)
    rows: dict = {}
    for seed in seeds:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "t.trace"
            path.write_text(trace_text(generate(dataclasses.replace(DEMO_TRACE, seed=seed), table)))
            _jobs, specs, tab = load(path, thr, GPUS, USERS)
        plain = compare.simulate(specs, tab, GPUS, NODES, "slurm", 4.0, SCALE)
        for r in rounds:
            for cost in costs:
                for early in (False, True):
                    if not early and cost >= r - 5 and cost > 0:
                        continue                               # never charged at this round length
                    sw = compare.simulate(specs, tab, GPUS, NODES, "shockwave-edf", cost, None, round_s=r,
                                          early=early)
                    rows.setdefault((r, early, cost), []).append((plain, sw))
        print(f"seed {seed} done", flush=True)
    return rows


def study(tmpdir: Path) -> list[tuple]:
    """(trace, reference's summary, early rounds' summary) of `shockwave-edf` on every study and held-out trace."""
    from study_traces import ALL, HELDOUT, trace_file          # bench/ (the script's directory)
    early = model_early_rounds(None)                         # production's, as `measure` simulates it
    out = []
    for spec in ALL + HELDOUT:
        trace, thr = trace_file(spec, tmpdir)
        pair = [run_simulation(trace, thr, spec.cluster, "shockwave-edf", early_rounds=e) for e in (None, early)]
        out.append((spec.name, *({**r.metrics.summary(), "rounds": r.rounds} for r in pair)))
        print(f"{spec.name} done", flush=True)
    return out


STUDY_KEYS = (("makespan_over_lb", "makespan/LB"), ("avg_jct", "avg JCT"), ("ftf_dynamic_worst", "worst dyn FTF"),
              ("rounds", "rounds"))


def study_text(rows: list[tuple]) -> str:
    head = " | ".join(label for _k, label in STUDY_KEYS)
    out = [f"| trace | {head} (early / reference) | dyn unfair, points |", "|---|" + "---:|" * (len(STUDY_KEYS) + 1)]
    for name, ref, early in rows:
        cells = " | ".join(f"{early[k] / ref[k]:.3f}" for k, _l in STUDY_KEYS)
        out.append(f"| {name} | {cells} | {early['ftf_dynamic_unfair'] - ref['ftf_dynamic_unfair']:+.1f} |")
    means = " | ".join(f"{statistics.mean(e[k] / r[k] for _n, r, e in rows):.3f}" for k, _l in STUDY_KEYS)
    unfair = statistics.mean(e["ftf_dynamic_unfair"] - r["ftf_dynamic_unfair"] for _n, r, e in rows)
    out.append(f"| **mean of {len(rows)}** | {means} | {unfair:+.1f} |")
    return "\n".join(out)


def table_text(rows: dict) -> str:
    out = ["| round s | early rounds | restart cost s | makespan / plain | avg JCT / plain | worst rho / plain | "
           "unfair, points | restarts | ahead on all four |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (r, early, cost), pairs in sorted(rows.items(), key=lambda kv: (-kv[0][0], kv[0][1], kv[0][2])):
        ratio = {k: statistics.mean(sw[k] / p[k] for p, sw in pairs) for k in KEYS[:3]}
        unfair = statistics.mean(sw["unfair_fraction"] - p["unfair_fraction"] for p, sw in pairs)
        restarts = statistics.mean(sw["restarts"] for _p, sw in pairs)
        ahead = sum(all(sw[k] < p[k] for k in KEYS) for p, sw in pairs)
        out.append(f"| {r:g} | {'yes' if early else 'no'} | {cost:g} | {ratio['makespan_s']:.3f} | "
                   f"{ratio['avg_jct_s']:.3f} | {ratio['worst_rho']:.3f} | {unfair:+.1f} | {restarts:.1f} | "
                   f"{ahead} of {len(pairs)} |")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="101-112")
    ap.add_argument("--rounds", default="120,60")
    ap.add_argument("--costs", default="30,60")
    ap.add_argument("--no-study", action="store_true", help="skip the study's traces (minutes)")
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--notes", default=None, help="a file whose text follows the table (the reading)")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    t0 = time.time()
    rows = measure(_seeds(args.seeds), [float(x) for x in args.rounds.split(",")],
                   [float(x) for x in args.costs.split(",")])
    text = table_text(rows)
    if not args.no_study:
        with tempfile.TemporaryDirectory() as d:
            text += ("\n\n## The study's traces: early rounds against the reference's\n\n`shockwave-edf`, simulated "
                     "with the study's settings (120 s rounds, 20 s restart cost), on the study's and the held-out "
                     "traces (bench/study_traces.py); each figure early rounds over reference rounds.\n\n"
                     + study_text(study(Path(d))))
    print(text)
    if args.no_doc:
        return
    flags = f"--seeds {args.seeds} --rounds {args.rounds} --costs {args.costs}"
    flags += " --no-study" if args.no_study else ""
    head = (f"# Short jobs and the 120 s round\n\nMade by `nice -n 10 .venv/bin/python bench/round_length.py "
            f"{flags}` ({time.strftime('%Y-%m-%d %H:%M')} "
            f"UTC, {time.time() - t0:.0f} s, load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after, "
            f"2 cores).  Simulated only.  Each seed is a new trace of the demo's shape (its generator settings with "
            f"only the seed changed: 24 jobs of 0.1-0.6 h, 8 GPUs on 2 nodes, 3 users); on each, the checked "
            f"plain-Slurm model at the demo's time scale 40 and `shockwave-edf` at each round length and restart "
            f"cost, without and with the controller's early rounds (production's poll and gap, 5 s).  More in the "
            f"script's docstring.\n\n")
    notes = Path(args.notes).read_text() if args.notes else ""
    (ROOT / "docs" / "round-length.md").write_text(head + text + "\n" + ("\n" + notes if notes else ""))


if __name__ == "__main__":
    main()
