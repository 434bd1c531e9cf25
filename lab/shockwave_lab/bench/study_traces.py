"""The study's workloads: generated traces (re-created from their parameters with `shockwave trace generate`
semantics) and the three bundled reference traces.

* STUDY: 10 generated traces, 100-1,000 jobs on 32-256 GPUs (load and mixes vary), made for issue 12;
* BUNDLED: the reference's 120-, 220- and 900-job traces;
* SHAPES: 9 traces of shapes the study had none of (issue 21): long arrival spans with bursts, mostly 1-GPU jobs
  with a few 8-GPU gangs, 16-GPU clusters at 90%+ offered load;
* SWEEP: other seeds, where configurations were chosen (never the study's, the shapes' or the bundled traces);
* HELDOUT: generated after the configuration and the default policy were fixed (issue 12), harsher parameters;
* TYPED: study traces on clusters of three GPU types (V100, P100, K80, as Gavel's experiments; issue 24);
* USERS: study traces with users, one of whom splits each job into many (issue 24);
* PUBLIC: windows of real public traces with their accounts (issue 35; bench/study_public.py,
  docs/public-traces.md): Alibaba's 2023 GPU pods (committed), a user's own (Philly, Helios, ...) where made.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from shockwave_lab.bench.study_public import PUBLIC_DIR, read_index
from shockwave_lab.data_files import THROUGHPUTS, experiment_paths
from shockwave_lab.simulate import load_workload
from shockwave_lab.workload.generate import GeneratorOptions, generate, trace_text
from shockwave_lab.workload.throughputs import ThroughputTable
from shockwave_lab.workload.users import spec_text, with_users

REF_MIX = (0.0, 0.5, 0.5)
REF_GPU_MIX = (0.6, 0.3, 0.09, 0.01)
GANGS = (0.92, 0.0, 0.0, 0.08)                # mostly 1-GPU jobs, a few 8-GPU gangs


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
    burst: tuple = ()                  # (jobs per burst, seconds between bursts)
    bundled: str = ""                  # a bundled experiment name instead of a generated trace
    types: tuple = ()                  # ((GPU type, GPUs), ...): a cluster of several types (`gpus` their sum)
    users: int = 0                     # > 0: a job spec with users (workload/users.py; `--users`)
    splitter: int = 0                  # with users: the first user splits each job into this many
    spec_file: str = ""                # a job spec of a public trace's window (study_public: its samples.json)

    @property
    def cluster(self):
        """`run_simulation`'s num_gpus: the GPU count, or {type: GPUs}."""
        return dict(self.types) if self.types else self.gpus

    def describe(self) -> str:
        text = self._describe()
        if self.types:
            text += " on `--gpus " + ",".join(f"{t}:{n}" for t, n in self.types) + "`"
        return text

    def _describe(self) -> str:
        if self.spec_file:
            r = _sample_record(self)
            where = (f"{r['source']['repo']}@{r['source']['commit'][:7]}:{r['source']['path']}" if "source" in r
                     else r["input"])
            return (f"jobs {r['first']}-{r['first'] + r['jobs'] - 1} of the {r['of']} `{r['format']}` jobs of "
                    f"{where}, `{Path(self.spec_file).name}`")
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
        if self.burst:
            cmd += f" --burst {self.burst[0]},{self.burst[1]:g}"
        if self.users:
            cmd += f" --users {self.users}" + (f" --splitter {self.splitter}" if self.splitter else "")
        return f"`{cmd}`"


def _g(jobs, gpus, seed, lam, **kw):
    return TraceSpec(f"gen{jobs}j_{gpus}g_s{seed}", gpus, jobs, seed, lam, **kw)


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
SHAPES = [
    _g(300, 64, 401, 30, burst=(50, 4 * 3600)),          # 6 bursts over 20 hours
    _g(400, 32, 402, 20, burst=(40, 3 * 3600)),          # 10 bursts over 27 hours
    _g(200, 16, 403, 60, burst=(25, 2 * 3600)),          # 8 bursts on 16 GPUs
    _g(200, 32, 404, 30, gpu_mix=GANGS),
    _g(400, 64, 405, 15, gpu_mix=GANGS),
    _g(120, 16, 406, 480),                               # 16 GPUs, offered load 0.9-1.1 (see `list`)
    _g(160, 16, 407, 460),
    _g(100, 16, 408, 300, mode_mix=(1 / 3, 1 / 3, 1 / 3)),
    _g(150, 16, 409, 320, gpu_mix=GANGS),
]

def _typed(spec: TraceSpec, **types) -> TraceSpec:
    return replace(spec, name=f"{spec.name}_" + "-".join(f"{n}{t}" for t, n in types.items()),
                   types=tuple(types.items()))


def _users(spec: TraceSpec, users: int, splitter: int) -> TraceSpec:
    return replace(spec, name=f"{spec.name}_u{users}s{splitter}", users=users, splitter=splitter)


# Gavel's simulated clusters have the three types; sizes here keep each study trace's GPU count, fastest type first
TYPED = [_typed(BUNDLED[0], v100=16, p100=8, k80=8), _typed(STUDY[0], v100=16, p100=8, k80=8),
         _typed(STUDY[1], v100=8, p100=8, k80=16), _typed(STUDY[2], v100=16, p100=16, k80=16),
         _typed(STUDY[4], v100=32, p100=16, k80=16)]
