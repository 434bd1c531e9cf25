"""Issue 34 part 5: the study of elastic GPU counts (docs/elastic.md).

    nice -n 10 .venv/bin/python bench/study_elastic.py make --workloads DIR    # Pollux's workloads -> job specs
    nice -n 10 .venv/bin/python bench/study_elastic.py run [--workers 2]       # resumable
    .venv/bin/python bench/study_elastic.py report                              # docs/elastic.md

Workloads: Pollux's eight realistic workloads (`imports/pollux_workloads.py`; not redistributable, so `make` writes
their job specs into a directory of the user's, `--data`, default `$SHOCKWAVE_POLLUX_WORKLOADS` or
~/shockwave-public/pollux-workloads, with an index `study_traces.public_specs` reads) on 64 GPUs (Sia's setting), 32
and 16; Sia's ten workloads drawn from Helios's Saturn cluster (SOSP '23; the same format) on 64 GPUs, its setting,
where made (`make --workloads sia-simulator/workloads/saturn --name saturn --sizes 64`); and `GENERATED`, study
traces of light load and contended ones.  Each in three variants (`VARIANTS`): rigid
(no job has a range), every job elastic up to `UP_TO` GPUs (`simulate.elastic_jobs`), and a mix (a seeded half of
the jobs elastic up to `UP_TO`).  Policies: the default and `pollux` on each variant; the other baselines (which
never resize) on the rigid one.  Each under `study.study_semantics`; each run is a file
docs/study-elastic/<trace>/<variant>/<study.run_key>-<hash of the workload code>.json, never re-run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from shockwave_lab.bench import ROOT
from shockwave_lab.bench.study import baselines, code_hash, run_key, study_semantics
from shockwave_lab.bench.study_public import sha256, source_of, write_index
from shockwave_lab.bench.study_traces import ALL, offered_load, public_specs, trace_file
from shockwave_lab.imports.common import Tally
from shockwave_lab.imports.pollux_workloads import TACC, read_jobs, throughputs_json, to_entries
from shockwave_lab.simulate import elastic_jobs, load_workload, run_simulation
from shockwave_lab.workload.throughputs import ThroughputTable
from shockwave_lab.workload.users import spec_text
from slurm_shockwave.strict_json import dumps
from solver.policies import default_policy, policy_class

OUT = ROOT / "docs" / "study-elastic"
DOC = ROOT / "docs" / "elastic.md"
DATA = Path(os.environ.get("SHOCKWAVE_POLLUX_WORKLOADS") or Path.home() / "shockwave-public" / "pollux-workloads")
SIZES = (64, 32, 16)
UP_TO = 8
MIX_SEED = 34
VARIANTS = ("rigid", "all", "mix")
#: study traces (study_traces.py), by offered load: three below 1 and three contended
LIGHT = ("gen300j_64g_s401", "gen400j_32g_s402", "gen150j_16g_s409")
CONTENDED = ("gen100j_32g_s1", "gen200j_16g_s403", "gen200j_32g_s404")
GENERATED = [s for s in ALL if s.name in LIGHT + CONTENDED]
#: what a run depends on beyond study.code_hash: how a workload is loaded, made elastic and imported
WORKLOAD_CODE = [
    ROOT / "lab" / "shockwave_lab" / "simulate.py",
    *sorted((ROOT / "lab" / "shockwave_lab" / "workload").glob("*.py")),
    ROOT / "lab" / "shockwave_lab" / "imports" / "pollux_workloads.py",
]


def make(workloads_dir, data=DATA, sizes=SIZES, prefix: str = "pollux") -> list[dict]:
    """Job specs (and throughputs files where a count is missing) of every workload-N.csv of `workloads_dir` on
    each cluster size, indexed in data/samples.json as <prefix>_wN_<size>g.  A file of Pollux's or Sia's artifact
    (study_public.SOURCES) is named in the index by repository, commit and path."""
    data = Path(data)
    data.mkdir(parents=True, exist_ok=True)
    table = ThroughputTable.load(TACC)
    records = []
    files = sorted(Path(workloads_dir).glob("workload-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
    if not files:
        raise ValueError(f"{workloads_dir}: no workload-N.csv")
    for f in files:
        jobs, digest = read_jobs(f), sha256(f)
        source = source_of(digest, "pollux-workload")
        for size in sizes:
            tally = Tally()
            entries = to_entries(jobs, table, size, tally)
            name = f"{prefix}_w{f.stem.split('-')[1]}_{size}g"
            (data / f"{name}.jsonl").write_text(spec_text(entries))
            thr = throughputs_json(entries)
            if thr is not None:
                (data / f"{name}.throughputs.json").write_text(json.dumps(thr, indent=1) + "\n")
            records.append(
                {
                    "name": name,
                    "file": f"{name}.jsonl",
                    "throughputs": f"{name}.throughputs.json" if thr else None,
                    "gpus": size,
                    "jobs": len(entries),
                    "format": "pollux-workload",
                    "input": f.name,
                    "sha256": digest,
                    "first": 0,
                    "of": len(jobs),
                    "imported": tally.summary(len(entries), f.name),
                    **({"source": source} if source else {}),
                }
            )
    write_index(data, records)
    return records


def traces(data=DATA):
    """Pollux's workloads made in `data` (none: []) and GENERATED."""
    return sorted(public_specs(data), key=lambda s: (-s.gpus, s.name)) + GENERATED


