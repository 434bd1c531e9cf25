"""The workload study: every policy, each with its one built-in configuration, on every study trace.

    nice -n 10 .venv/bin/python bench/study.py run                 # all traces x all policies (resumable)
    nice -n 10 .venv/bin/python bench/study.py run --policies max_min_fairness allox ...   # a subset
    nice -n 10 .venv/bin/python bench/study.py heldout             # the held-out traces, every policy
    nice -n 10 .venv/bin/python bench/study.py typed               # three GPU types (issue 24), every policy
    nice -n 10 .venv/bin/python bench/study.py users               # users and a splitter (issue 24), every policy
    nice -n 10 .venv/bin/python bench/study.py public              # windows of public traces (docs/public-traces.md)
    .venv/bin/python bench/study.py report                          # docs/results.md from what has finished
    nice -n 10 .venv/bin/python bench/study.py sweep --policy shockwave-paper --set lambda=12 --set lambda=25
    .venv/bin/python bench/study.py list                            # the traces, their offered load, how made

Each run writes docs/study/<trace>/<key>.json as soon as it ends (key: policy, hash of its settings, hash of the
code it ran), and an existing file is not re-run, so an interrupted study resumes where it stopped.  Every
policy runs with its built-in configuration (the one of `simulate` and the controller) except in `sweep`, which
uses its own traces (bench/study_traces.py).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from shockwave_lab.bench.study import OUT, baselines, policies, policy_class, run_key, run_one
from shockwave_lab.simulate import SEMANTICS
from shockwave_lab.bench.study_report import write_report
from shockwave_lab.bench.study_traces import ALL, HELDOUT, PUBLIC, SWEEP, TYPED, USERS, listing


def _parse_set(policy: str, text: str):
    d = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        d[k.strip()] = json.loads(v)
    return policy_class(policy).config_model.model_validate(d)


def _select(names, pool):
    if not names:
        return pool
    by = {s.name: s for s in pool}
    bad = [n for n in names if n not in by]
    if bad:
        raise SystemExit(f"unknown trace(s) {bad}; known: {', '.join(by)}")
    return [by[n] for n in names]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, text in (("run", "the study (resumable)"), ("heldout", "the held-out traces (resumable)"),
                       ("typed", "three GPU types (resumable)"), ("users", "users and a splitter (resumable)"),
                       ("public", "windows of public GPU-cluster traces (resumable)")):
        r = sub.add_parser(name, help=text)
        r.add_argument("--policies", nargs="+", default=None, help="default: every policy")
        r.add_argument("--traces", nargs="+", default=None, help="trace names (default: all, smallest first)")
        r.add_argument("--force", action="store_true")
        r.add_argument("--semantics", choices=SEMANTICS, default=None,
                       help="how the loop runs each policy (default: study.study_semantics)")
    s = sub.add_parser("sweep", help="settings of one policy on the sweep traces")
    s.add_argument("--policy", required=True)
    s.add_argument("--set", action="append", required=True, help="lambda=12,k_norm=30 (JSON values)")
    s.add_argument("--traces", nargs="+", default=None)
    s.add_argument("--baselines", action="store_true", help="also run the baselines on the sweep traces")
    sub.add_parser("report", help="write docs/results.md from the finished runs")
    sub.add_parser("list", help="list the traces (name, GPUs, offered load, how they are made)")
    args = ap.parse_args(argv)
    tmpdir = Path(tempfile.gettempdir()) / f"shockwave-study-{os.getuid()}"
    tmpdir.mkdir(exist_ok=True)
    if args.cmd == "list":
        print(listing(tmpdir))
        return
    if args.cmd == "report":
        print(f"wrote {write_report(tmpdir)}")
        return
    if args.cmd in ("run", "heldout", "typed", "users", "public"):
        pool, out_dir = {"run": (ALL, OUT), "heldout": (HELDOUT, OUT / "heldout"), "typed": (TYPED, OUT / "typed"),
                         "users": (USERS, OUT / "users"), "public": (PUBLIC, OUT / "public")}[args.cmd]
        specs = sorted(_select(args.traces, pool), key=lambda s: (s.jobs, s.gpus))
        runs = [(spec, pol, None) for pol in (args.policies or policies()) for spec in specs]
    else:
        specs = _select(args.traces, SWEEP)
        runs = [(spec, args.policy, _parse_set(args.policy, t)) for t in args.set for spec in specs]
        if args.baselines:
            runs += [(spec, pol, None) for pol in baselines() for spec in specs]
        out_dir = OUT / "sweep"
    semantics = getattr(args, "semantics", None)
    for spec, pol, cfg in runs:
        row = run_one(spec, pol, cfg, out_dir, tmpdir, force=getattr(args, "force", False), semantics=semantics)
        print(f"{spec.name:20s} {run_key(pol, cfg, semantics):40s} mk/LB {row['makespan_over_lb']:.3f} "
              f"jct {row['avg_jct']:8.0f} worst {row['worst_rho']:.3f} unfair {row['unfair_fraction']:5.2f}% "
              f"dyn worst {row['ftf_dynamic_worst']:.2f} p95 {row['ftf_dynamic_p95']:.2f} "
              f"({row['wall_seconds']:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
