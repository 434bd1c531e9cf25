"""SlurmBackend built through its public constructor with typed fakes: `FakeSlurm` implements the SlurmCLI methods
the backend calls (its reads return the SlurmJobs and SlurmNodes it is given, its updates are recorded), the journal
is a real StateStore and the event store a real EventReader in a temporary directory; `sent` reads back the actions
the backend enacted, in order, from the journal."""
from __future__ import annotations

import json
import os
from pathlib import Path

from slurm_shockwave.controller.config import ControllerConfig, WeightsSection
from slurm_shockwave.events.reader import EventReader
from slurm_shockwave.events.writer import EventWriter
from slurm_shockwave.journal.store import StateStore
from slurm_shockwave.slurm.backend import SlurmBackend
from slurm_shockwave.slurm.enact import Action
from slurm_shockwave.slurm.errors import SlurmError
from slurm_shockwave.slurm.models import SlurmJob, SlurmNode

HIGH = 1000


def slurm_job(job_id: int, state: str = "PENDING", **fields) -> SlurmJob:
    """A managed job of partition "gpu" (comment "shockwave"), 1 GPU, with `fields` changed."""
    base = dict(job_id=job_id, name=f"job{job_id}", user="ana", user_id=None, account="", partition="gpu",
                state=state, state_reason="", gpus=1, gpus_per_node=1, num_nodes=1, nodes="", priority=1, nice=0,
                submit_time=1, eligible_time=None, start_time=None, end_time=None, restart_count=0,
                comment="shockwave", requeue=True, held=False, site_factor=None, command="", working_dir="",
                std_out="", std_err="", time_limit=None)
    return SlurmJob(**{**base, **fields})


def slurm_node(name: str, by_type: dict, features=(), partitions=("gpu",), state="idle") -> SlurmNode:
    return SlurmNode(name=name, state=state, state_flags=(), gpus=sum(by_type.values()), gpus_used=0, cpus=4,
                     alloc_cpus=0, partitions=tuple(partitions), reason="", address="", port=None,
                     by_type=tuple(by_type.items()), features=tuple(features))


class FakeSlurm:
    """The SlurmCLI methods SlurmBackend calls.  `jobs`/`nodes` are what Slurm shows (change them between rounds);
    `calls` the updates it was asked for."""

    def __init__(self, jobs=(), nodes=(), version: str = "24.11"):
        self.jobs: list[SlurmJob] = list(jobs)
        self.nodes: list[SlurmNode] = list(nodes)
        self.slurm_version = version
        self.answering = False
        self.timeout, self.env, self.bin_dir = 30.0, {}, None
        self.calls: list[tuple] = []

    def squeue_jobs(self, job_ids=None, states=None, with_site_factor: bool = False,
                    incremental: bool = False) -> list[SlurmJob]:
        return [j for j in self.jobs if (job_ids is None or j.job_id in set(job_ids)) and
                (states is None or j.state in set(states))]

    def sinfo_nodes(self) -> list[SlurmNode]:
        return list(self.nodes)

    def run(self, argv, env=None, **kw):
        raise SlurmError(f"`{' '.join(argv)}`: not in the fake", cmd=list(argv), returncode=1)

    def scontrol_update(self, job_ids, **fields) -> None:
        self.calls.append(("update", list(job_ids), fields))

    def scontrol_update_each(self, job_ids, **fields) -> None:
        self.calls.append(("update_each", list(job_ids), fields))

    def scontrol_update_jobs(self, updates) -> dict[int, str]:
        self.calls.append(("update_jobs", [(j, dict(f)) for j, f in updates], {}))
        return {}

    def pending_ids(self, job_ids) -> set[int]:
        return {j.job_id for j in self.jobs if j.job_id in {int(x) for x in job_ids} and j.state == "PENDING"}

    def hold(self, job_ids) -> None:
        self.calls.append(("hold", list(job_ids), {}))

    def release(self, job_ids) -> None:
        self.calls.append(("release", list(job_ids), {}))

    def requeue(self, job_ids, hold: bool = False) -> None:
        self.calls.append(("requeue", list(job_ids), {"hold": hold}))

    def signal(self, job_ids, sig, scope: str = "batch") -> None:
        self.calls.append(("signal", list(job_ids), {"sig": sig, "scope": scope}))


def fake_backend(root: Path, jobs=(), nodes=(), *, mode: str = "advisory", version: str = "24.11",
                 clock=lambda: 10.0, sleep=lambda s: None) -> SlurmBackend:
    """A SlurmBackend on a FakeSlurm, its journal and event store under `root`."""
    cfg = ControllerConfig(state_dir=str(root / "state"), event_store=str(root / "events"), partition="gpu",
                           mode=mode, round_seconds=60.0, site_factor=HIGH, grace_seconds=30.0, min_run_seconds=0.0,
                           weights=WeightsSection(from_slurm=False))
    (root / "events").mkdir(parents=True, exist_ok=True)
    return SlurmBackend(FakeSlurm(jobs, nodes, version), cfg, StateStore(cfg.state_path), EventReader(cfg.event_store),
                        clock=clock, sleep=sleep)


def report(backend: SlurmBackend, job_id: int, kind: str = "start", **fields) -> None:
    """An event of the job's wrapper in the backend's event store (the job's user must be this one)."""
    EventWriter.for_job(backend.cfg.event_store, str(job_id)).emit(kind, **fields)


def me() -> int:
    return os.geteuid()


def sent(backend: SlurmBackend) -> list[Action]:
    """The actions the backend enacted (journalled intent first), in order: one per run of journal rows of the
    same round, verb and value."""
    out: list[tuple] = []
    for row in reversed(backend.state.actions()):
        key = (row["round"], row["verb"], row["value"])
        if out and out[-1][0] == key:
            out[-1][1].append(int(row["job_id"]))
        else:
            out.append((key, [int(row["job_id"])]))
    return [Action(verb, tuple(ids), json.loads(value)) for (_r, verb, value), ids in out]