def variant(jobs: list, name: str, seed: int = MIX_SEED) -> list:
    """The jobs of a variant: rigid (as loaded), all (every job elastic up to UP_TO), mix (a seeded half)."""
    if name == "rigid":
        return list(jobs)
    if name == "all":
        return elastic_jobs(jobs, UP_TO)
    if name != "mix":
        raise ValueError(f"unknown variant {name!r}: one of {', '.join(VARIANTS)}")
    pick = set(random.Random(seed).sample(range(len(jobs)), len(jobs) // 2))
    return [elastic_jobs([j], UP_TO)[0] if i in pick else j for i, j in enumerate(jobs)]


def runs(specs, others=None) -> list[tuple]:
    """(spec, policy, variant): the default and pollux on every variant, the other baselines on the rigid one."""
    default = default_policy().name
    others = [p for p in (baselines() if others is None else others) if p not in (default, "pollux")]
    return [(s, p, v) for s in specs for p in (default, "pollux") for v in VARIANTS] + [
        (s, p, "rigid") for s in specs for p in others
    ]


def workload_hash() -> str:
    h = hashlib.sha1()
    for f in WORKLOAD_CODE:
        h.update(f.relative_to(ROOT).as_posix().encode() + f.read_bytes())
    return h.hexdigest()[:6]


def result_path(spec, policy: str, var: str, out=OUT) -> Path:
    return Path(out) / spec.name / var / f"{run_key(policy)}-{workload_hash()}.json"


def run_one(spec, policy: str, var: str, tmpdir: Path, out=OUT, force=False, slurm_starts: bool = False) -> dict:
    """`slurm_starts`: Slurm's own starts between rounds (study_elastic_starts.py)."""
    path = result_path(spec, policy, var, out)
    if path.exists() and not force:
        return json.loads(path.read_text())
    trace, thr = trace_file(spec, tmpdir)
    jobs = variant(load_workload(trace, ThroughputTable.load(thr), spec.gpus), var)
    semantics = study_semantics(policy)
    t0 = time.perf_counter()
    r = run_simulation(jobs, thr, spec.cluster, policy, semantics=semantics, slurm_starts=slurm_starts)
    row = {
        "trace": spec.name,
        "variant": var,
        "policy": policy,
        "gpus": spec.gpus,
        "semantics": semantics,
        **({"slurm_starts": True} if slurm_starts else {}),
        "code": code_hash(policy),
        "workload_code": workload_hash(),
        "elastic_jobs": sum(j.gpus_range is not None for j in jobs),
        **r.metrics.summary(),
        "rounds": r.rounds,
        "wall_seconds": round(time.perf_counter() - t0, 2),
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(dumps(row, indent=0))
    tmp.replace(path)
    return row


def run_all(todo, tmpdir: Path, workers: int = 2, out=OUT, force=False):
    """Every (spec, policy, variant) of `todo` in `workers` processes; yields each row as it ends."""
    if workers <= 1:
        for spec, pol, var in todo:
            yield run_one(spec, pol, var, tmpdir, out, force)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_one, spec, pol, var, tmpdir, out, force) for spec, pol, var in todo]
        for f in as_completed(futures):
            yield f.result()


# ------------------------------------------------------------------ docs/elastic.md
def _get(spec, policy, var, out=OUT):
    p = result_path(spec, policy, var, out)
    return json.loads(p.read_text()) if p.exists() else None


#: (kind, target, policy and variant compared with (None: the same variant), metric, strict)
CHECKS = {
    "light": (("avg JCT <= Pollux's", "pollux", None, "avg_jct", False),
              ("worst dyn. FTF < Pollux's", "pollux", None, "ftf_dynamic_worst", True)),
    "contended": (("makespan <= 1.01 x rigid default's", None, "rigid", "makespan", False),
                  ("worst dyn. FTF <= rigid default's", None, "rigid", "ftf_dynamic_worst", False)),
}  # fmt: skip


def targets(spec, load: float, out=OUT, compared=None) -> tuple[str, list[tuple]]:
    """(kind, [(variant, target, default's value, the compared value, met)]): the issue's targets for the load
    (values None where a run is missing); `compared(policy, variant)`: the run compared with (default: from `out`)."""
    default = default_policy().name
    kind = "light" if load < 1 else "contended"
    rows = []
    for var in VARIANTS[1:]:
        d = _get(spec, default, var, out)
        for name, policy, against, metric, strict in CHECKS[kind]:
            c = (compared or (lambda p, v: _get(spec, p, v, out)))(policy or default, against or var)
            if d is None or c is None:
                rows.append((var, name, None, None, None))
                continue
            digits = 3 if metric == "ftf_dynamic_worst" else 0  # compared as shown: a 1e-6 lead is a tie
            x, y = round(d[metric], digits), round(c[metric], digits)
            limit = 1.01 * y if metric == "makespan" else y
            rows.append((var, name, x, y, x < limit if strict else x <= limit))
    return kind, rows


def _cell(x, y, ok, metric_name: str) -> str:
    if ok is None:
        return "not run"
    fmt = "{:,.0f}" if "FTF" not in metric_name else "{:.3f}"
    return f"{fmt.format(x)} / {fmt.format(y)} {'yes' if ok else '**no**'}"


def _label(policy: str) -> str:
    return policy_class(policy).label


MARK = "<!-- generated below by bench/study_elastic.py report -->"


def write_report(specs, tmpdir: Path, path: Path = DOC, out=OUT) -> Path:
    """Replace what follows MARK in `path` (the hand-written text above it is kept) with the targets' tables, and
    write every workload's table to `<path>-<N>g.md` beside it, one file per cluster size N."""
    default = default_policy().name
    rows, detail = {k: [] for k in CHECKS}, {}
    for spec in specs:
        load = offered_load(spec, tmpdir)
        kind, checks = targets(spec, load, out)
        rows[kind].append((spec, load, checks))
        table = detail.setdefault(spec.gpus, [])
        table += [
            f"### {spec.name}",
            "",
            f"{spec.describe()}; {spec.gpus} GPUs, offered load {load:.2f}.",
            "",
            "| policy | variant | elastic jobs | avg JCT s | makespan s | worst dyn. FTF | p95 dyn. FTF | "
            "restarts / job | worst restarts / h |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for pol, var in (
            [(default, v) for v in VARIANTS]
            + [("pollux", v) for v in VARIANTS]
            + [(p, "rigid") for p in baselines() if p != "pollux"]
        ):
            r = _get(spec, pol, var, out)
            if r is not None:
                table.append(
                    f"| {_label(pol)} | {var} | {r['elastic_jobs']} | {r['avg_jct']:,.0f} | "
                    f"{r['makespan']:,.0f} | {r['ftf_dynamic_worst']:.3f} | {r['ftf_dynamic_p95']:.3f} | "
                    f"{r['restarts_mean']:.2f} | {r['restarts_per_hour_worst']:.2f} |"
                )
        table.append("")
    head = [
        f"Made by `bench/study_elastic.py run` then `report` ({time.strftime('%Y-%m-%d %H:%M')} UTC; per-run JSON "
        f"in `docs/study-elastic/<workload>/<variant>/`; workload code `{workload_hash()}`, default "
        f"`{code_hash(default)}`, Pollux `{code_hash('pollux')}`).",
        "",
    ]
    intro = path.read_text().split(MARK)[0].rstrip() if path.exists() else "# Elastic GPU counts (issue 34)"
    summary = []
    for kind, found in rows.items():
        checked = [ok for *_, checks in found for *_, ok in checks if ok is not None]
        names = [f"{v}: {name}" for v in VARIANTS[1:] for name, *_ in CHECKS[kind]]
        summary += [
            f"**{kind.capitalize()}** ({'offered load < 1' if kind == 'light' else 'offered load >= 1'}): "
            f"{sum(checked)} of {len(checked)} met.  Each cell: the default's value / "
            + ("Pollux's on the same variant." if kind == "light" else "the rigid default's."),
            "",
            "| workload | GPUs | offered load | " + " | ".join(names) + " |",
            "|---|---|---|" + "---|" * len(names),
        ]
        summary += [
            f"| {spec.name} | {spec.gpus} | {load:.2f} | "
            + " | ".join(_cell(x, y, ok, name) for _, name, x, y, ok in checks)
            + " |"
            for spec, load, checks in found
        ]
        summary.append("")
    text = "\n".join(
        [
            intro,
            "",
            MARK,
            "",
            *head,
            "## Targets",
            "",
            *summary,
            "",
            "## Per workload",
            "",
            "Every policy on every workload and variant, by cluster size: "
            + ", ".join(f"`docs/{path.stem}-{g}g.md`" for g in sorted(detail, reverse=True))
            + ".",
        ]
    )
    path.write_text(text.rstrip() + "\n")
    for gpus, table in detail.items():
        title = f"# Elastic GPU counts: the study's workloads on {gpus} GPUs (`docs/{path.name}`)"
        path.with_name(f"{path.stem}-{gpus}g.md").write_text("\n".join([title, "", *head, *table]).rstrip() + "\n")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="Pollux's (or Sia's) workload-N.csv files -> job specs in --data")
    m.add_argument("--workloads", required=True, help="the artifact's benchmark/workloads-realistic directory")
    m.add_argument("--name", default="pollux", help="prefix of the workloads' names (Sia's Saturn ones: saturn)")
    m.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="cluster sizes (GPUs)")
    for name in ("run", "report"):
        p = sub.add_parser(name)
        p.add_argument("--traces", nargs="+", default=None, help="names (default: all)")
        if name == "run":
            p.add_argument("--policies", nargs="+", default=None, help="baselines besides the default and pollux")
            p.add_argument("--workers", type=int, default=2)
            p.add_argument("--force", action="store_true")
    for p in sub.choices.values():
        p.add_argument("--data", default=str(DATA), help="the directory of the Pollux workloads' job specs")
    a = ap.parse_args(argv)
    if a.cmd == "make":
        for r in make(a.workloads, a.data, tuple(a.sizes), a.name):
            print(f"{r['name']}: {r['imported']}")
        return 0
    specs = traces(a.data)
    if a.traces:
        specs = [s for s in specs if s.name in a.traces]
    tmpdir = Path(tempfile.gettempdir()) / f"shockwave-study-{os.getuid()}"
    tmpdir.mkdir(exist_ok=True)
    if a.cmd == "report":
        print(f"wrote {write_report(specs, tmpdir)}")
        return 0
    for r in run_all(runs(specs, a.policies), tmpdir, a.workers, force=a.force):
        print(
            f"{r['trace']:22s} {r['variant']:5s} {r['policy']:20s} jct {r['avg_jct']:9.0f} mk {r['makespan']:9.0f} "
            f"dyn worst {r['ftf_dynamic_worst']:.3f} ({r['wall_seconds']:.1f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
