"""Speed of the Shockwave policies (issues 3, 12, 21), written to docs/performance.md.

    .venv/bin/python bench/solver_speed.py [--before DIR] [--skip-900]

DIR holds an older tree's ``solver/`` and ``slurm_shockwave/`` (e.g. ``mkdir DIR && git archive <rev> solver
slurm_shockwave | tar -x -C DIR``); it is timed in the same run, alternating with the current tree, so the ratio
holds whatever else the machine is doing (the load average is recorded with every section).

1. The full 120-job simulation with the default policy and shockwave-paper (each tree in a fresh subprocess,
   alternating, 2 runs each; the older tree's default, "shockwave").
2. One window solve of shockwave-paper (a fresh policy's first decide(): predictor + market + packing) on synthetic job sets:
   jobs from 100 to 5,000, GPUs = jobs x 256/900, window W in {10, 20, 40}; median of 3 (and the old tree
   at W=20 for 900 and 5,000 jobs).
3. Every re-solve of the full bundled 900-job / 256-GPU simulation: status (time limit reached or not), times.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from shockwave_lab.bench import ROOT

SIM_120 = r"""
import json, sys, time
from shockwave_lab.data_files import experiment_paths
from shockwave_lab.simulate import run_simulation
p = experiment_paths("tacc_32gpus")
r = run_simulation(p["trace"], p["throughputs"], 32, sys.argv[1])      # the policy's built-in configuration
m = r.metrics
print(json.dumps({"wall": r.wall_seconds, "decide": r.decide_seconds, "rounds": r.rounds,
                  "makespan": m.makespan, "avg_jct": m.avg_jct, "worst_rho": m.worst_rho,
                  "unfair": m.unfair_fraction}))
"""

ONE_SOLVE = r"""
import json, sys, time, statistics
sys.path.insert(0, sys.argv[2])
from solver_speed_views import synthetic_view
from solver.policies import make_policy
n, gpus, w, name = json.loads(sys.argv[1])
out = []
for seed in range(3):
    pol = make_policy(name, {"future_rounds": w})
    view = synthetic_view(n, gpus, seed)
    t0 = time.perf_counter()
    d = pol.decide(view)
    out.append([time.perf_counter() - t0, getattr(d, "solver_status", None) or getattr(d, "path", None)
                or d.info.get("solver_status", d.info.get("path"))])
