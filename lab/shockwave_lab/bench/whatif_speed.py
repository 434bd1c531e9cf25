"""How long `shockwave whatif` takes on a site's history of 10,000 jobs (and 100,000 with `--large`).

    nice -n 10 .venv/bin/python bench/whatif_speed.py [--jobs 10000] [--large] [--profile] [--no-write]

The history is synthetic, in the shape of a real `sacct --json` of Slurm 24.11 (data_parser v0.0.42: the fields
the importer reads, as lab/tests/data/imports/sacct_24.11.json has them): `--jobs` jobs of 20 users in 5 accounts,
Poisson arrivals at a load of about 0.9 of a 16-node x 8-GPU cluster (128 GPUs, `scontrol show nodes --json`
shape), GPUs 1/2/4/8 (60/20/12/8 %), run times log-normal (median 40 min, clipped to 1 min..2 days), a seeded
stream (`--seed`).  The whole command runs on it (`shockwave whatif FILE --nodes NODES --config CONFIG`: import,
both simulations, the comparison, text, JSON and HTML) and each stage is timed.  `--profile` adds a cProfile of
the two simulations' top functions.  Unless `--no-write`, docs/whatif.md's "Speed" section is rewritten with the
timings, the command, the date and the machine's load.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import pstats
import random
import resource
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from shockwave_lab.bench import ROOT

NODES, GPN = 16, 8
USERS, ACCOUNTS = 20, 5
T0 = 1_767_225_600  # 2026-01-01 UTC
#: scontrol show config lines of the benchmark's site (Slurm's docs' example weights, Fair Tree)
CONFIG = """PriorityType            = priority/multifactor
PriorityDecayHalfLife   = 7-00:00:00
PriorityCalcPeriod      = 00:05:00
PriorityFavorSmall      = No
PriorityFlags           =
PriorityMaxAge          = 7-00:00:00
PriorityWeightAge       = 1000
PriorityWeightFairShare = 10000
PriorityWeightJobSize   = 1000
PriorityWeightPartition = 0
PriorityWeightQOS       = 0
PreemptMode             = OFF
PreemptType             = preempt/none
SchedulerParameters     = (null)
"""


def _n(x: int) -> dict:
    return {"set": True, "infinite": False, "number": x}


def history(n: int, seed: int = 1, load: float = 0.9) -> dict:
    """A `sacct --json` (24.11 shape) of `n` finished jobs (see the module docstring)."""
    rng = random.Random(seed)
    sizes, weights = (1, 2, 4, 8), (0.60, 0.20, 0.12, 0.08)
    median = 40 * 60.0
    mean_work = sum(g * w for g, w in zip(sizes, weights, strict=True)) * median * math.exp(1.0**2 / 2)
    rate = load * NODES * GPN / mean_work  # arrivals per second
    t, jobs = float(T0), []
    for i in range(n):
        t += rng.expovariate(rate)
        g = rng.choices(sizes, weights)[0]
        run = min(2 * 86400.0, max(60.0, rng.lognormvariate(math.log(median), 1.0)))
        u = rng.randrange(USERS)
        start = int(t) + 1
        jobs.append(
            {
                "job_id": 1000 + i,
                "array": {"job_id": 0, "task_id": _n(0) | {"set": False}},
                "het": {"job_id": 0, "job_offset": _n(0) | {"set": False}},
                "state": {"current": ["COMPLETED"], "reason": "None"},
                "time": {"submission": int(t), "start": start, "end": start + int(run)},
                "tres": {"allocated": [{"type": "gres", "name": "gpu", "id": 1001, "count": g}], "requested": []},
                "user": f"user{u:02d}",
                "account": f"acct{u % ACCOUNTS}",
            }
        )
    return {"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, "jobs": jobs, "warnings": [], "errors": []}


def nodes_json() -> dict:
    """`scontrol show nodes --json` of the benchmark's cluster (the fields the product's parser reads)."""
    path = ROOT / "tests" / "data" / "slurm" / "24.11" / "nodes_idle.json"
    data = json.loads(path.read_text())
    proto = data["nodes"][0]
    data["nodes"] = [
        {**proto, "name": f"gpu{i:02d}", "hostname": f"gpu{i:02d}", "gres": f"gpu:{GPN}", "gres_used": "gpu:0"}
        for i in range(NODES)
    ]
    return data


def measure(n: int, profile: bool = False, seed: int = 1) -> dict:
    from click.testing import CliRunner

    from shockwave_lab.cli.whatif import whatif

    with tempfile.TemporaryDirectory(prefix="whatif-bench-") as tmp:
        d = Path(tmp)
        (d / "sacct.json").write_text(json.dumps(history(n, seed)))
        (d / "nodes.json").write_text(json.dumps(nodes_json()))
        (d / "config.txt").write_text(CONFIG)
        args = [
            str(d / "sacct.json"),
            "--nodes",
            str(d / "nodes.json"),
            "--config",
            str(d / "config.txt"),
            "--json-out",
            str(d / "out.json"),
            "--html",
            str(d / "out.html"),
        ]
        prof = cProfile.Profile() if profile else None
        t0, c0 = time.perf_counter(), _cpu()
        if prof:
            prof.enable()
        res = CliRunner().invoke(whatif, args, catch_exceptions=False)
        if prof:
            prof.disable()
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
        if res.exit_code != 0:
            raise SystemExit(f"whatif failed: {res.output[-2000:]}")
        data = json.loads((d / "out.json").read_text())
    out = {
        "jobs": n,
        "wall_s": wall,
        "cpu_s": cpu,
        "load": os.getloadavg()[0],
        "runs": data["runs"],
        "timings": data["timings"],
    }
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
        out["profile"] = s.getvalue()
    return out


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (whatif's two simulations run in two)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _line(r: dict) -> str:
    t = r["timings"]
    runs = r["runs"]
    return (
        f"| {r['jobs']:,} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['load']:.1f} | {t['import_s']:.1f} "
        f"| {t.get('simulations_s', t['slurm_s'] + t['default_s']):.1f} | {t['slurm_s']:.1f} "
        f"({runs['slurm']['rounds']:,} rounds) | {t['default_s']:.1f} "
        f"({runs['default']['rounds']:,} rounds) | {t['compare_s'] + t['render_s']:.1f} |"
    )


def write_doc(results: list[dict], command: str) -> None:
    path = ROOT / "docs" / "whatif.md"
    text = path.read_text() if path.exists() else ""
    head, sep, _rest = text.partition("## Speed")
    load1 = os.getloadavg()[0]
    section = [
        "## Speed",
        "",
        f"Measured by `{command}` on {datetime.now(UTC):%Y-%m-%d} ({os.cpu_count()} CPUs, load average "
        f"{load1:.1f} at the end; the two simulations side by side, one process each): the synthetic history of "
        "bench/whatif_speed.py (16 nodes x 8 GPUs, 20 users in 5 accounts, load 0.9, Fair Tree with the docs' "
        "example weights).  The machine is shared: the CPU seconds (the command's and its two simulations') are the "
        "figure to compare, the wall time includes waiting for a core (load average at the end of each run in its "
        "row).",
        "",
        "| jobs | whole command, wall s | CPU s | load | import, s | both simulations, s | site's Slurm, s "
        "| default, s | compare + text/JSON/HTML, s |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_line(r) for r in results),
        "",
    ]
    path.write_text((head if sep else text).rstrip("\n") + "\n\n" + "\n".join(section))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--large", action="store_true", help="also 100,000 jobs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    results = []
    for n in [a.jobs] + ([100_000] if a.large else []):
        r = measure(n, a.profile, a.seed)
        print(_line(r), flush=True)
        if a.profile:
            print(r["profile"])
        results.append(r)
    if not a.no_write:
        cmd = "python bench/whatif_speed.py" + (f" --jobs {a.jobs}" if a.jobs != 10_000 else "")
        write_doc(results, cmd + (" --large" if a.large else ""))
    return 0
