"""One controller round over N queued managed jobs on a local Slurm cluster: read + solve + enact.

    .venv/bin/python bench/controller_round.py --jobs 1000          (as root; ~1-2 min)

Target (issue 4): <= 5 s per round at 1,000 jobs.  Prints a Markdown table row and appends it to
docs/performance.md under "Controller round".
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_shockwave.controller.config import config_from_dict  # noqa: E402
from slurm_shockwave.controller.daemon import Controller  # noqa: E402
from slurm_shockwave.localcluster import LocalCluster  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="shockwave-bench-"))
    root.chmod(0o755)
    c = LocalCluster(root, nodes=args.nodes, gpus_per_node=args.gpus_per_node, cpus_per_node=64)
    c.ensure_installed()
    c.up()
    try:
        script = root / "job.sh"
        script.write_text("#!/bin/sh\nsleep 3600\n")
        t0 = time.perf_counter()

        def one(i):
            gpus = (1, 1, 1, 2, 4)[i % 5]
            return c.cli.sbatch(str(script), [f"--gres=gpu:{gpus}", "--requeue", f"--output=/dev/null",
                                              f"--comment=shockwave epochs={10 + i % 50} bs=32 epoch_s={30 + i % 7}",
                                              "-p", c.partition, f"--job-name=b{i}"])
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(one, range(args.jobs)))
        submit_s = time.perf_counter() - t0
        cfg = config_from_dict({"controller": {"round_seconds": 0.01, "mode": "authoritative",
                                               "partition": c.partition, "state_dir": str(root / "state"),
                                               "event_store": str(root / "events")},
                                "policy": {"name": "shockwave", "config": "tacc_32gpus.json"}}, "bench")
        cfg.slurm_env = dict(c.env)
        ctl = Controller(cfg)
        times = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            ctl.run(max_rounds=1)
            times.append(time.perf_counter() - t)
        rec = ctl.loop.records
        ctl.close()
        rows = [f"| {args.jobs} | {args.nodes * args.gpus_per_node} | round {i}: {t:.2f} s (decide "
                f"{rec[i].decide_seconds:.2f} s, {len(rec[i].run)} planned) |" for i, t in enumerate(times)]
        print(f"submitted {args.jobs} jobs in {submit_s:.1f} s")
        for r in rows:
            print(r)
        perf = ROOT / "docs" / "performance.md"
        text = perf.read_text() if perf.exists() else "# Performance\n"
        text += ("\n## Controller round on a local Slurm cluster\n\n"
                 f"`.venv/bin/python bench/controller_round.py --jobs {args.jobs}` ({time.strftime('%Y-%m-%d')}): "
                 "one `squeue --json` + `sprio` + `sinfo --json` read, the Shockwave policy, and the reconcile "
                 "(the first round holds and sets SiteFactor on every deferred job; later rounds find Slurm in the "
                 "planned state).\n\n| jobs | GPUs | round time |\n|---|---|---|\n" + "\n".join(rows) + "\n")
        perf.write_text(text)
    finally:
        c.down()


if __name__ == "__main__":
    main()
