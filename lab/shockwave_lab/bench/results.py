"""Every policy on the bundled reference experiments, ours next to the reference's shipped numbers.

    .venv/bin/python bench/results.py                       # 120 jobs / 32 GPUs
    .venv/bin/python bench/results.py --experiments tacc_32gpus scale_64gpus scale_256gpus --out table.md

Writes docs/results_<experiment>.json (the full results, input for `shockwave report`) and, with --out, a
markdown table.  Every policy runs with its built-in configuration (the one configuration for every workload)
plus, with --reference-config, a shockwave-paper row with the reference's own config file for the experiment.
docs/results.md itself is written by bench/study.py (generated + bundled traces).
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from shockwave_lab.bench import ROOT

from solver.policies import all_policies, policy_class
from shockwave_lab.data_files import CONFIGS, REFERENCE_RESULTS, experiment_paths
from slurm_shockwave.policy_settings import from_file as settings_from_file
from shockwave_lab.simulate import run_simulation
from slurm_shockwave.strict_json import dumps

REFERENCE_CONFIG = "_reference_config"          # the key suffix of the Shockwave row with the reference's config


def reference_rows():
    data = json.loads((REFERENCE_RESULTS / "shipped_result_pickles_summary.json").read_text())
    return {v["policy"]: v for k, v in data.items()
            if k.startswith("tacc_32gpus/") and "old_" not in k and "new_orig" not in k}


def run_experiment(name, policies, reference_config=False):
    p = experiment_paths(name)
    runs = []
    for pol in policies:
        runs.append((pol, pol, None))                  # each policy's built-in configuration
        if policy_class(pol).reference_name == "shockwave" and reference_config:
            runs.append((pol + REFERENCE_CONFIG, pol, settings_from_file(pol, p["reference_config"])))
    out = {}
    for key, pol, cfg in runs:
        t0 = time.perf_counter()
        r = run_simulation(p["trace"], p["throughputs"], p["gpus"], pol, policy_config=cfg)
        out[key] = r
        m = r.metrics
        print(f"{name} {key:26s} makespan {m.makespan:9.0f} jct {m.avg_jct:8.0f} worst {m.worst_rho:.3f} "
              f"unfair {m.unfair_fraction:5.2f}% ({time.perf_counter() - t0:.1f} s)", flush=True)
    return p, out


def table(name, p, results, ref):
    lines = [f"### {name}: `{p['trace'].name}`, {p['gpus']} GPUs, `{p['throughputs'].name}`, every policy with its "
             f"built-in configuration (reference config row: `configs/{p['reference_config'].relative_to(CONFIGS)}`)",
             "",
             "| policy | makespan s | avg JCT s | worst rho | unfair % (rho>1.05) | unfair % (rho>1.1) | util | "
             "reference makespan | reference JCT | reference worst rho | reference unfair % | "
             "makespan vs ref | JCT vs ref | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pol, r in results.items():
        m = r.metrics
        cls = policy_class(pol.removesuffix(REFERENCE_CONFIG))
        label = cls.label + (", reference config" if pol.endswith(REFERENCE_CONFIG) else "")
        rv = ref.get(cls.reference_name) if ref else None
        refcols = (f"{rv['makespan']:,.0f} | {rv['avg_jct']:,.0f} | {rv['worst_ftf']:.3f} | "
                   f"{rv['unfair_fraction_pct_gt1.05']:.2f} | {m.makespan / rv['makespan'] - 1:+.2%} | "
                   f"{m.avg_jct / rv['avg_jct'] - 1:+.2%}") if rv else "- | - | - | - | - | -"
        lines.append(f"| {label} (`{pol}`) | {m.makespan:,.0f} | {m.avg_jct:,.0f} | {m.worst_rho:.3f} | "
                     f"{m.unfair_fraction:.2f} | {m.unfair_fraction_1_1:.2f} | {m.utilization:.3f} | {refcols} | "
                     f"{r.wall_seconds:.1f} |")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiments", nargs="+", default=["tacc_32gpus"])
    ap.add_argument("--policies", nargs="+",
                    default=[c.name for c in all_policies() if c.default or c.baseline or c.reference_name == "shockwave"])
    ap.add_argument("--out", default=None, help="also write a markdown table here")
    ap.add_argument("--reference-config", action="store_true",
                    help="add a Shockwave row with the reference's config file for the experiment")
    args = ap.parse_args(argv)
    ref = reference_rows()
    body = ["# Results", "",
            "Made by `.venv/bin/python bench/results.py --experiments " + " ".join(args.experiments) + "` on "
            f"{platform.machine()} / Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}.",
            "Reference columns: the result pickles shipped in the Shockwave repository "
            "(`reproduce/pickles/tacc_32gpus`, Gurobi/ECOS runs); the 220- and 900-job experiments have no "
            "shipped results.  Metrics as defined in the reference (rho uses the static contention factor "
            "max(1, N_trace / GPUs)).", ""]
    for name in args.experiments:
        p, results = run_experiment(name, args.policies, args.reference_config)
        body += table(name, p, results, ref if name == "tacc_32gpus" else None) + [""]
        (ROOT / "docs" / f"results_{name}.json").write_text(dumps(
            {"workload": str(p["trace"].name), "gpus": p["gpus"], "round_length": 120.0,
             "results": {n: r.to_json() for n, r in results.items()},
             "reference": {k: {
                 "makespan": v["makespan"], "avg_jct": v["avg_jct"], "worst_rho": v["worst_ftf"],
                 "unfair_fraction": v["unfair_fraction_pct_gt1.05"], "utilization": v["cluster_util"]}
                 for k, v in ref.items()} if name == "tacc_32gpus" else {}}, default=str))
    if args.out:
        Path(args.out).write_text("\n".join(body) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
