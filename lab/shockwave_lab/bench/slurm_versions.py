"""The controller at scale on a real multi-node cluster of each Slurm version (issue 23 item 5).

    nice -n 5 .venv/bin/python bench/slurm_versions.py --jobs 1000,5000 --slurm 22.05,24.11,26.05   (root)

For each version and each job count: a local cluster of 8 slurmd x 4 fake GPUs (22.05 = the host's Slurm; 24.11 /
26.05 from their Debian roots, built once and cached, see ``shockwave cluster build-root``), N ``sleep`` jobs
submitted with Shockwave comments (32 GPUs' worth start at once, the rest stay pending), then ``--rounds`` rounds
of one authoritative controller with the default policy, each timed by phase (``bench/controller_round.py``
``timed_rounds``: read = the queue (slurm/queue_read.py) + sprio + nodes + events + state; decide; enact = the
reconcile's Slurm calls) with the controller process's RSS.  Each round holds at most ``MAX_NEW_HOLDS`` new
deferred jobs (one update per job, chunks run 4 at a time); the default ``--rounds`` runs until all are held.  Targets: every round within 2 s at
1,000 jobs and 10 s at 5,000.  Results go into docs/performance.md, section "Controller at scale".
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from shockwave_lab.bench import ROOT

from shockwave_lab.bench.controller_round import ROUND_HEAD, controller, round_row, submit_jobs, timed_rounds

from shockwave_lab.localcluster import LocalCluster
from slurm_shockwave.slurm import parse_squeue_json
from slurm_shockwave.slurm.enact import MAX_NEW_HOLDS


def one_version(version: str, jobs: int, args) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"shockwave-bench-{version}-"))
    root.chmod(0o755)
    c = LocalCluster(root, nodes=args.nodes, gpus_per_node=args.gpus_per_node, cpus_per_node=64, slurm=version)
    c.ensure_installed()
    c.up()
    try:
        _ids, submit_s = submit_jobs(c, root, jobs)
        cli = c.cli
        t = time.perf_counter()
        text = cli.run(["squeue", "--json", "--states=all"]).stdout
        read_s = time.perf_counter() - t
        parsed = parse_squeue_json(text)
        assert len(parsed) >= jobs and not any(j.problem for j in parsed)
        ctl = controller(c, root, f"v{version}", root / "events", dry_run=False)
        rounds = timed_rounds(ctl, args.rounds or -(-jobs // MAX_NEW_HOLDS) + 2)
        ctl.close()
        return {"version": version, "release": c.run(["sinfo", "-V"]).stdout.split()[-1], "jobs": jobs,
                "submit_s": submit_s, "read_s": read_s, "bytes": len(text), "rounds": rounds}
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


SECTION = "## Controller at scale (issue 23)"


def write_section(text: str) -> None:
    """Replace the section of this bench in docs/performance.md (or append it)."""
    perf = ROOT / "docs" / "performance.md"
    doc = perf.read_text() if perf.exists() else "# Performance\n"
    if SECTION in doc:
        head, rest = doc.split(SECTION, 1)
        nxt = rest.find("\n## ")
        doc = head + text.strip("\n") + ("\n" + rest[nxt:] if nxt >= 0 else "\n")
    else:
        doc = doc.rstrip("\n") + "\n\n" + text.strip("\n") + "\n"
    perf.write_text(doc)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", default="1000,5000", help="comma-separated job counts")
    ap.add_argument("--slurm", default="22.05,24.11,26.05", help="comma-separated versions")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds per case (default: until every deferred job is held, plus 2)")
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args(argv)
    rows, results = [], []
    load0 = os.getloadavg()
    for version in [v.strip() for v in args.slurm.split(",") if v.strip()]:
        for jobs in [int(n) for n in args.jobs.split(",") if n.strip()]:
            r = one_version(version, jobs, args)
            results.append(r)
            new = round_row(f"{r['release']}", jobs, args.nodes * args.gpus_per_node, r["rounds"])
            print("\n".join(new), f"(squeue --json {r['bytes'] / 1e6:.1f} MB, {r['read_s']:.2f} s)", flush=True)
            rows += new
    if args.no_doc:
        return
    worst = {}
    for r in results:
        key = (r["release"], r["jobs"])
        worst[key] = max(x["total"] for x in r["rounds"])
    verdict = "; ".join(f"{v} {n:,} jobs: slowest round {t:.2f} s ({'within' if t <= (2 if n <= 1000 else 10) else 'over'} "
                        f"{2 if n <= 1000 else 10} s)" for (v, n), t in worst.items())
    sizes = "; ".join(f"{r['release']} {r['jobs']:,} jobs: squeue --json {r['bytes'] / 1e6:.1f} MB read in "
                      f"{r['read_s']:.2f} s" for r in results)
    load_a = " / ".join(f"{x:.1f}" for x in load0)
    load_b = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    when = time.strftime("%Y-%m-%d %H:%M")
    table = ROUND_HEAD + "\n".join(rows)
    write_section(f"""{SECTION}

