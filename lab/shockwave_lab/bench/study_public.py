"""The study's samples of real public GPU-cluster traces (issue 35; docs/public-traces.md): windows of ~300
contiguous jobs of a trace, imported with `shockwave trace import`'s readers (shockwave_lab/imports/), each with the
cluster size of a stated rule, written as job-spec JSON Lines plus an index (`samples.json`) that
study_traces.public_specs reads.

    python -m shockwave_lab.bench.study_public build --openb openb_pod_list_default.csv
    python -m shockwave_lab.bench.study_public sample --format pollux-philly --file philly.csv --name philly --out DIR

`build` re-creates the committed samples (lab/shockwave_lab/data/public/) from the file they come from (checked by
SHA-256): only a source whose terms let its data be redistributed is committed (`SOURCES`).  `sample` makes the
same windows of a user's own copy of any trace `trace import` reads (Philly, Helios, Acme, PAI, Alibaba spot, ...)
in a directory of the user's; a file of `SOURCES` is recognised by its SHA-256 and named in the index.

Windows: the jobs a trace's import keeps, in arrival order (arrival, then id); a window is `JOBS` contiguous jobs
starting at a fixed fraction of them (`POSITIONS`: a quarter, half and three quarters of the way; not the first jobs:
openb's first window would start with 10 long-lived pods created up to 115 days before the rest).  Cluster: the
smallest power of two that holds the window's largest job and is at least its **mean demand while its jobs
arrive** (the GPUs its jobs would hold with no queueing, averaged from its first to its last arrival): the queue
then comes from the arrivals' bursts, not from a cluster too small for the window's average.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from shockwave_lab.data_files import DATA, THROUGHPUTS
from shockwave_lab.imports import FORMATS, Rules, load
from shockwave_lab.imports.entries import missing_counts, throughputs_json, to_entries
from shockwave_lab.workload.throughputs import ThroughputTable
from shockwave_lab.workload.users import spec_text

PUBLIC_DIR = DATA / "public"
INDEX = "samples.json"
JOBS = 300
POSITIONS = (0.25, 0.5, 0.75)
TABLE = THROUGHPUTS / "tacc_throughputs.json"


@dataclass(frozen=True)
class Source:
    """A public file the study's windows come from; `committed`: its terms let derived data be redistributed."""

    format: str
    repo: str
    commit: str
    path: str
    sha256: str
    committed: bool


#: name -> a file the study's windows come from (docs/public-traces.md says where each is and under which terms)
SOURCES = {
    "openb": Source(
        "alibaba-openb",
        "alibaba/clusterdata",
        "7a6c496e4f4b6ce6150be8f881cb051bf2abff42",
        "cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv",
        "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8",
        True,  # "You may use trace however you want as long as it is for research or study purpose"
    ),
    "philly": Source(
        "pollux-philly",
        "petuum/adaptdl",
        "de25dcc90c350b8ade3a710e437a651a8d2efae6",
        "simulator/traces/philly.csv",
        "ebffb3dd1589bdf4e7bcd74496201c5ded1d557d498ee14f560463f37ec353da",
        False,  # Philly "as is" (cite ATC '19); the artifact branch has no licence file: not redistributed here
    ),
}


def _workloads(stem: str, repo: str, commit: str, path: str, digests: tuple) -> dict:
    """{<stem>_w<N>: Source} of an artifact's workload-N.csv files (Pollux's format), N from 1, by SHA-256."""
    return {
        f"{stem}_w{i}": Source("pollux-workload", repo, commit, path.format(i), digest, False)
        for i, digest in enumerate(digests, 1)
    }


