"""The workload study: every policy, each with its one built-in configuration, on every study trace.

    nice -n 10 .venv/bin/python bench/study.py run                 # all traces x all policies (resumable)
    nice -n 10 .venv/bin/python bench/study.py run --policies max_min_fairness allox ...   # a subset
    nice -n 10 .venv/bin/python bench/study.py heldout             # the held-out traces, every policy
    nice -n 10 .venv/bin/python bench/study.py typed               # three GPU types (issue 24), every policy
    nice -n 10 .venv/bin/python bench/study.py users               # users and a splitter (issue 24), every policy
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
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from shockwave_lab.bench import ROOT

from solver.policies import all_policies, policy_class
from shockwave_lab.simulate import run_simulation
from slurm_shockwave.strict_json import dumps
from shockwave_lab.bench.study_traces import ALL, HELDOUT, SWEEP, TYPED, USERS, listing, trace_file

OUT = ROOT / "docs" / "study"


def policies() -> list[str]:
    """Every registered policy, in the registry's order (the default first)."""
    return [c.name for c in all_policies()]


def baselines() -> list[str]:
    """The policies a site would pick instead of ours: the registry's baselines, in its order."""
    return [c.name for c in all_policies() if c.baseline]


def settings_of(policy: str, cfg=None):
    """The settings a run uses: `cfg`, else the policy's built-in ones (None: it has none)."""
    model = policy_class(policy).config_model
    return cfg if cfg is not None else (model() if model is not None else None)


def config_hash(cfg) -> str:
    if cfg is None:
        return "none"
    return hashlib.sha1(json.dumps(cfg.model_dump(), sort_keys=True, default=str).encode()).hexdigest()[:8]


LAB = ROOT / "lab" / "shockwave_lab"
#: where a policy's modules live: the product's Shockwave policies and their base, the lab's baselines
POLICY_DIRS = {"solver.policies": ROOT / "solver" / "policies", "shockwave_lab.baselines": LAB / "baselines"}
#: what every run depends on: the simulator, the loop, the metrics, the decision core outside the policies
COMMON = [*(LAB / "sim").rglob("*.py"), LAB / "metrics.py", LAB / "workload" / "gpu_types.py",
          ROOT / "slurm_shockwave" / "controller" / "loop.py", *(ROOT / "solver").glob("*.py"),
          *(ROOT / "solver" / "market").glob("*.py"), *(POLICY_DIRS["solver.policies"] / f for f in ("base.py", "registry.py"))]


def policy_files(policy: str) -> set[Path]:
    """The policy's module and every policy module it imports (of solver/policies/ or the lab's baselines),
    transitively (read with ast)."""
    import ast
    import inspect
    todo, seen = [Path(inspect.getfile(policy_class(policy)))], set()
    while todo:
        f = todo.pop()
        if f in seen or not f.exists():
            continue
        seen.add(f)
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                package, _, name = node.module.rpartition(".")
                if package in POLICY_DIRS:
                    todo.append(POLICY_DIRS[package] / f"{name}.py")
                elif node.module in POLICY_DIRS:
                    todo += [POLICY_DIRS[node.module] / f"{a.name}.py" for a in node.names]
    return seen


def code_hash(policy: str) -> str:
    """Hash of the code a run of `policy` depends on, so results of older code are never mixed in (and a new
    policy does not make the others run again); its settings are in the key on their own."""
    h = hashlib.sha1()
    for f in sorted(set(COMMON) | policy_files(policy)):
        h.update((f.relative_to(ROOT) if f.is_relative_to(ROOT) else Path(f.name)).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:6]


def run_key(policy: str, cfg=None) -> str:
    return f"{policy}-{config_hash(settings_of(policy, cfg))}-{code_hash(policy)}"


def run_one(spec, policy: str, cfg, out_dir: Path, tmpdir: Path, force=False) -> dict:
    out = out_dir / spec.name / f"{run_key(policy, cfg)}.json"
    if out.exists() and not force:
        return json.loads(out.read_text())
    trace, thr = trace_file(spec, tmpdir)
    settings = settings_of(policy, cfg)
    t0 = time.perf_counter()
    r = run_simulation(trace, thr, spec.cluster, policy, policy_config=settings)
    m = r.metrics
    row = {"trace": spec.name, "policy": policy, "gpus": spec.gpus, "code": code_hash(policy),
           "config": settings.model_dump(mode="json") if settings is not None else None,
           **m.summary(), "rounds": r.rounds, "fallbacks": r.fallbacks, "decided_by": r.decided_by,
           "wall_seconds": round(time.perf_counter() - t0, 2), "decide_seconds": round(r.decide_seconds, 2),
           "load": os.getloadavg()[0], "rho_sorted": sorted(round(x, 4) for x in m.rho),
           "ftf_dynamic_sorted": sorted(round(x, 4) for x in m.ftf_dynamic),
           "finished_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(dumps(row, indent=0))
    tmp.replace(out)
    return row


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
                       ("typed", "three GPU types (resumable)"), ("users", "users and a splitter (resumable)")):
        r = sub.add_parser(name, help=text)
        r.add_argument("--policies", nargs="+", default=None, help="default: every policy")
        r.add_argument("--traces", nargs="+", default=None, help="trace names (default: all, smallest first)")
        r.add_argument("--force", action="store_true")
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
        from study_report import write_report
        print(f"wrote {write_report(tmpdir)}")
        return
    if args.cmd in ("run", "heldout", "typed", "users"):
        pool, out_dir = {"run": (ALL, OUT), "heldout": (HELDOUT, OUT / "heldout"), "typed": (TYPED, OUT / "typed"),
                         "users": (USERS, OUT / "users")}[args.cmd]
        specs = sorted(_select(args.traces, pool), key=lambda s: (s.jobs, s.gpus))
        runs = [(spec, pol, None) for pol in (args.policies or policies()) for spec in specs]
    else:
        specs = _select(args.traces, SWEEP)
        runs = [(spec, args.policy, _parse_set(args.policy, t)) for t in args.set for spec in specs]
        if args.baselines:
            runs += [(spec, pol, None) for pol in baselines() for spec in specs]
        out_dir = OUT / "sweep"
    for spec, pol, cfg in runs:
        row = run_one(spec, pol, cfg, out_dir, tmpdir, force=getattr(args, "force", False))
        print(f"{spec.name:20s} {run_key(pol, cfg):40s} mk/LB {row['makespan_over_lb']:.3f} "
              f"jct {row['avg_jct']:8.0f} worst {row['worst_rho']:.3f} unfair {row['unfair_fraction']:5.2f}% "
              f"dyn worst {row['ftf_dynamic_worst']:.2f} p95 {row['ftf_dynamic_p95']:.2f} "
              f"({row['wall_seconds']:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