`.venv/bin/python bench/slurm_versions.py --jobs {args.jobs} --slurm {args.slurm}` ({when};
{args.nodes} slurmd x {args.gpus_per_node} fake GPUs; 2 cores shared with other work, load average
{load_a} at the start and {load_b} at the end).
N managed `sleep` jobs (1, 2 or 4 GPUs, Shockwave comments), 32 GPUs' worth running, the rest pending; one
authoritative controller with the default policy, run until every deferred job is held and 2 rounds more. Phases:
read (the queue, below, + sprio + nodes + the event store + the state),
decide (policy and gate), enact (the reconcile's Slurm calls and their journal); RSS is the controller process's
(the bench process, whose own share before the controller is about 100 MB).

{table}

Verdict: {verdict}. Reads: {sizes}.

How a round reads and enacts at this scale:
- The queue (slurm/queue_read.py): on 23.x and newer a compact `squeue -h -O` listing of every job (0.1-0.2 s
  for 5,000 jobs on 24.11, against 3.1 s for `squeue --json` and 0.8 s to parse its 39 MB), then
  `squeue --json -j` only for the jobs whose listing changed plus a tenth of the others in turn (every record
  is read again within 10 rounds); round 0 reads everything. A list of more than 200 ids is read in two
  `squeue --json -j` calls at once (two squeue processes make the JSON on two cores), and the controller asks
  `squeue --version` before its first read, so that round 0 is already read that way (since 2026-11-26 22:40).
  22.05 ignores `-j` in `squeue --json`, so it reads everything every round (16 MB for 5,000 jobs). The column
  "jobs read as JSON" counts those records.
- Holds (slurm/enact.py `MAX_NEW_HOLDS` = 500): at most 500 pending deferred jobs are held for the first time in
  a round, the oldest first; the others already carry SiteFactor 0 behind the planned jobs and are held in the
  next rounds (5,000 new jobs: 10 rounds). Each is one `scontrol update AdminComment=... Priority=0` (the mark
  and an admin hold in one RPC), lists of up to 500 ids, 4 calls at once; slurmctld acts on a list one job at a
  time (1-3 ms each here).
- Node pins (slurm/nodes.py, since 2026-11-26 19:00): each planned pending job is pinned to its node before its
  release, `update JobId=N NodeList=<node>`, a line per job (no version takes an id list with NodeList) read by
  one `scontrol` from its standard input (since 2026-11-26 22:30; one call per job before): the jobs a round
  releases (here about 30 in round 0), not the deferred ones.
- Earlier changes (2026-11-25): the SiteFactor `sprio` showed is remembered (sprio does not list held jobs), the
  journal record is made strict JSON without a per-value ABC walk, and a round's clock starts before its reads.
""")


if __name__ == "__main__":
    main()