#: Pollux's (OSDI '21) eight realistic workloads, drawn from Philly (branch osdi21-artifact: no licence file)
SOURCES |= _workloads(
    "pollux",
    "petuum/adaptdl",
    "c793c7089bd307462686339d29707925c461f9a9",
    "benchmark/workloads-realistic/workload-{}.csv",
    (
        "e1650a58264858a1b6a628ffbbc886ed8c94344b407866a71c26ff6a5403ff3c",
        "1c54f55b3ec2577ff1c11977bb923003c9ed5e6823240efb9f1d82c8fa576bed",
        "318d0df8b46c2eaad08249fa8a84786ec4cc6e57bb4cac1340b3bec96926f925",
        "eabbc315b3e7043e3ae9d261d7c3f9d0804e55dec1e139b566075c24705510f1",
        "c45c495ba11251d5b886d2d880476aafcdbd44101e9eb60910440e2020ca6d65",
        "18b9d7d854fa26620a918970c2c3415bf9d4160c5a9b19978e2ddc79a8165d26",
        "4e4abcd9c5c012c619a4f54b89608302c83259069e240286b69654b6b36272df",
        "786745c8c52f457807c6bf0e8fec89eed5dad2808563cdd09006f594494d1cfc",
    ),
)
#: Sia's (SOSP '23) ten workloads drawn from Helios's Saturn cluster (SC '21): arrivals and GPU counts from the trace,
#: each job's length its application's (Pollux's format); the artifact has no licence file: not redistributed here
SOURCES |= _workloads(
    "saturn",
    "siasosp23/artifacts",
    "37c68be73bc2ea5f53c778190d1b88f6c00e7352",
    "sia-simulator/workloads/saturn/workload-{}.csv",
    (
        "0ff89480a7183132b4c40e5853aa632da93a9eee204ea6432a0b46b31615c6ed",
        "cb0fe646907b3862bb418f42d4d52f0a84ab206336ef43a889eb3b730beda1b3",
        "54820fdfd9228b4ec39ee50aa9fd22bcd8681cf9cd411b6cf056ad7a8357ee0c",
        "9cfcb6d8f692d24b10a50cb1777f5ff2e2020062a5d5f7431dff1cf78dc3e722",
        "af385c618966addcba138629e5f23ca381b5ef0b087b3c20caead351be4116cb",
        "a41ca5f26a49e91c35c59db89e326c9489afe9a21e14f260985ac373adf8fae8",
        "216825bca384a97dd10ef46b25c2b14c78c0e3f31c958f40175b00421d764b72",
        "9ea6fc2f1757655d5c0355d618780133cf1b330203c56007e44f171174b231fc",
        "e81fd884d59ce1907a28170323241d8fbbaaddc9abd75d0ea4677711ae03d45b",
        "f7e7d15ddeeaa7198566cded7d0cca528a506e8e503d21bbb0d20c409163b11a",
    ),
)


def source_of(digest: str, fmt: str) -> dict | None:
    """{repo, commit, path} of the file of `SOURCES` with this SHA-256 read as `fmt`; None: not one of them."""
    src = next((src for src in SOURCES.values() if src.sha256 == digest and src.format == fmt), None)
    return {"repo": src.repo, "commit": src.commit, "path": src.path} if src else None


COMMITTED = {k: src for k, src in SOURCES.items() if src.committed}


def window(rows, position: float, jobs: int = JOBS):
    """(index of its first job, the window): `jobs` contiguous jobs in arrival order from `position` of the way
    (the last `jobs` when fewer are left)."""
    if not 0 <= position < 1:
        raise ValueError(f"position must be in [0, 1), got {position!r}")
    rows = sorted(rows, key=lambda r: (r.submit, r.id))
    first = max(0, min(int(position * len(rows)), len(rows) - jobs))
    return first, rows[first : first + jobs]


def mean_demand(rows) -> float:
    """GPUs the rows' jobs would hold with no queueing, averaged over their arrival span (first to last arrival;
    a span of 0: the GPUs of every job)."""
    t0, t1 = min(r.submit for r in rows), max(r.submit for r in rows)
    if t1 <= t0:
        return float(sum(r.gpus for r in rows))
    return sum(r.gpus * (min(r.submit + r.runtime, t1) - r.submit) for r in rows) / (t1 - t0)


