"""Small workloads and throughput tables for simulator tests."""
from __future__ import annotations

import random
import signal

from shockwave_lab.workload.jobs import JobSpec
from solver.types import ClusterView, JobView
from slurm_shockwave.backends.base import ClusterBackend
from shockwave_lab.workload.throughputs import ThroughputTable
from shockwave_lab.workload import profiles


def table(entries: dict) -> ThroughputTable:
    """{(model, bs, sf): it/s} -> ThroughputTable"""
    return ThroughputTable({(f"{m} (batch size {bs})", sf): thr for (m, bs, sf), thr in entries.items()})


def job(job_id, steps, arrival=0.0, model="ResNet-18", bs=32, gpus=1, mode="static", **kw) -> JobSpec:
    return JobSpec(job_id=job_id, arrival_time=arrival, model=model, initial_bs=bs, num_gpus=gpus, mode=mode,
                   total_steps=steps, max_bs=kw.pop("max_bs", 256), **kw)


def random_workload(seed: int, n: int, max_gpus: int, thr: ThroughputTable):
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1 / 60)
        gpus = rng.choice([g for g in (1, 2, 4, 8) if g <= max_gpus])
        mode = rng.choice(["static", "gns", "accordion"])
        model = rng.choice(["ResNet-18", "LM"])
        bs = {"ResNet-18": 32, "LM": 10}[model]
        jobs.append(JobSpec(job_id=i, arrival_time=round(t), model=model, initial_bs=bs, num_gpus=gpus, mode=mode,
                            total_steps=rng.randint(2000, 30000), max_bs={"ResNet-18": 256, "LM": 80}[model]))
    return profiles.complete(jobs, thr)


def reference_table() -> ThroughputTable:
    from shockwave_lab.data_files import experiment_paths
    return ThroughputTable.load(experiment_paths("tacc_32gpus")["throughputs"])


# ---------------------------------------------------------------- plain views for policy tests
def mkjob(i, g=1, done=0, total=20, d=100.0, bs=32, arrival=0.0, weight=1.0, run_time=0.0):
    return JobView(job_id=i, arrival_time=arrival, num_gpus=g, batch_size=bs, epochs_done=done, total_epochs=total,
                   samples_per_epoch=1000, steps_done=done * 1000 / bs, total_steps=total * 1000 / bs,
                   throughput=1000 / bs / d, epoch_duration_by_bs={bs: d}, bs_history=(bs,) * done,
                   weight=weight, run_time=run_time)


def view(jobs, r=0, G=4, now=None):
    return ClusterView(now=r * 120.0 if now is None else now, round_index=r, round_length=120.0, num_gpus=G,
                       jobs=tuple(jobs))


def assert_import_refused(path, fmt: str, text: str, problem: str) -> None:
    """`shockwave trace import`'s bad-input rule (docs/trace-import.md): `text` in `path` read as `fmt` is refused
    with one line that starts with the file, the row and the field (`problem`)."""
    import pytest

    from shockwave_lab.imports import load
    from slurm_shockwave.loader import InputFileError
    path.write_text(text)
    with pytest.raises(InputFileError) as e:
        load(fmt, path)
    assert str(e.value).startswith(f"{path}{problem}") and "\n" not in str(e.value)


def dispositions(*ignored):
    """A child's preexec_fn: SIGTERM, SIGHUP and SIGINT at their defaults, as a terminal starts a command, but
    `ignored`: the controller and the lab's commands keep a signal ignored at their start ignored, so a test runner
    started under `nohup` or in the background of a script (SIGHUP, SIGINT ignored) must not pass that on to a
    command it signals."""
    def preexec():
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN if s in ignored else signal.SIG_DFL)
    return preexec


class ScriptedViews(ClusterBackend):
    """A backend whose views are a script, one per round; the decisions kept (what a round loop decided on them)."""

    def __init__(self, views):
        self.views, self.decisions = list(views), []

    def observe(self):
        return self.views[len(self.decisions)]

    def apply(self, decision):
        self.decisions.append(decision)

    def advance(self):
        pass

    def done(self):
        return len(self.decisions) == len(self.views)