print(json.dumps(out))
"""


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ")[0:3].__str__().replace("'", "")
    except OSError:
        return "n/a"


def run_in(tree: Path, code: str, *args) -> dict | list:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                         cwd=str(tree), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


#: the market policy (its solve is what these sections time); the old tree knew it as "shockwave"
MARKET = "shockwave-paper"


def section_120(before: Path | None, lines: list) -> None:
    from solver.policies import default_policy
    la0 = loadavg()
    trees = [("before", before, "shockwave")] if before is not None else []
    trees += [("current", ROOT, default_policy().name), ("current", ROOT, MARKET)]
    runs = {(name, pol): [] for name, _tree, pol in trees}
    for _ in range(2):
        for name, tree, pol in trees:
            runs[name, pol].append(run_in(tree, SIM_120, pol))
    la1 = loadavg()
    lines += ["## Full simulation: 120 jobs, 32 GPUs", "",
              f"Each tree in a fresh process, alternating, 2 runs each (load average {la0} at the start, {la1} at "
              "the end).  Wall = the whole simulation; decide = time inside the policy.", "",
              "| tree | policy (built-in config) | wall s (median) | decide s | rounds | makespan s | avg JCT s | "
              "worst rho | unfair % |", "|---|---|---|---|---|---|---|---|---|"]
    med = {}
    for (name, pol), rs in runs.items():
        med[name, pol] = statistics.median(r["wall"] for r in rs)
        r = rs[-1]
        lines.append(f"| {name} | `{pol}` | {med[name, pol]:.2f} | {statistics.median(x['decide'] for x in rs):.2f} | "
                     f"{r['rounds']} | {r['makespan']:,.0f} | {r['avg_jct']:,.0f} | {r['worst_rho']:.3f} | "
                     f"{r['unfair']:.2f} |")
    if before is not None:
        now = med["current", default_policy().name]
        lines += ["", f"Ratio of the default policy to the tree before's default, same run: "
                      f"**{now / med['before', 'shockwave']:.2f}** (target <= 0.5)."]
    lines.append("")
    print("\n".join(lines[-8:]), flush=True)


def section_solves(before: Path | None, lines: list) -> None:
    la0 = loadavg()
    lines += ["## One window solve (fresh policy: predictor + program + packing), median of 3", "",
              "Targets: 5,000 jobs / 2,048 GPUs median <= 3 s (W=20).", "",
              "| jobs | GPUs | W=10 s | W=20 s | W=40 s | before, W=20 s |", "|---|---|---|---|---|---|"]
    bench_dir = str(Path(__file__).resolve().parent)     # solver_speed_views.py, importable in any tree
    for n, gpus in ((100, 28), (250, 71), (500, 142), (900, 256), (2000, 569), (5000, 2048)):
        cells = []
        for w in (10, 20, 40):
            runs = run_in(ROOT, ONE_SOLVE, json.dumps([n, gpus, w, MARKET]), bench_dir)
            cells.append(f"{statistics.median(r[0] for r in runs):.3f}")
            print(n, gpus, w, runs, flush=True)
        old = "-"
        if before is not None and n in (900, 5000):
            runs = run_in(before, ONE_SOLVE, json.dumps([n, gpus, 20, "shockwave"]), bench_dir)
            old = f"{statistics.median(r[0] for r in runs):.3f}"
            print("before", n, gpus, runs, flush=True)
        lines.append(f"| {n} | {gpus} | " + " | ".join(cells) + f" | {old} |")
    lines += ["", f"Load average {la0} at the start, {loadavg()} at the end.", ""]


def section_900(lines: list) -> None:
    from shockwave_lab.data_files import experiment_paths
    from shockwave_lab.simulate import run_simulation
    from solver.policies.shockwave_config import ShockwaveConfig
    from solver.policies.shockwave_paper import ShockwavePaper
    p = experiment_paths("scale_256gpus")
    solves = []
    decide = ShockwavePaper.decide

    def recording(self, view):
        d = decide(self, view)
        if d.path == "solved":
            solves.append((len(view.jobs), d.solve_time_s, d.solver_status))
        return d
    la0 = loadavg()
    ShockwavePaper.decide = recording
    try:
        r = run_simulation(p["trace"], p["throughputs"], 256, MARKET)
    finally:
        ShockwavePaper.decide = decide
    times = sorted(s[1] for s in solves)
    limit = ShockwaveConfig().solver_timeout
    hit = sum(1 for s in solves if s[2] == "time_limit")
    statuses = {}
    for s in solves:
        statuses[s[2]] = statuses.get(s[2], 0) + 1
    m = r.metrics
    lines += [f"## Window solves on the bundled 900-job trace (256 GPUs, {MARKET}, its built-in config)", "",
              f"Full simulation: wall {r.wall_seconds:.0f} s, {r.rounds} rounds, {len(solves)} re-solves with up to "
              f"{max(s[0] for s in solves)} active jobs (load average {la0} at the start, {loadavg()} at the end).",
              f"Solve time: median {statistics.median(times):.2f} s, 90th percentile {times[int(0.9 * len(times))]:.2f} s, "
              f"maximum {times[-1]:.2f} s; solves that reached the {limit:.0f} s time limit: **{hit}**; "
              f"statuses: {statuses}.",
              f"Result: makespan {m.makespan:,.0f} s, avg JCT {m.avg_jct:,.0f} s, worst rho {m.worst_rho:.3f}, "
              f"unfair {m.unfair_fraction:.2f}%.", ""]
    print("\n".join(lines[-5:]), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, default=None, help="an older tree (solver/ + slurm_shockwave/)")
    ap.add_argument("--skip-900", action="store_true")
    ap.add_argument("--only", choices=["120", "solves", "900"], default=None)
    a = ap.parse_args()
    lines = ["# Performance", "", f"Machine: {platform.machine()}, {platform.python_version()}, "
             f"{time.strftime('%Y-%m-%d %H:%M')}; {os.cpu_count()} cores, shared with other work: every comparison "
             "below is a ratio within one run.  Made by `.venv/bin/python bench/solver_speed.py "
             f"{'--before DIR' if a.before else ''}`.", ""]
    if a.only in (None, "120"):
        section_120(a.before, lines)
    if a.only in (None, "solves"):
        section_solves(a.before, lines)
    if a.only in (None, "900") and not a.skip_900:
        section_900(lines)
    perf = ROOT / "docs" / "performance.md"
    old = perf.read_text() if perf.exists() else ""
    ours = ("Full simulation", "One window solve", "Window solves on")
    keep = "".join("\n## " + sec for sec in old.split("\n## ")[1:] if not sec.startswith(ours))
    ours_old = "".join("\n## " + sec for sec in old.split("\n## ")[1:] if sec.startswith(ours))
    new = "\n".join(lines) + "\n"
    if a.only is not None:          # keep the sections of ours that this run did not redo
        done = {"120": "Full simulation", "solves": "One window solve", "900": "Window solves on"}[a.only]
        new += "".join("\n## " + sec for sec in ours_old.split("\n## ")[1:] if not sec.startswith(done))
    perf.write_text(new + keep)
    print(f"wrote {perf}")


if __name__ == "__main__":
    main()
