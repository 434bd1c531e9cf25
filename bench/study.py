"""The workload study: every policy on generated traces and the three bundled ones, one Shockwave config.

    nice -n 10 .venv/bin/python bench/study.py run                 # all traces x all policies (resumable)
    nice -n 10 .venv/bin/python bench/study.py run --policies max_min_fairness allox ...   # a subset
    .venv/bin/python bench/study.py report                          # docs/results.md from what has finished
    nice -n 10 .venv/bin/python bench/study.py sweep --set k=1e-3,lambda=12 --set k=1e-4,lambda=25
    nice -n 10 .venv/bin/python bench/study.py heldout             # the held-out traces, Shockwave + baselines

Each run writes docs/study/<trace>/<policy>.json (Shockwave: shockwave-<config hash>.json) as soon as it ends,
and an existing file is not re-run, so an interrupted study resumes where it stopped.  Shockwave always runs
with the built-in ShockwaveConfig() (the one configuration of `simulate` and the controller) unless `sweep`.
The generated traces are re-created from their parameters (`shockwave trace generate` semantics); the sweep
uses its own traces (other seeds), never the study's or the bundled ones.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from solver.policies import all_policies  # noqa: E402
from solver.policies.shockwave import ShockwaveConfig  # noqa: E402
from slurm_shockwave.data_files import THROUGHPUTS, experiment_paths  # noqa: E402
from slurm_shockwave.policy_settings import from_file as settings_from_file  # noqa: E402
from slurm_shockwave.simulate import run_simulation  # noqa: E402
from slurm_shockwave.workload.generate import GeneratorOptions, generate, trace_text  # noqa: E402
from slurm_shockwave.workload.throughputs import ThroughputTable  # noqa: E402

OUT = ROOT / "docs" / "study"
REF_MIX = (0.0, 0.5, 0.5)
REF_GPU_MIX = (0.6, 0.3, 0.09, 0.01)


@dataclass(frozen=True)
class TraceSpec:
    name: str
    gpus: int
    jobs: int = 0
    seed: int = 0
    interarrival: float = 0.0
    mode_mix: tuple = REF_MIX
    gpu_mix: tuple = REF_GPU_MIX
    num_durations: int = 100
    bundled: str = ""                  # a bundled experiment name instead of a generated trace

    def describe(self) -> str:
        if self.bundled:
            return f"bundled `{experiment_paths(self.bundled)['trace'].name}`"
        cmd = (f"shockwave trace generate --jobs {self.jobs} --gpus {self.gpus} --seed {self.seed} "
               f"--interarrival {self.interarrival:g}")
        if self.num_durations != 100:
            cmd += f" --num-durations {self.num_durations}"
        if self.mode_mix != REF_MIX:
            cmd += " --mode-mix " + ",".join(f"{x:.10g}" for x in self.mode_mix)
        if self.gpu_mix != REF_GPU_MIX:
            cmd += " --gpu-mix " + ",".join(f"{x:g}" for x in self.gpu_mix)
        return f"`{cmd}`"


def _g(jobs, gpus, seed, lam, **kw):
    return TraceSpec(f"gen{jobs}j_{gpus}g_s{seed}", gpus, jobs, seed, lam, **kw)


# 10 generated traces, 100-1,000 jobs on 32-256 GPUs; load (jobs per GPU, arrival rate per GPU) and mixes vary
STUDY = [
    _g(100, 32, 1, 40),
    _g(150, 32, 2, 30),
    _g(200, 48, 3, 25),
    _g(250, 64, 4, 20, mode_mix=(1 / 3, 1 / 3, 1 / 3)),
    _g(300, 64, 5, 20),
    _g(400, 96, 6, 15, gpu_mix=(0.4, 0.3, 0.2, 0.1)),
    _g(500, 128, 7, 10),
    _g(600, 128, 8, 10),
    _g(800, 192, 9, 7),
    _g(1000, 256, 10, 5, num_durations=1000),
]
BUNDLED = [TraceSpec("bundled120j_32g", 32, 120, bundled="tacc_32gpus"),
           TraceSpec("bundled220j_64g", 64, 220, bundled="scale_64gpus"),
           TraceSpec("bundled900j_256g", 256, 900, bundled="scale_256gpus")]
# the configuration is chosen on these (other seeds; never on the study's or the bundled traces)
SWEEP = [_g(100, 32, 101, 40), _g(160, 48, 102, 25), _g(240, 64, 103, 20, gpu_mix=(0.4, 0.3, 0.2, 0.1)),
         _g(400, 128, 104, 10)]
ALL = STUDY + BUNDLED
# held out: generated after the configuration and the policy were chosen (issue 12), with harsher or other
# parameters than the study (load up to 9 jobs per GPU, 8-GPU clusters, all GNS, a uniform 1/2/4/8-GPU mix)
HELDOUT = [_g(300, 32, 301, 10), _g(200, 64, 302, 60), _g(400, 64, 303, 15, gpu_mix=(0.25, 0.25, 0.25, 0.25)),
           _g(150, 16, 304, 30, mode_mix=(1 / 3, 1 / 3, 1 / 3)), _g(600, 128, 305, 5), _g(100, 8, 306, 100),
           _g(120, 32, 307, 1), _g(300, 48, 308, 30, mode_mix=(1.0, 0.0, 0.0))]


def baselines() -> list[str]:
    """The policies shown beside Shockwave: the registry's baselines, in its order."""
    return [c.name for c in all_policies() if c.baseline]