USERS = [_users(STUDY[0], 4, 4), _users(STUDY[1], 8, 4), _users(STUDY[2], 4, 8)]
SWEEP = [_g(100, 32, 101, 40), _g(160, 48, 102, 25), _g(240, 64, 103, 20, gpu_mix=(0.4, 0.3, 0.2, 0.1)),
         _g(400, 128, 104, 10)]
ALL = STUDY + BUNDLED + SHAPES
HELDOUT = [_g(300, 32, 301, 10), _g(200, 64, 302, 60), _g(400, 64, 303, 15, gpu_mix=(0.25, 0.25, 0.25, 0.25)),
           _g(150, 16, 304, 30, mode_mix=(1 / 3, 1 / 3, 1 / 3)), _g(600, 128, 305, 5), _g(100, 8, 306, 100),
           _g(120, 32, 307, 1), _g(300, 48, 308, 30, mode_mix=(1.0, 0.0, 0.0))]


def public_specs(directory=PUBLIC_DIR) -> list[TraceSpec]:
    """The samples of a directory's samples.json (study_public `build` / `sample`) as study traces."""
    return [TraceSpec(r["name"], r["gpus"], r["jobs"], spec_file=str(Path(directory).resolve() / r["file"]))
            for r in read_index(directory)]


def users_samples(dirs: str | None) -> list[TraceSpec]:
    """The samples of each directory of `dirs` (separated by os.pathsep, as in PATH; None or empty: none)."""
    return [s for d in (dirs or "").split(os.pathsep) if d for s in public_specs(d)]


#: the committed samples, and a user's own (`study_public sample --out DIR`) in the directories that
#: SHOCKWAVE_PUBLIC_SAMPLES names
PUBLIC = public_specs() + users_samples(os.environ.get("SHOCKWAVE_PUBLIC_SAMPLES"))


def _sample_record(spec: TraceSpec) -> dict:
    path = Path(spec.spec_file)
    return next(r for r in read_index(path.parent) if r["file"] == path.name)


def trace_file(spec: TraceSpec, tmpdir: Path) -> tuple[Path, Path]:
    """(trace path, throughputs path) for a spec; generated traces are written to tmpdir (with users: a job spec);
    a public trace's sample is its committed file, with its throughputs file where it has one."""
    if spec.spec_file:
        path, thr = Path(spec.spec_file), _sample_record(spec)["throughputs"]
        return path, (path.parent / thr if thr else THROUGHPUTS / "tacc_throughputs.json")
    if spec.users:
        thr = THROUGHPUTS / "tacc_throughputs.json"
        path = tmpdir / f"{spec.name}.jsonl"
        if not path.exists():
            path.write_text(spec_text(with_users(generate(_options(spec), ThroughputTable.load(thr)), spec.users,
                                                 spec.seed, spec.splitter)))
        return path, thr
    if spec.bundled:
        p = experiment_paths(spec.bundled)
        return p["trace"], p["throughputs"]
    thr = THROUGHPUTS / "tacc_throughputs.json"
    path = tmpdir / f"{spec.name}.trace"
    if not path.exists():
        path.write_text(trace_text(generate(_options(spec), ThroughputTable.load(thr))))
    return path, thr


def _options(spec: TraceSpec) -> GeneratorOptions:
    return GeneratorOptions(jobs=spec.jobs, seed=spec.seed, interarrival=spec.interarrival, mode_mix=spec.mode_mix,
                            gpu_mix=spec.gpu_mix, num_durations=spec.num_durations, max_gpus=spec.gpus,
                            burst_size=spec.burst[0] if spec.burst else 0,
                            burst_gap=spec.burst[1] if spec.burst else 0.0)


def offered_load(spec: TraceSpec, tmpdir: Path) -> float:
    """GPU-seconds of work (each job's duration at its initial batch size x its GPUs) over GPUs x the arrival
    span (the first to the last arrival): above 1 the cluster cannot keep up while jobs arrive."""
    if spec.spec_file:                                                  # a job spec: its jobs' exclusive times
        trace, thr = trace_file(spec, tmpdir)
        jobs = load_workload(trace, ThroughputTable.load(thr), spec.gpus)
        work = sum(j.isolated_runtime * j.num_gpus for j in jobs)
        arrivals = [j.arrival_time for j in jobs]
    else:
        trace, _thr = trace_file(replace(spec, users=0, splitter=0), tmpdir)     # users do not change the work
        rows = [line.split("\t") for line in trace.read_text().splitlines() if line.strip()]
        work = sum(float(r[10]) * int(r[6]) for r in rows)
        arrivals = [float(r[11]) for r in rows]
    span = max(arrivals) - min(arrivals)
    return work / (spec.gpus * span) if span > 0 else float("inf")


def listing(tmpdir: Path) -> str:
    return "\n".join(json.dumps({"name": s.name, "gpus": s.gpus, "load": round(offered_load(s, tmpdir), 3),
                                 "describe": s.describe()})
                     for s in ALL + SWEEP + HELDOUT + TYPED + USERS + PUBLIC)
