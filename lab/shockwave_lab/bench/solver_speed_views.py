"""Synthetic ClusterViews for bench/solver_speed.py (importable by an older tree's solver too)."""
from __future__ import annotations

import random

from solver.types import ClusterView, JobView


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
