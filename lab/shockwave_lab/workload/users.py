"""Users for generated workloads (`shockwave trace generate --users N`): the job spec of a generated trace, each job
with a user and an account.  The `.trace` format has no user column, so a workload with users is written as our
job spec (JSON Lines, docs/job-spec.md).

* `users` N: user `u<k>` (k = 1..N) gets the generated jobs round robin (the i-th job, 0-based, goes to user
  i mod N + 1), or with `assign="random"` each job a user drawn uniformly from a stream seeded with the trace's
  seed + 5 (the generator's five streams are seed + 0..4, so the jobs themselves do not change).
* `splitter` K (>= 2): the first user is named `splitter` and submits each of its jobs as K jobs: same arrival,
  model, batch size, GPUs and mode, each max(1, round(steps / K)) steps (an accordion job whose share is shorter
  than 1000 s becomes static, the generator's rule); its work is unchanged, its job count is K times larger.
* `accounts` M: user k is charged to account `a<(k - 1) mod M + 1>` (0: each user its own account).

Jobs are numbered 0, 1, ... in file order; arrivals are whole seconds, as a `.trace` writes them.  GNS jobs carry
the reference's doubling schedule (`gns_schedule`, workload/patterns.py, as a `.trace` job gets it), so every job
runs as its `.trace` twin.  As any job spec's, the exclusive run time (the rho denominator) is that of the schedule
the simulator applies; a `.trace` job's is the reference profile's (the last GNS epoch at the first batch size, the
first 30% of an Accordion job's epochs critical: docs/reference.md §4.3), so the twins score slightly differently.
"""
from __future__ import annotations

import json
import math
import random
from itertools import groupby

from shockwave_lab.workload.models import DATASET_SIZE, steps_per_epoch
from shockwave_lab.workload.patterns import gns_pattern

SPLITTER = "splitter"


def user_names(users: int, splitter: int = 0) -> list[str]:
    return [SPLITTER if k == 1 and splitter else f"u{k}" for k in range(1, users + 1)]


def with_users(jobs, users: int, seed: int = 0, splitter: int = 0, accounts: int = 0,
               assign: str = "round-robin") -> list[dict]:
    """Job-spec entries (docs/job-spec.md) of generated jobs (workload/generate.py GeneratedJob) with users."""
    if users < 1 or splitter == 1 or splitter < 0 or accounts < 0 or assign not in ("round-robin", "random"):
        raise ValueError(f"users {users}, splitter {splitter}, accounts {accounts}, assign {assign!r}: need "
                         "users >= 1, splitter 0 or >= 2, accounts >= 0, assign round-robin or random")
    names = user_names(users, splitter)
    rng = random.Random(seed + 5)
    out = []
    sweep_user: dict[int, int] = {}
    for i, job in enumerate(jobs):
        sweep = getattr(job, "sweep", -1)
        if sweep >= 0 and sweep in sweep_user:
            k = sweep_user[sweep]  # a sweep's jobs are one user's (one submission)
        else:
            k = i % users if assign == "round-robin" else rng.randrange(users)
            if sweep >= 0:
                sweep_user[sweep] = k
        parts = splitter if names[k] == SPLITTER else 1
        steps = max(1, round(job.total_steps / parts))
        mode = "static" if parts > 1 and job.mode == "accordion" and job.duration / parts < 1000 else job.mode
        for _ in range(parts):
            entry = {"id": len(out), "arrival": float(int(job.arrival)), "model": job.model,     # whole seconds:
                     "batch_size": job.batch_size,                                                # as in a .trace
                     "gpus": job.gpus, "mode": mode, "total_steps": steps, "user": names[k]}
            if accounts:
                entry["account"] = f"a{k % accounts + 1}"
            if mode == "gns":
                epochs = math.ceil(steps / steps_per_epoch(DATASET_SIZE[job.model], job.batch_size))
                sched = gns_pattern(job.model, job.batch_size, job.gpus, epochs)
                if len(sched) >= 2 and sched[-1] < sched[-2]:
                    sched[-1] = sched[-2]        # as profiles.apply_reference_patterns does for a .trace job
                entry["gns_schedule"] = [[b, sum(1 for _ in g)] for b, g in groupby(sched)]
            out.append(entry)
    return out


def spec_text(entries: list[dict]) -> str:
    """JSON Lines: one job per line."""
    return "".join(json.dumps(e, separators=(", ", ": ")) + "\n" for e in entries)
