"""Pollux's realistic workloads (OSDI '21 artifact): `benchmark/workloads-realistic/workload-N.csv` (N = 1..8; the
same files as `simulator/workloads-realistic/`) on the `osdi21-artifact` branch of `petuum/adaptdl`.  Each is 160
jobs over 8 hours drawn from Pollux's Philly table (`pollux-philly`): the job's Philly GPU-time picks an application
(under 1 GPU-hour cifar10 or ncf, 1-10 deepspeech2 or bert, 10-100 yolov3, more imagenet) and the artifact's
`get_configurations` its GPUs and batch size.  The branch has no licence file: the data is not redistributed here;
a user makes the job specs from a clone (`bench/study_elastic.py make`).

Columns (header line): name, time (arrival, seconds), application, num_replicas (GPUs), batch_size (global).  A
row is a job with no run time: its length is its application's, as the artifact trains it (`APPS`: the epochs of
its `simulator/applications.py`, on the dataset of its `simulator/traces/<app>/validation-<init bs>.csv`).

**A job as a job spec** (`to_entries`): the reference model closest in kind (`APPS`), static (the user's batch
size kept), GPUs = num_replicas, batch size = the one the throughputs profile for the model nearest the row's
(log scale; ties to the larger), and a length that takes as long on one GPU as the application does in the
artifact: its `epochs`, each of `samples_per_epoch` = the samples the model processes in (the artifact's 1-GPU
time at its initial batch size / epochs) on one GPU at the profiled batch size nearest that initial batch size.
The length is work, not time: a job on another count or batch size runs at the model's rate there.  Clipped, and
counted: ncf jobs on more than one GPU (Recommendation is profiled on one GPU only) to one GPU; a job larger than
`max_gpus` to `max_gpus` (its work kept).  A GPU count the throughputs lack (16, 32) gets the value of the largest
profiled count below it scaled linearly (`ThroughputTable.scaled`; `throughputs_json` writes it).

`read` (the `trace import --format pollux-workload` path) gives each job as a `Row` whose run time is that job
spec's exclusive time on its GPUs: the generic importer's ResNet-18 stand-in then runs as long.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from shockwave_lab.data_files import THROUGHPUTS
from shockwave_lab.imports.common import Row, Tally, csv_rows, gpus, name, number
from shockwave_lab.workload.errors import WorkloadError
from shockwave_lab.workload.models import steps_per_epoch
from shockwave_lab.workload.throughputs import ThroughputTable

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
TACC = THROUGHPUTS / "tacc_throughputs.json"


@dataclass(frozen=True)
class App:
    """An AdaptDL application as the artifact trains it, and the reference model it maps to (`why`)."""

    model: str
    why: str
    epochs: int  # applications.py max_epochs (no target metric: it trains them all)
    init_bs: int  # its smallest validated batch size
    iterations: int  # validation-<init_bs>.csv: iterations after the last epoch
    step_s: float  # placements.csv, placement "1": one step at init_bs on one GPU (interpolated over local_bsz)

    @property
    def seconds(self) -> float:
        """Its run time on one GPU at its initial batch size in the artifact."""
        return self.iterations * self.step_s


#: artifact commit c793c70 (osdi21-artifact); 1-GPU times: bert 3.78 h, cifar10 1.12 h, ncf 0.40 h, imagenet
#: 147.9 h, deepspeech2 5.40 h, yolov3 9.37 h
APPS = {
    "cifar10": App("ResNet-18", "the same model (ResNet-18 on CIFAR-10)", 100, 128, 39_062, 0.10312),
    "imagenet": App("ResNet-50", "the same model (ResNet-50 on ImageNet)", 90, 200, 576_525, 0.92353),
    "ncf": App("Recommendation", "the reference's recommender (NeuMF on MovieLens-20M)", 10, 256, 194_174, 0.00744),
    "bert": App("Transformer", "its one attention model (BERT fine-tuned on SQuAD)", 2, 12, 14_774, 0.92152),
    "deepspeech2": App(
        "Transformer",
        "sequence model, nearest per-sample cost (29 samples/s: 139, LM 1,361)",
        80,
        20,
        28_536,
        0.6812,
    ),
    "yolov3": App(
        "ResNet-50",
        "vision CNN, nearest per-sample cost (25 samples/s: 170, ResNet-18 923)",
        50,
        8,
        103_444,
        0.32615,
    ),
}


@dataclass(frozen=True)
class Job:
    line: int
    name: str
    time: float
    app: str
    gpus: int
    batch_size: int


def read_jobs(path) -> list[Job]:
    """The rows of a workload CSV; WorkloadError (file:line: field: problem) on bad input."""
    path = Path(path)
    out, seen = [], {}
    for line, cell in csv_rows(path, COLUMNS):
        job_name = name(cell["name"])
        if job_name is None:
            raise WorkloadError(path, line, "name", f"missing: {cell['name']!r}")
        if job_name in seen:
            raise WorkloadError(path, line, "name", f"{job_name!r} already on line {seen[job_name]}")
        seen[job_name] = line
        app = cell["application"].strip()
        if app not in APPS:
            raise WorkloadError(path, line, "application", f"unknown {app!r}: one of {', '.join(APPS)}")
        time = number(path, line, "time", cell["time"])
        whole = {}
        for field in ("num_replicas", "batch_size"):
            x = (
                gpus(path, line, field, cell[field])
                if field == "num_replicas"
                else number(path, line, field, cell[field], hi=1e7, what=" for a batch size")
            )
            if x != int(x) or x < 1:
                raise WorkloadError(path, line, field, f"not a whole number >= 1: {cell[field]!r}")
            whole[field] = int(x)
        out.append(Job(line, job_name, time, app, whole["num_replicas"], whole["batch_size"]))
    return out


def nearest(sizes, want: int) -> int:
    """The size nearest `want` on a log scale (ties: the larger)."""
    return min(sizes, key=lambda b: (abs(math.log2(b / want)), -b))


def _profiled(table: ThroughputTable, model: str) -> list[int]:
    return sorted({g for g in (1, 2, 4, 8, 16, 32, 64) if table.batch_sizes(model, g)})


def to_entries(jobs: list[Job], table: ThroughputTable, max_gpus: int | None = None, tally: Tally | None = None):
    """Job-spec entries in arrival order (arrival = the row's time), clipping counted in `tally`."""
    tally = tally if tally is not None else Tally()
    out = []
    for j in sorted(jobs, key=lambda j: (j.time, j.line)):
        app = APPS[j.app]
        top = _profiled(table, app.model)
        if not top:
            raise ValueError(f"{table.source}: no throughput for {app.model} (application {j.app})")
        g = j.gpus
        if top == [1] and g > 1:
            tally.clip(f"{app.model} runs on 1 GPU only")
            g = 1
        if max_gpus is not None and g > max_gpus:
            tally.clip(f"over {max_gpus} GPUs")
            g = max_gpus
        # a count the profiles lack (6, 12: Sia's workloads) takes the batch sizes of the largest profiled one below
        bs = nearest(table.batch_sizes(app.model, max(c for c in top if c <= g)), j.batch_size)
        b1 = nearest(table.batch_sizes(app.model, 1), app.init_bs)
        samples = app.seconds * table.get(app.model, b1, 1) * b1  # what the model does on 1 GPU in that time
        out.append(
            {
                "id": j.name,
                "arrival": j.time,
                "model": app.model,
                "batch_size": bs,
                "gpus": g,
                "mode": "static",
                "epochs": app.epochs,
                "samples_per_epoch": max(1, round(samples / app.epochs)),
            }
        )
    return out


def exclusive_seconds(entry: dict, table: ThroughputTable) -> float:
    """An entry's run time alone on its GPUs."""
    steps = entry["epochs"] * steps_per_epoch(entry["samples_per_epoch"], entry["batch_size"])
    return steps / table.scaled(entry["model"], entry["batch_size"], entry["gpus"])


def throughputs_json(entries: list[dict], source=TACC) -> dict | None:
    """The Gavel-format file `source` (its v100 column) plus every (model, batch size) of the entries' models at
    each of the entries' counts it lacks (`ThroughputTable.scaled`); None when it lacks none."""
    raw = json.loads(Path(source).read_text())
    table = ThroughputTable.load(source)
    extra = {}
    for model in sorted({e["model"] for e in entries}):
        for g in sorted({e["gpus"] for e in entries if e["model"] == model} - set(_profiled(table, model))):
            for b in table.batch_sizes(model, _profiled(table, model)[-1]):
                extra[str((f"{model} (batch size {b})", g))] = {"null": table.scaled(model, b, g)}
    return {"v100": {**raw["v100"], **extra}} if extra else None


def read(path, tally: Tally) -> list[Row]:
    """The jobs as `Row`s (for `load`): run time = the job spec's exclusive time on its GPUs (TACC throughputs)."""
    table = ThroughputTable.load(TACC)
    entries = to_entries(read_jobs(path), table, tally=tally)
    return [Row(id=e["id"], submit=e["arrival"], runtime=exclusive_seconds(e, table), gpus=e["gpus"]) for e in entries]
