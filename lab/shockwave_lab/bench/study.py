"""The workload study's runs: which policies, the key of a run (its settings' and its code's hashes), one run
written to docs/study/<trace>/<key>.json.  The command is `bench/study.py` (shockwave_lab.bench.study_cli)."""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from shockwave_lab.bench import ROOT

from solver.policies import all_policies, policy_class
from shockwave_lab.simulate import run_simulation
from slurm_shockwave.strict_json import dumps
from shockwave_lab.bench.study_traces import trace_file

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


def study_semantics(policy: str) -> str:
    """The semantics the study's tables run `policy` under (shockwave_lab.simulate.SEMANTICS): ours (solver/policies)
    as the controller runs them (its early rounds and preemption gate: what a site gets), the lab's baselines as
    published (the reference simulator's rounds, every preemption their plan makes, each charged its restart
    penalty: the gate would cut the time-slicing they are built on).  `--semantics reference` runs ours that way
    too (the paper's numbers; what the controller changes)."""
    return "controller" if policy_class(policy).__module__.startswith("solver.") else "reference"


def run_key(policy: str, cfg=None, semantics: str | None = None) -> str:
    semantics = semantics or study_semantics(policy)
    return f"{policy}-{config_hash(settings_of(policy, cfg))}-{code_hash(policy)}-{semantics}"


def run_one(spec, policy: str, cfg, out_dir: Path, tmpdir: Path, force=False, semantics: str | None = None) -> dict:
    semantics = semantics or study_semantics(policy)
    out = out_dir / spec.name / f"{run_key(policy, cfg, semantics)}.json"
    if out.exists() and not force:
        return json.loads(out.read_text())
    trace, thr = trace_file(spec, tmpdir)
    settings = settings_of(policy, cfg)
    t0 = time.perf_counter()
    r = run_simulation(trace, thr, spec.cluster, policy, policy_config=settings, semantics=semantics)
    m = r.metrics
    row = {"trace": spec.name, "policy": policy, "gpus": spec.gpus, "code": code_hash(policy), "semantics": semantics,
           "config": settings.model_dump(mode="json") if settings is not None else None,
           **m.summary(), "rounds": r.rounds, "fallbacks": r.fallbacks, "decided_by": r.decided_by,
           "wall_seconds": round(time.perf_counter() - t0, 2), "decide_seconds": round(r.decide_seconds, 2),
           "load": os.getloadavg()[0], "rho_sorted": sorted(round(x, 4) for x in m.rho),
           "ftf_dynamic_sorted": sorted(round(x, 4) for x in m.ftf_dynamic),
           "finished_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    return save_row(out, row)


def save_row(path: Path, row: dict) -> dict:
    """Write a run's row as `path` atomically (a crash leaves no half file to be taken for a finished run)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(dumps(row, indent=0))
    tmp.replace(path)
    return row
