"""Imported jobs -> job-spec entries (docs/job-spec.md), and the throughputs that run them in `shockwave simulate`.

The job spec has no duration-only form: a job's length is a number of steps of a model at a batch size, and its
run time those steps over the model's throughput on its GPUs.  A trace's job has no model, only a measured run time
at its GPU count, so it becomes the reference model `REFERENCE` (ResNet-18 at batch size 32, a job type of the
reference workload that has a throughput at 1, 2, 4 and 8 GPUs and adapts under GNS and Accordion) with

    total_steps = round(run time x throughput(ResNet-18, 32, its GPUs))      (v100 column, the workload's lengths)

so that alone on its GPUs it runs for its measured time (within half a step: under 0.012 s with the bundled TACC
table).  A GPU count the throughputs file has no value for (3, 16, 64, ...) gets the one of the largest profiled
count below it scaled linearly (`ThroughputTable.scaled`); `throughputs_json` writes a file with those values (and,
for every GPU type of the trace, a column equal to the v100 one: the trace measured each job on its own type only,
so the types' relative speeds are unknown and every job runs for its measured time on its type).  The value at the
job's own count cancels out of its run time; it matters only when a policy runs the job at another count or batch
size.

Modes: every job is static (it keeps its measured length) unless `mix` ({"static": p, "gns": p, "accordion": p})
draws a mode per job from a stream seeded by `seed`, in arrival order: a GNS/Accordion job starts at the same batch
size and length and then adapts as the simulator's defaults for the model say (docs/job-spec.md).
"""

from __future__ import annotations

import random

from shockwave_lab.imports.common import Row
from shockwave_lab.workload.gpu_types import BASE
from shockwave_lab.workload.throughputs import ThroughputTable

REFERENCE = ("ResNet-18", 32)
MODES = ("static", "gns", "accordion")


def parse_mix(text: str) -> dict[str, float]:
    """`static=0.5,gns=0.3,accordion=0.2` -> {mode: share}; ValueError (one line) unless shares of known modes in
    [0, 1] summing to 1."""
    out: dict[str, float] = {}
    for part in text.split(","):
        mode, _, share = part.strip().partition("=")
        mode = mode.strip()
        try:
            x = float(share)
        except ValueError:
            x = -1.0
        if mode not in MODES or mode in out or not 0 <= x <= 1:
            raise ValueError(
                f"--adaptation-mix: expected MODE=SHARE,... with modes {', '.join(MODES)} and shares "
                f"in [0, 1], got {text!r}"
            )
        out[mode] = x
    if abs(sum(out.values()) - 1) > 1e-6:
        raise ValueError(f"--adaptation-mix: shares must sum to 1, got {sum(out.values()):g} in {text!r}")
    return out


def rates(table: ThroughputTable, counts) -> dict[int, dict[int, float]]:
    """{GPU count: {batch size: it/s}} of the reference model at every count in `counts` (profiled, or scaled from
    the largest profiled count below it)."""
    model, bs = REFERENCE
    profiled = table.gpu_counts(model, bs)
    if not profiled or min(profiled) != 1:
        raise ValueError(
            f"{table.source}: no throughput for {model} batch size {bs} on 1 GPU (the imported jobs' reference model)"
        )
    out = {}
    for g in sorted(set(counts)):
        if g in profiled:
            out[g] = table.batch_sizes(model, g)
        else:
            g0 = max(c for c in profiled if c < g)
            out[g] = {b: table.scaled(model, b, g) for b in table.batch_sizes(model, g0)}
    return out


def to_entries(
    rows: list[Row],
    table: ThroughputTable,
    mix: dict[str, float] | None = None,
    seed: int = 0,
    gpu_types: bool = True,
) -> list[dict]:
    """Job-spec entries, in arrival order (arrival = submit - the first job's submit); `preemptible` where the source
    says."""
    if not rows:
        return []
    model, bs = REFERENCE
    speed = rates(table, {int(r.gpus) for r in rows})
    rows = sorted(rows, key=lambda r: (r.submit, r.id))
    first = rows[0].submit
    rng = random.Random(seed)
    weights = [(m, (mix or {"static": 1.0}).get(m, 0.0)) for m in MODES]
    out = []
    for r in rows:
        g = int(r.gpus)
        e = {
            "id": r.id,
            "arrival": float(round(r.submit - first, 3)),
            "model": model,
            "batch_size": bs,
            "gpus": g,
            "mode": _draw(rng, weights) if mix else "static",
            "total_steps": max(1, round(r.runtime * speed[g][bs])),
        }
        if r.user:
            e["user"] = r.user
        if r.account:
            e["account"] = r.account
        if gpu_types and r.gpu_type:
            e["gpu_type"] = r.gpu_type
        if r.preemptible is not None:
            e["preemptible"] = r.preemptible
        out.append(e)
    return out


def _draw(rng: random.Random, weights) -> str:
    x, acc = rng.random(), 0.0
    for mode, w in weights:
        acc += w
        if x < acc:
            return mode
    return next(m for m, w in reversed(weights) if w > 0)


def missing_counts(entries: list[dict], table: ThroughputTable) -> list[int]:
    """GPU counts of the entries the table has no reference-model throughput for."""
    have = table.gpu_counts(*REFERENCE)
    return sorted({e["gpus"] for e in entries} - set(have))


def throughputs_json(entries: list[dict], table: ThroughputTable) -> dict:
    """A Gavel-format throughputs file that runs the entries: the reference model at every batch size the table
    profiles, at every GPU count of the entries, in the v100 column and in one column per GPU type of the entries
    (equal to v100's)."""
    model, _ = REFERENCE
    speed = rates(table, {e["gpus"] for e in entries} | set(table.gpu_counts(*REFERENCE)))
    column = {
        str((f"{model} (batch size {b})", g)): {"null": thr}
        for g, by_bs in speed.items()
        for b, thr in sorted(by_bs.items())
    }
    types = sorted({e["gpu_type"] for e in entries if e.get("gpu_type")} - {BASE})
    return {BASE: column, **{t: dict(column) for t in types}}
