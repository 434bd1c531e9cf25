"""Issue 36's two changes to the default, each alone, on the study's and the held-out traces (docs/ablation-36.md):

    nice -n 10 .venv/bin/python -m shockwave_lab.bench.study_ablation [--jobs 2]

Variants, all as the controller runs the default (early rounds, the preemption gate): *F-bar order, no bound*
(the order before the issue, rounds_per_restart 0), *F-bar order + restart bound*, *latest fair start, no bound*,
*both* (today's default).  The F-bar order is the default with Shockwave's fair-finish deadline arrival + F-bar
instead of the latest fair start (a measuring subclass, here only).  Means over the traces and the targets met
(docs/results.md's, against the baselines' study runs)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from solver.policies.shockwave_edf import ShockwaveEDF
from shockwave_lab.bench import ROOT
from shockwave_lab.bench.study import OUT, baselines, run_key
from shockwave_lab.bench.study_traces import ALL, HELDOUT, trace_file
from shockwave_lab.simulate import run_simulation, semantics_settings


class FbarOrder(ShockwaveEDF):
    """The default with Shockwave's fair-finish deadline (arrival + F-bar) as its order: the order before issue 36."""

    name = "shockwave-edf-fbar"
    label = "EDF (F-bar order)"
    default = False

    def _fill_order(self, view, est, r):
        latest = self.entitlement.latest_starts
        self.entitlement.latest_starts = lambda v, total, rem: self._due(v, r)
        try:
            return super()._fill_order(view, est, r)
        finally:
            self.entitlement.latest_starts = latest


VARIANTS = {"F-bar order, no bound": ("shockwave-edf-fbar", 0), "F-bar order + restart bound": ("shockwave-edf-fbar", None),
            "latest fair start, no bound": ("shockwave-edf", 0), "both (the default)": ("shockwave-edf", None)}
KEYS = ("makespan_over_lb", "avg_jct", "ftf_dynamic_worst", "ftf_dynamic_p95", "restarts_mean", "restarts_per_hour_worst")


def _one(args) -> dict:
    spec, out_dir, variant = args
    policy, bound = VARIANTS[variant]
    trace, thr = trace_file(spec, Path(tempfile.gettempdir()) / f"shockwave-study-{os.getuid()}")
    s = semantics_settings("controller", 120.0, "shockwave-edf")
    s["rounds_per_restart"] = s["rounds_per_restart"] if bound is None else bound
    m = run_simulation(trace, thr, spec.cluster, policy, **s).metrics.summary()
    base = {p: json.loads((out_dir / spec.name / f"{run_key(p)}.json").read_text()) for p in baselines()}
    best = min(r["ftf_dynamic_worst"] for r in base.values())
    slurm = base["slurm-multifactor"]
    met = {"makespan <= 1.10 x LB": m["makespan_over_lb"] <= 1.10, "avg JCT < Slurm's": m["avg_jct"] < slurm["avg_jct"],
           "worst dyn. FTF <= 1.05 x best baseline's": m["ftf_dynamic_worst"] <= 1.05 * best,
           "<= 3 restarts per hour": m["restarts_per_hour_worst"] <= 3.0}
    return {"trace": spec.name, "variant": variant, **{k: m[k] for k in KEYS}, "met": met}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "docs" / "ablation-36.md"))
    args = ap.parse_args(argv)
    work = [(s, OUT, v) for v in VARIANTS for s in ALL] + [(s, OUT / "heldout", v) for v in VARIANTS for s in HELDOUT]
    t0 = time.time()
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(_one, work))
    lines = ["# Issue 36's changes to the default, each alone", "",
             f"Made by `nice -n 10 .venv/bin/python -m shockwave_lab.bench.study_ablation --jobs {args.jobs}` "
             f"({platform.machine()}, {time.strftime('%Y-%m-%d %H:%M')}, {time.time() - t0:.0f} s, load average "
             f"{os.getloadavg()[0]:.1f}) on the study's {len(ALL)} and the {len(HELDOUT)} held-out traces; every "
             "variant as the controller runs the default; the baselines are the study's runs (docs/results.md).", "",
             "| variant | mean makespan/LB | mean avg JCT s | mean worst dyn. FTF | mean p95 dyn. FTF | mean restarts / "
             "job | mean worst restarts / h | " + " | ".join(rows[0]["met"]) + " |", "|---" * (7 + len(rows[0]["met"])) + "|"]
    for v in VARIANTS:
        rs = [r for r in rows if r["variant"] == v]
        means = [sum(r[k] for r in rs) / len(rs) for k in KEYS]
        lines.append(f"| {v} | {means[0]:.3f} | {means[1]:,.0f} | {means[2]:.3f} | {means[3]:.3f} | {means[4]:.2f} | "
                     f"{means[5]:.2f} | " + " | ".join(f"{sum(r['met'][t] for r in rs)}/{len(rs)}" for t in rs[0]["met"])
                     + " |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
