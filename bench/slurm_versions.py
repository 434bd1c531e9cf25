"""The controller round on 1,000 queued managed jobs, on a real cluster of each Slurm version.

    nice -n 10 .venv/bin/python bench/slurm_versions.py --jobs 1000 --slurm 22.05,24.11,26.05   (root; ~1 min each)

For each version: a local cluster (22.05 = the host's Slurm; 24.11 / 26.05 from their Debian roots, built once
and cached, see ``shockwave cluster build-root``), N ``sleep`` jobs submitted with Shockwave comments, then
``--rounds`` rounds of one authoritative controller (``bench/controller_round.py``'s set-up: read ``squeue
--json`` + ``sprio`` + nodes, solve, reconcile; the first round holds and sets SiteFactor on every deferred job).
Also the time of the raw reads (``squeue --json`` of N jobs and its parse) per version, since newer versions print
3x more JSON per job. Target: a round within 2 s on every version. Results are appended to docs/performance.md.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from controller_round import append_doc, controller, submit_jobs, timed_round  # noqa: E402

from slurm_shockwave.localcluster import LocalCluster  # noqa: E402
from slurm_shockwave.slurm import parse_squeue_json  # noqa: E402


def one_version(version: str, args) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"shockwave-bench-{version}-"))
    root.chmod(0o755)
    c = LocalCluster(root, nodes=args.nodes, gpus_per_node=args.gpus_per_node, cpus_per_node=64, slurm=version)
    c.ensure_installed()
    c.up()
    try:
        _ids, submit_s = submit_jobs(c, root, args.jobs)
        cli = c.cli
        reads, parses, size = [], [], 0
        for _ in range(3):
            t = time.perf_counter()
            text = cli.run(["squeue", "--json", "--states=all"]).stdout
            reads.append(time.perf_counter() - t)
            t = time.perf_counter()
            jobs = parse_squeue_json(text)
            parses.append(time.perf_counter() - t)
            size = len(text)
        assert len(jobs) >= args.jobs and not any(j.problem for j in jobs)
        ctl = controller(c, root, f"v{version}", root / "events", dry_run=False)
        rounds = [timed_round(ctl) for _ in range(args.rounds)]
        decide = [r.decide_seconds for r in ctl.loop.records[-args.rounds:]]
        ctl.close()
        return {"version": version, "release": c.run(["sinfo", "-V"]).stdout.split()[-1], "submit_s": submit_s,
                "read_s": statistics.median(reads), "parse_s": statistics.median(parses), "bytes": size,
                "rounds": rounds, "decide": decide}
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--slurm", default="22.05,24.11,26.05", help="comma-separated versions")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for version in [v.strip() for v in args.slurm.split(",") if v.strip()]:
        r = one_version(version, args)
        row = (f"| {r['release']} | {args.jobs} | {r['bytes'] / 1e6:.1f} MB | {r['read_s']:.2f} s | "
               f"{r['parse_s']:.2f} s | "
               f"{', '.join(f'{t:.2f}' for t in r['rounds'])} s | {', '.join(f'{t:.2f}' for t in r['decide'])} s | "
               f"{r['rounds'][-1]:.2f} s |")
        print(row, flush=True)
        rows.append(row)
    if not args.no_doc:
        append_doc("\n## Controller round per Slurm version (issue 13)\n\n"
                   f"`nice -n 10 .venv/bin/python bench/slurm_versions.py --jobs {args.jobs} --slurm {args.slurm}` "
                   f"({time.strftime('%Y-%m-%d')}; {args.nodes * args.gpus_per_node} GPUs, 2 shared cores, load average "
                   f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())} at the end). 24.11 and "
                   "26.05 run from Debian roots through chroot wrappers (each Slurm command pays a chroot exec). "
                   "Round 0 holds and sets SiteFactor on every deferred job; later rounds find Slurm in the planned "
                   "state (target: within 2 s).\n\n"
                   "| Slurm | jobs | squeue --json size | squeue --json read | parse | rounds 0..n | of which decide | "
                   "last round |\n|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
