"""Speed of the Shockwave policy (issue 3), written to docs/performance.md.

    .venv/bin/python bench/solver_speed.py            # ~3-5 min on 2 cores

1. The full 120-job simulation with Shockwave, and the max-min fairness baseline in the same process
   (the ratio is what to compare across machines).
2. One window solve (a fresh policy's first decide(): predictor + program + packing) on synthetic job sets:
   jobs from 100 to 5,000, GPUs = jobs x 256/900, window W in {10, 20, 40}; median of 3.
"""
from __future__ import annotations

import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from solver.policies.shockwave import ShockwaveConfig, ShockwavePolicy  # noqa: E402
from solver.types import ClusterView, JobView  # noqa: E402
from slurm_shockwave.data_files import experiment_paths  # noqa: E402
from slurm_shockwave.simulate import run_simulation  # noqa: E402


def synthetic_view(n: int, gpus: int, seed: int) -> ClusterView:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        bs = rng.choice([16, 32, 64])
        total = rng.randint(5, 150)
        done = rng.randint(0, total - 1)
        d = rng.uniform(20, 400)
        hist = tuple(bs if e < done * 0.7 else bs * 2 for e in range(done))
        jobs.append(JobView(job_id=i, arrival_time=rng.uniform(0, 4000), num_gpus=rng.choice([1, 1, 1, 2, 2, 4, 8]),
                            batch_size=hist[-1] if hist else bs, epochs_done=done, total_epochs=total,
                            samples_per_epoch=50000, steps_done=0, total_steps=1, throughput=1.0,
                            epoch_duration_by_bs={bs: d, bs * 2: d * 0.8}, bs_history=hist,
                            min_batch_size=bs, max_batch_size=bs * 4, weight=rng.choice([1.0, 1.0, 2.0])))
    return ClusterView(now=5000.0, round_index=40, round_length=120.0, num_gpus=gpus, jobs=tuple(jobs))


def one_solve(n, gpus, window, seed):
    pol = ShockwavePolicy(ShockwaveConfig(future_rounds=window))
    view = synthetic_view(n, gpus, seed)
    t0 = time.perf_counter()
    d = pol.decide(view)
    return time.perf_counter() - t0, d.info.get("solve_time_s", float("nan")), d.info.get("path")


def main():
    lines = ["# Performance", "", f"Machine: {platform.machine()}, {platform.python_version()}, "
             f"{time.strftime('%Y-%m-%d')}; 2 cores.  Made by `.venv/bin/python bench/solver_speed.py`.", ""]
    p = experiment_paths("tacc_32gpus")
    cfg = ShockwaveConfig.from_file(p["config"])
    sw = run_simulation(p["trace"], p["throughputs"], 32, "shockwave", policy_config=cfg)
    mm = run_simulation(p["trace"], p["throughputs"], 32, "max_min_fairness")
    lines += ["## Full simulation: 120 jobs, 32 GPUs (target: Shockwave <= 20 s; the reference takes 665 s)", "",
              "| policy | wall s | rounds | time deciding s |", "|---|---|---|---|",
              f"| shockwave | {sw.wall_seconds:.1f} | {sw.rounds} | {sw.decide_seconds:.1f} |",
              f"| max_min_fairness | {mm.wall_seconds:.2f} | {mm.rounds} | {mm.decide_seconds:.2f} |", "",
              f"Ratio shockwave / max-min in the same process: {sw.wall_seconds / mm.wall_seconds:.0f}x; "
              f"against the reference's 665 s: {665 / sw.wall_seconds:.0f}x faster.", ""]
    print("\n".join(lines[-8:]), flush=True)
    lines += ["## One window solve (fresh policy: predictor + program + packing), median of 3", "",
              "Targets: 900 jobs / 256 GPUs <= 0.5 s; 5,000 jobs / 2,048 GPUs <= 5 s.", "",
              "| jobs | GPUs | W=10 s | W=20 s | W=40 s |", "|---|---|---|---|---|"]
    for n, gpus in ((100, 28), (250, 71), (500, 142), (900, 256), (2000, 569), (5000, 2048)):
        cells = []
        for w in (10, 20, 40):
            runs = [one_solve(n, gpus, w, seed) for seed in range(3)]
            cells.append(f"{statistics.median(r[0] for r in runs):.3f}")
            print(n, gpus, w, [f"{r[0]:.3f}/{r[2]}" for r in runs], flush=True)
        lines.append(f"| {n} | {gpus} | " + " | ".join(cells) + " |")
    perf = ROOT / "docs" / "performance.md"
    old = perf.read_text() if perf.exists() else ""
    ours = ("Full simulation", "One window solve")       # the sections this script writes; keep the others
    keep = "".join("\n## " + sec for sec in old.split("\n## ")[1:] if not sec.startswith(ours))
    perf.write_text("\n".join(lines) + "\n" + keep)
    print(f"wrote {perf}")


if __name__ == "__main__":
    main()