def config_hash(cfg: ShockwaveConfig) -> str:
    return hashlib.sha1(json.dumps(cfg.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:8]


def code_hash(shockwave: bool) -> str:
    """Hash of the code a run depends on (the simulator and the policies; Shockwave: all of solver/), so results
    of older code are never mixed in."""
    h = hashlib.sha1()
    files = [*(ROOT / "slurm_shockwave" / "sim").rglob("*.py"), *(ROOT / "solver").rglob("*.py")]
    files = [f for f in files if f.name != "shockwave_config.py"]      # its defaults are in the config hash
    if not shockwave:
        files = [f for f in files if "market" not in f.parts and not f.name.startswith(("shockwave", "predictor"))]
    for f in sorted(files):
        h.update(f.relative_to(ROOT).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:6]


CODE, BASE_CODE = code_hash(True), code_hash(False)


def run_key(policy: str, cfg: ShockwaveConfig | None) -> str:
    return f"shockwave-{config_hash(cfg)}-{CODE}" if policy == "shockwave" else f"{policy}-{BASE_CODE}"


def trace_file(spec: TraceSpec, tmpdir: Path) -> tuple[Path, Path]:
    """(trace path, throughputs path) for a spec; generated traces are written to tmpdir."""
    if spec.bundled:
        p = experiment_paths(spec.bundled)
        return p["trace"], p["throughputs"]
    thr = THROUGHPUTS / "tacc_throughputs.json"
    opts = GeneratorOptions(jobs=spec.jobs, seed=spec.seed, interarrival=spec.interarrival, mode_mix=spec.mode_mix,
                            gpu_mix=spec.gpu_mix, num_durations=spec.num_durations, max_gpus=spec.gpus)
    path = tmpdir / f"{spec.name}.trace"
    if not path.exists():
        path.write_text(trace_text(generate(opts, ThroughputTable.load(thr))))
    return path, thr


def run_one(spec: TraceSpec, policy: str, cfg, out_dir: Path, tmpdir: Path, force=False) -> dict | None:
    out = out_dir / spec.name / f"{run_key(policy, cfg)}.json"
    if out.exists() and not force:
        return json.loads(out.read_text())
    trace, thr = trace_file(spec, tmpdir)
    t0 = time.perf_counter()
    r = run_simulation(trace, thr, spec.gpus, policy, policy_config=cfg if policy == "shockwave" else None)
    m = r.metrics
    row = {"trace": spec.name, "policy": policy, "jobs": m.jobs, "gpus": spec.gpus,
           "code": CODE if policy == "shockwave" else BASE_CODE,
           "config": cfg.to_dict() if policy == "shockwave" else None,
           "makespan": m.makespan, "lower_bound": m.lower_bound, "makespan_over_lb": m.makespan_over_lb,
           "avg_jct": m.avg_jct, "worst_rho": m.worst_rho, "unfair_fraction": m.unfair_fraction,
           "unfair_fraction_1_1": m.unfair_fraction_1_1, "utilization": m.utilization, "rounds": r.rounds,
           "fallbacks": r.fallbacks, "wall_seconds": round(time.perf_counter() - t0, 2),
           "decide_seconds": round(r.decide_seconds, 2), "load": os.getloadavg()[0],
           "rho_sorted": sorted(round(x, 4) for x in m.rho), "finished_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(row, indent=0))
    tmp.replace(out)
    return row


def _parse_set(text: str) -> ShockwaveConfig:
    d = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        d[k.strip()] = json.loads(v)
    return ShockwaveConfig.from_dict({**ShockwaveConfig().to_dict(), **d})


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
    r = sub.add_parser("run", help="run the study (resumable)")
    r.add_argument("--policies", nargs="+", default=["shockwave", *baselines()])
    r.add_argument("--traces", nargs="+", default=None, help="trace names (default: all, smallest first)")
    r.add_argument("--force", action="store_true")
    r.add_argument("--config", default=None, help="Shockwave config file instead of the built-in one")
    s = sub.add_parser("sweep", help="Shockwave configs on the sweep traces")
    s.add_argument("--set", action="append", required=True, help="k=1e-3,lambda=12 (JSON values)")
    s.add_argument("--traces", nargs="+", default=None)
    s.add_argument("--baselines", action="store_true", help="also run the baselines on the sweep traces")
    h = sub.add_parser("heldout", help="Shockwave and the baselines on the held-out traces (resumable)")
    h.add_argument("--traces", nargs="+", default=None)
    sub.add_parser("report", help="write docs/results.md from the finished runs")
    sub.add_parser("list", help="list the traces")
    args = ap.parse_args(argv)
    tmpdir = Path(tempfile.gettempdir()) / f"shockwave-study-{os.getuid()}"
    tmpdir.mkdir(exist_ok=True)
    if args.cmd == "list":
        for spec in ALL + SWEEP + HELDOUT:
            print(spec.name, spec.gpus, spec.describe())
        return
    if args.cmd == "report":
        from study_report import write_report
        print(f"wrote {write_report(ALL, SWEEP, OUT, run_key, HELDOUT)}")
        return
    if args.cmd == "run":
        cfg = settings_from_file("shockwave", args.config) if args.config else ShockwaveConfig()
        specs = sorted(_select(args.traces, ALL), key=lambda s: (s.jobs, s.gpus))
        runs = [(spec, pol, cfg) for pol in args.policies for spec in specs]
        out_dir = OUT
    elif args.cmd == "heldout":
        specs = sorted(_select(args.traces, HELDOUT), key=lambda s: (s.jobs, s.gpus))
        runs = [(spec, pol, ShockwaveConfig() if pol == "shockwave" else None)
                for pol in ["shockwave", *baselines()] for spec in specs]
        out_dir = OUT / "heldout"
    else:
        specs = _select(args.traces, SWEEP)
        cfgs = [_parse_set(t) for t in args.set]
        runs = [(spec, "shockwave", c) for c in cfgs for spec in specs]
        if args.baselines:
            runs += [(spec, pol, None) for pol in baselines() for spec in specs]
        out_dir = OUT / "sweep"
    for spec, pol, cfg in runs:
        row = run_one(spec, pol, cfg, out_dir, tmpdir, force=getattr(args, "force", False))
        knob = f"k_norm={cfg.k_norm:g}" if pol == "shockwave" and cfg.k_norm is not None else \
            f"k={cfg.k:g}" if pol == "shockwave" else ""
        label = run_key(pol, cfg) + (f" {knob} lambda={cfg.lambda_:g}" if pol == "shockwave" else "")
        print(f"{spec.name:20s} {label:40s} mk/LB {row['makespan_over_lb']:.3f} jct {row['avg_jct']:8.0f} "
              f"worst {row['worst_rho']:.3f} unfair {row['unfair_fraction']:5.2f}% ({row['wall_seconds']:.1f} s)",
              flush=True)


if __name__ == "__main__":
    main()