def cluster_gpus(rows) -> int:
    """The smallest power of two >= the largest job's GPUs and >= the rows' mean demand."""
    need = max(max(r.gpus for r in rows), mean_demand(rows))
    g = 1
    while g < need:
        g *= 2
    return g


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_samples(
    fmt: str,
    path,
    prefix: str,
    out_dir,
    positions=POSITIONS,
    jobs: int = JOBS,
    tasks=None,
    rules: Rules | None = None,
) -> list[dict]:
    """Write a sample per position to out_dir (`<name>.jsonl`, `<name>.throughputs.json` where the bundled TACC
    table lacks a GPU count) and add them to its index; return their index records."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, tally = load(fmt, path, rules, tasks=tasks)
    digest = sha256(path)
    source = source_of(digest, fmt)
    label = Path(source["path"] if source else path).name
    if len(rows) < jobs:
        raise ValueError(f"{tally.summary(len(rows), label)}: fewer than the {jobs} jobs of a window")
    table = ThroughputTable.load(TABLE)
    records = []
    for pos in positions:
        first, rows_w = window(rows, pos, jobs)
        gpus = cluster_gpus(rows_w)
        name = f"{prefix}_p{round(pos * 100):02d}_{jobs}j_{gpus}g"
        entries = to_entries(rows_w, table)
        (out_dir / f"{name}.jsonl").write_text(spec_text(entries))
        thr = None
        if missing_counts(entries, table):
            thr = f"{name}.throughputs.json"
            (out_dir / thr).write_text(json.dumps(throughputs_json(entries, table), indent=1) + "\n")
        records.append(
            {
                "name": name,
                "file": f"{name}.jsonl",
                "throughputs": thr,
                "gpus": gpus,
                "jobs": len(entries),
                "format": fmt,
                "input": label,
                "sha256": digest,
                "position": pos,
                "first": first,
                "of": len(rows),
                "imported": tally.summary(len(rows), label),
                "mean_demand": round(mean_demand(rows_w), 2),
                "users": sorted({e["user"] for e in entries if "user" in e}),
                "accounts": sorted({e["account"] for e in entries if "account" in e}),
                **({"source": source} if source else {}),
            }
        )
    write_index(out_dir, records)
    return records


def read_index(directory) -> list[dict]:
    """The sample records of a directory's index (none: [])."""
    p = Path(directory) / INDEX
    return json.loads(p.read_text()) if p.exists() else []


def write_index(directory, records: list[dict]) -> None:
    """Add records to the index (a record of the same name is replaced), sorted by name."""
    by = {r["name"]: r for r in read_index(directory)} | {r["name"]: r for r in records}
    (Path(directory) / INDEX).write_text(json.dumps([by[k] for k in sorted(by)], indent=1) + "\n")


def build(files: dict, out_dir=PUBLIC_DIR) -> list[dict]:
    """The committed samples from {source name: its file} (the `committed` SOURCES), each file checked against
    its SHA-256."""
    records = []
    for key, path in files.items():
        src = SOURCES[key]
        got = sha256(path)
        if got != src.sha256:
            raise ValueError(f"{path}: SHA-256 {got}, not that of {src.repo}@{src.commit[:7]}:{src.path}")
        records += make_samples(src.format, path, key, out_dir)
    return records


def _positions(text: str) -> tuple:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected fractions such as 0.25,0.5, got {text!r}") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="study_public", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="re-create the committed samples from their source files")
    for key, src in COMMITTED.items():
        b.add_argument(f"--{key}", required=True, metavar="FILE", help=f"{src.repo}@{src.commit[:7]}:{src.path}")
    b.add_argument("--out", default=str(PUBLIC_DIR), help="directory (default: the committed samples')")
    s = sub.add_parser("sample", help="windows of your own copy of a public trace, for the study")
    s.add_argument("--format", required=True, choices=list(FORMATS))
    s.add_argument("--file", required=True)
    s.add_argument("--tasks", default=None, help="with --format pai: pai_task_table.csv")
    s.add_argument("--out", required=True, help="directory of your samples (its samples.json lists them)")
    s.add_argument("--name", default=None, help="prefix of the samples' names (default: the format's)")
    s.add_argument("--positions", type=_positions, default=POSITIONS, help="fractions where windows start")
    s.add_argument("--jobs", type=int, default=JOBS, help="jobs per window")
    s.add_argument("--fractional", choices=("round-up", "drop"), default="round-up")
    a = ap.parse_args(argv)
    from slurm_shockwave.loader import InputFileError

    try:
        if a.cmd == "build":
            records = build({key: getattr(a, key) for key in COMMITTED}, a.out)
        else:
            prefix = a.name or a.format.replace("-", "_")
            records = make_samples(
                a.format, a.file, prefix, a.out, a.positions, a.jobs, a.tasks, Rules(fractional=a.fractional)
            )
    except (InputFileError, ValueError, OSError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    for r in records:
        print(
            f"{r['name']}: jobs {r['first']}-{r['first'] + r['jobs'] - 1} of the {r['of']} {r['format']} jobs, "
            f"{r['gpus']} GPUs (mean demand {r['mean_demand']:g}); {r['imported']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
