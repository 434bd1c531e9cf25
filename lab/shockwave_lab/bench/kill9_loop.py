"""Loop the kill -9 test N times in a row per Slurm version and write the figures into docs/guarantees.md.

    .venv/bin/python bench/kill9_loop.py --slurm 22.05 --runs 10      # tests/test_safety_kill9.py (the host's)
    .venv/bin/python bench/kill9_loop.py --slurm 24.11,26.05 --runs 3  # tests/test_versions_kill9.py (roots)

Each run is one pytest process (root; its own local cluster); CI runs each test once.  Per run: clean or not,
jobs lost (not COMPLETED, or an epoch lost or repeated), preemptions (checkpoint signals sent), kept (the gate
kept a job running: preempting it would not pay) and wasted (a job with at most one round of work left, or
restarted before the next round boundary), from the ``KILL9-FIGURES`` line the test prints whatever its
outcome, and the machine's load (1-minute load average before and after, cores).  A failed run keeps its
work directory (the test says where: ``kept for reading the failure: ...``) and its pytest output under
``--logs``.  ``--no-doc`` prints the table only.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from shockwave_lab.bench import ROOT
DOC = ROOT / "docs" / "guarantees.md"
HOST = "22.05"


def one_run(version: str, logs: Path, i: int) -> dict:
    test = "tests/test_safety_kill9.py" if version == HOST else "tests/test_versions_kill9.py"
    env = {**os.environ, "SHOCKWAVE_TEST_SLURM": version}
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", test],
                          cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    out = proc.stdout + proc.stderr
    log = logs / f"kill9-{version}-{i}.log"
    log.write_text(out)
    figures = [json.loads(m) for m in re.findall(r"^KILL9-FIGURES (\{.*\})$", out, re.M)]
    kept = re.findall(r"kept for reading the failure: (\S+)", out)
    return {"version": version, "clean": proc.returncode == 0, "seconds": round(time.monotonic() - t0),
            "load": (round(load0, 2), round(os.getloadavg()[0], 2)), "figures": figures[-1] if figures else None,
            "log": str(log), "kept": kept[-1] if kept else None,
            "why": "" if proc.returncode == 0 else _first_error(out)}


def _first_error(out: str) -> str:
    lines = [ln[2:].strip() for ln in out.splitlines() if ln.startswith("E ")]
    return (lines[0] if lines else out.strip().splitlines()[-1] if out.strip() else "?")[:200]


def table(runs: list[dict], command: str) -> str:
    by: dict[str, list[dict]] = {}
    for r in runs:
        by.setdefault(r["version"], []).append(r)
    rows = ["| Slurm | runs | clean | jobs lost | preemptions | kept running | wasted | s per run | load (1 min) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for v, rs in by.items():
        figs = [r["figures"] or {} for r in rs]
        unknown = sum(1 for r in rs if r["figures"] is None)
        lost = sum(f.get("lost", 0) for f in figs)
        loads = [x for r in rs for x in r["load"]]
        rows.append(f"| {v} | {len(rs)} | {sum(r['clean'] for r in rs)} | {lost}"
                    f"{f' (+{unknown} run(s) without figures)' if unknown else ''} | "
                    f"{sum(f.get('preempted', 0) for f in figs)} | {sum(f.get('kept', 0) for f in figs)} | "
                    f"{sum(f.get('wasted', 0) for f in figs)} | {min(r['seconds'] for r in rs)}-"
                    f"{max(r['seconds'] for r in rs)} | {min(loads):.1f}-{max(loads):.1f} |")
    failed = [f"* {r['version']} run {i + 1}: {r['why']} (work directory {r['kept'] or 'not kept'})"
              for i, r in enumerate(runs) if not r["clean"]]
    return "\n".join([f"Measured {date.today().isoformat()} on {os.cpu_count()} cores shared with other work: "
                      f"`{command}`", "", *rows, *([""] + failed if failed else [])])


def write_doc(text: str, versions: str) -> None:
    """Replace this set of versions' block in docs/guarantees.md (added at the end the first time)."""
    begin, end = f"<!-- kill9-loop {versions}: begin -->", f"<!-- kill9-loop {versions}: end -->"
    doc = DOC.read_text()
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        doc = head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1]
    else:
        doc = doc.rstrip("\n") + f"\n\n{begin}\n{text}\n{end}\n"
    DOC.write_text(doc)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slurm", default=HOST, help="comma-separated versions (22.05 = the host's)")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--logs", default="/tmp/shockwave-kill9-loop", help="where each run's pytest output goes")
    p.add_argument("--no-doc", action="store_true")
    args = p.parse_args(argv)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    runs = []
    for version in [v.strip() for v in args.slurm.split(",") if v.strip()]:
        for i in range(args.runs):
            r = one_run(version, logs, i)
            runs.append(r)
            print(json.dumps(r), flush=True)
    command = f"bench/kill9_loop.py --slurm {args.slurm} --runs {args.runs}"
    text = table(runs, command)
    print(text)
    if not args.no_doc:
        write_doc(text, args.slurm)
    return 0 if all(r["clean"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
