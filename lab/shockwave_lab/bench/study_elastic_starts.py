"""The elastic study's default with Slurm's own starts (docs/elastic.md, "On real Slurm"; issue 34).

    nice -n 10 .venv/bin/python bench/study_elastic_starts.py run [--workers 2]    # resumable
    .venv/bin/python bench/study_elastic_starts.py report    # docs/study-elastic-slurm-starts/summary.md

On Slurm a job no round has seen yet starts on its asked count as soon as its gang fits (`sim/slurm_starts.py`), and
the round that first sees it grows it through a restart; the study (`study_elastic.py`) admits jobs at rounds only.
This runs the default on every workload and variant of that study with Slurm's starts (each run a file
docs/study-elastic-slurm-starts/<trace>/<variant>/..., never re-run) and reads the issue's targets again: the
default's runs from here, Pollux's from the study (Pollux runs no controller: no Slurm start to model).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from shockwave_lab.bench import ROOT
from shockwave_lab.bench.study_elastic import DATA, OUT, VARIANTS, _get, run_one, traces
from shockwave_lab.bench.study_elastic import targets as study_targets
from shockwave_lab.bench.study_traces import offered_load
from solver.policies import default_policy

OUT_STARTS = ROOT / "docs" / "study-elastic-slurm-starts"


def _study(spec, policy: str, var: str):
    """The study's committed run (docs/study-elastic; its file names carry the code hash it was made with), or None."""
    found = sorted((OUT / spec.name / var).glob(f"{policy}-*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(found[-1].read_text()) if found else None


def targets(spec, load: float) -> tuple[str, list[tuple]]:
    """study_elastic.targets with the default's runs made with Slurm's starts, Pollux's from the study."""
    return study_targets(spec, load, OUT_STARTS, lambda p, v: _study(spec, p, v) if p == "pollux" else
                         _get(spec, p, v, OUT_STARTS))


def report(specs, tmpdir: Path) -> Path:
    """The targets met per kind, and per workload and variant the default's average JCT with Slurm's starts against
    the study's (round-only admission) and Pollux's."""
    default = default_policy().name
    met = {"light": [0, 0], "contended": [0, 0]}
    lines = ["| workload | load | variant | avg JCT, Slurm's starts | avg JCT, study | Pollux | restarts/job, starts |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for spec in specs:
        load = offered_load(spec, tmpdir)
        kind, rows = targets(spec, load)
        for _var, _name, _x, _y, ok in rows:
            if ok is not None:
                met[kind][0] += bool(ok)
                met[kind][1] += 1
        for var in VARIANTS:
            s, d, p = _get(spec, default, var, OUT_STARTS), _study(spec, default, var), _study(spec, "pollux", var)
            if s is None:
                continue
            cells = [f"{r['avg_jct'] / 3600:.2f} h" if r else "-" for r in (s, d, p)]
            lines.append(f"| {spec.name} | {load:.2f} | {var} | {' | '.join(cells)} | {s['restarts_mean']:.2f} |")
    head = [
        "# The elastic study's default with Slurm's own starts",
        "",
        "Made by `bench/study_elastic_starts.py run` then `report` (`lab/shockwave_lab/bench/study_elastic_starts.py`:"
        " what it models). Targets as in docs/elastic.md, the default's runs with Slurm's starts:",
        "",
        *(f"* {kind}: {m} of {n} met" for kind, (m, n) in met.items()),
        "",
    ]
    OUT_STARTS.mkdir(parents=True, exist_ok=True)
    path = OUT_STARTS / "summary.md"
    path.write_text("\n".join(head + lines) + "\n")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=("run", "report"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--data", default=str(DATA), help="the directory of the Pollux workloads' job specs")
    a = ap.parse_args(argv)
    specs = traces(a.data)
    tmpdir = Path(tempfile.gettempdir()) / f"shockwave-study-{os.getuid()}"
    tmpdir.mkdir(exist_ok=True)
    if a.cmd == "report":
        print(f"wrote {report(specs, tmpdir)}")
        return 0
    from concurrent.futures import ProcessPoolExecutor, as_completed

    default = default_policy().name
    with ProcessPoolExecutor(max_workers=max(1, a.workers)) as pool:
        todo = [(s, v) for s in specs for v in VARIANTS]
        futures = [pool.submit(run_one, s, default, v, tmpdir, OUT_STARTS, False, True) for s, v in todo]
        for f in as_completed(futures):
            r = f.result()
            print(f"{r['trace']:22s} {r['variant']:5s} jct {r['avg_jct']:9.0f} mk {r['makespan']:9.0f} "
                  f"dyn worst {r['ftf_dynamic_worst']:.3f} ({r['wall_seconds']:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
