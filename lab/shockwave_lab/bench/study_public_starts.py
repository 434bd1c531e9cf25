"""The public traces' default with Slurm's own starts (issue 35; docs/study-public-slurm-starts.md).

    SHOCKWAVE_PUBLIC_SAMPLES=DIR nice -n 10 .venv/bin/python bench/study_public_starts.py run     # resumable
    SHOCKWAVE_PUBLIC_SAMPLES=DIR .venv/bin/python bench/study_public_starts.py report

On Slurm a job that arrives while its gang fits starts at once, by Slurm's own scheduler (`sim/slurm_starts.py`, the
model the elastic replay checked against real Slurm); the study's `controller` semantics admit jobs at round
boundaries only, so there a job shorter than a round waits up to a round, which its finish-time fairness counts
several times over.  This runs the default on the study's public windows with Slurm's starts (each run a file
docs/study-public-slurm-starts/<trace>/<key>.json, never re-run) and reads the study's targets (study_report) against
the baselines' runs of the study (docs/study/public: they model no controller, so no Slurm start).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from shockwave_lab.bench import ROOT
from shockwave_lab.bench.study import OUT, baselines, run_key, save_row, study_semantics
from shockwave_lab.bench.study_report import _load, _met_line, default_targets
from shockwave_lab.bench.study_traces import PUBLIC, trace_file
from shockwave_lab.simulate import run_simulation
from solver.policies import default_policy

OUT_STARTS = ROOT / "docs" / "study-public-slurm-starts"
DOC = ROOT / "docs" / "study-public-slurm-starts.md"


def run_one(spec, tmpdir: Path, out: Path = OUT_STARTS) -> dict:
    """The default on `spec` with Slurm's starts (the study's semantics otherwise); cached by the study's run key."""
    policy = default_policy().name
    path = out / spec.name / f"{run_key(policy)}.json"
    if path.exists():
        return json.loads(path.read_text())
    trace, thr = trace_file(spec, tmpdir)
    t0 = time.perf_counter()
    r = run_simulation(trace, thr, spec.cluster, policy, semantics=study_semantics(policy), slurm_starts=True)
    row = {"trace": spec.name, "policy": policy, "gpus": spec.gpus, "slurm_starts": True, **r.metrics.summary(),
           "rounds": r.rounds, "wall_seconds": round(time.perf_counter() - t0, 2),
           "finished_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    return save_row(path, row)


def report(specs, tmpdir: Path, path: Path = DOC, out: Path = OUT_STARTS) -> Path:
    """The study's default targets with the default's runs from here, and per trace the default's figures with and
    without Slurm's starts."""
    policy = default_policy().name
    rows, pairs = [], []
    for spec in specs:
        starts = _load(out, spec.name, policy)
        study = _load(OUT / "public", spec.name, policy)
        rows.append((spec, {policy: starts, **{p: _load(OUT / "public", spec.name, p) for p in baselines()}}))
        if starts and study:
            pairs.append(f"| {spec.name} | {study['makespan_over_lb']:.3f} / {starts['makespan_over_lb']:.3f} | "
                         f"{study['avg_jct']:,.0f} / {starts['avg_jct']:,.0f} | "
                         f"{study['ftf_dynamic_worst']:.3f} / {starts['ftf_dynamic_worst']:.3f} | "
                         f"{study['ftf_dynamic_p95']:.3f} / {starts['ftf_dynamic_p95']:.3f} | "
                         f"{study.get('restarts_per_hour_worst', 0.0):.2f} / "
                         f"{starts.get('restarts_per_hour_worst', 0.0):.2f} |")
    table, met = default_targets(rows, tmpdir)
    lines = ["# The public traces' default with Slurm's own starts", "",
             "Made by `bench/study_public_starts.py run` then `report` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             "`lab/shockwave_lab/bench/study_public_starts.py`: what it models). The study's targets "
             "(`docs/results.md`, Public traces), the default's runs with Slurm's starts, every baseline's from the "
             "study:", "", *table, "", _met_line(met), "",
             "The default in the study (rounds only) / with Slurm's starts:", "",
             "| trace | makespan/LB | avg JCT s | worst dyn. FTF | p95 dyn. FTF | worst restarts / h |",
             "|---|---|---|---|---|---|", *pairs, ""]
    path.write_text("\n".join(lines))
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=("run", "report"))
    a = ap.parse_args(argv)
    tmpdir = Path(tempfile.gettempdir()) / f"shockwave-study-{os.getuid()}"
    tmpdir.mkdir(exist_ok=True)
    if a.cmd == "report":
        print(f"wrote {report(PUBLIC, tmpdir)}")
        return 0
    for spec in PUBLIC:
        r = run_one(spec, tmpdir)
        print(f"{r['trace']:22s} jct {r['avg_jct']:9.0f} mk/LB {r['makespan_over_lb']:.3f} "
              f"dyn worst {r['ftf_dynamic_worst']:.3f} ({r['wall_seconds']:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
