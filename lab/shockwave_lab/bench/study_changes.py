"""docs/results.md's before-and-after table of issue 36: the default's code before the issue's changes (its study
runs are kept under their code hash) under the reference's semantics and as the controller ran it, and today's
code as the controller runs it, on every trace of the study and the held-out ones."""
from __future__ import annotations

import json
from pathlib import Path

from solver.policies import default_policy
from shockwave_lab.bench.study import run_key

#: the default's code hash at commit 0dc59fe, before the restart bound and the latest fair start (issue 36)
BEFORE_CODE = "ba3d69"
CHANGES_TEXT = (
    "Issue 36 measured on the whole study: *before, reference*: the default's code before the issue under the "
    "reference simulator's semantics (what the earlier tables showed); *before, controller*: the same code as the "
    "controller runs it (early rounds, the preemption gate); *after*: today's code as the controller runs it (the "
    "gate's restart bound, at most one preemption per 10 rounds of a job's run; the latest fair start as the "
    "fair-finish deadline).  Means over the traces at the end.")
METRICS = (("makespan_over_lb", "makespan/LB", "{:.3f}"), ("avg_jct", "avg JCT s", "{:,.0f}"),
           ("ftf_dynamic_worst", "worst dyn. FTF", "{:.3f}"), ("ftf_dynamic_p95", "p95 dyn. FTF", "{:.3f}"),
           ("restarts_mean", "restarts / job", "{:.2f}"), ("restarts_per_hour_worst", "worst restarts / h", "{:.2f}"))


def _runs(trace_dir: Path) -> dict:
    name = default_policy().name
    before = run_key(name).rsplit("-", 2)[0] + f"-{BEFORE_CODE}"
    keys = {"before, reference": f"{before}-reference", "before, controller": f"{before}-controller",
            "after": run_key(name)}
    return {label: json.loads((trace_dir / f"{k}.json").read_text())
            for label, k in keys.items() if (trace_dir / f"{k}.json").exists()}


def changes_section(groups: list[tuple[list, Path]]) -> list[str]:
    """`groups`: (trace specs, the directory of their runs) per part of the study."""
    lines = [CHANGES_TEXT, "", "| trace | run | " + " | ".join(m[1] for m in METRICS) + " |",
             "|---" * (2 + len(METRICS)) + "|"]
    sums: dict = {}
    for specs, out in groups:
        for spec in specs:
            runs = _runs(out / spec.name)
            if len(runs) < 3:                          # judged only where all three ran
                continue
            for label, r in runs.items():
                lines.append(f"| {spec.name} | {label} | "
                             + " | ".join(fmt.format(r.get(k, 0.0)) for k, _, fmt in METRICS) + " |")
                acc = sums.setdefault(label, [0, [0.0] * len(METRICS)])
                acc[0] += 1
                acc[1] = [a + r.get(k, 0.0) for a, (k, _, _) in zip(acc[1], METRICS)]
    for label, (n, totals) in sums.items():
        lines.append(f"| **mean of {n}** | {label} | "
                     + " | ".join(fmt.format(t / n) for t, (_, _, fmt) in zip(totals, METRICS)) + " |")
    return lines + [""]
