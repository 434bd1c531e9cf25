"""What the replay submits: one emulated job per trace job, with everything the job and the simulator share.

A trace job (workload/jobs.py JobSpec, completed with its schedule by simulate.load_workload) becomes a
`ReplayJob`: its batch size for every epoch (`profiles.schedule_of`: the GNS doubling schedule or Accordion's
critical regimes, exactly what the simulator's job follows), its epoch duration in trace seconds at each of
those batch sizes on its GPUs (samples / bs / throughput, the simulator's own formula), its GPUs, arrival and
user (round robin over `users`).  The emulated program (replay/emujob.py) sleeps each epoch's duration
divided by the time scale; the simulator runs the same JobSpecs.

An elastic job (`JobSpec.gpus_range`, set by `shockwave replay --elastic N` as `simulate --elastic N` sets it) also
carries its epoch duration at each batch size on each GPU count the simulator offers it (`epoch_s_by_gpus`: the
profiled counts within its range, from the same table) and declares its range in its comment (`gpus=MIN-MAX`; its
`--gres` stays its own count) and its profile at its first batch size (`speedup=2x1.55/...`, as a researcher who
profiled the job would: the controller's knowledge of a count it has not run on); on a cluster of several GPU types
each job declares its speed on each type the same way (`speed=v100x1.000/k80x0.312`).  `check_counts` refuses a job
the controller could give a count the table has no throughput for, or deny one the simulator offers (the
controller's counts divide the batch and fit a node: slurm/resize.py `counts`).

A job whose spec says `preemptible: false` (`shockwave replay --no-requeue-every N`) is submitted with `--no-requeue`:
the controller never preempts, resizes or moves it once it runs, and the simulator pins it the same way
(solver/pinned.py).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from shockwave_lab.workload import profiles
from shockwave_lab.workload.jobs import JobSpec


@dataclass(frozen=True)
class ReplayJob:
    index: int                    # the trace job's id (its line in the trace)
    name: str
    user: str
    model: str
    mode: str                     # static | gns | accordion
    gpus: int
    arrival_s: float              # trace seconds
    samples: int
    schedule: tuple[int, ...]     # batch size of every epoch
    epoch_s: dict = field(default_factory=dict)   # batch size -> epoch duration in trace seconds on `gpus`
    isolated_s: float = 0.0       # exclusive run time (the FTF denominator, as the simulator's)
    max_bs: int = 0               # the largest batch size it declares (JobSpec.declared_max_bs, as the simulator's
    #                               view shows it: not where its schedule happens to stop); 0 = its schedule's
    gpus_range: tuple[int, int] | None = None     # elastic: the counts it declares (None: rigid)
    epoch_s_by_gpus: dict = field(default_factory=dict)  # elastic: batch size -> {GPUs: epoch trace seconds}
    requeue: bool = True          # False: submitted with --no-requeue (its spec's `preemptible: false`)
    # several GPU types (`shockwave replay --gpu-types`): batch size -> {type: epoch trace seconds on `gpus`}, and the
    # type of each node (the program sleeps its node type's duration: the simulator's throughput on that type)
    epoch_s_by_type: dict = field(default_factory=dict)
    node_types: dict = field(default_factory=dict)

    @property
    def declared_max_bs(self) -> int:
        return max(self.max_bs, *self.schedule)

    @property
    def epochs(self) -> int:
        return len(self.schedule)

    @property
    def work_s(self) -> float:
        """Trace seconds of work under its schedule (what the emulated program sleeps, times the scale)."""
        return sum(self.epoch_s[bs] for bs in self.schedule)

    def time_limit_min(self, time_scale: float, factor: float) -> int:
        """The user's time limit (`sbatch --time`, minutes): `factor` x the job's run time alone at its first batch
        size (every epoch at it: the longest its schedule can take), in wall time; on a cluster of several types, on
        the slowest (a run may do all its work there: one did, and ran out of time, in a typed replay)."""
        import math
        bs = self.schedule[0]
        epoch = max([self.epoch_s[bs], *self.epoch_s_by_type.get(bs, {}).values()])
        return max(1, math.ceil(factor * self.epochs * epoch / time_scale / 60.0))

    def comment(self, time_scale: float) -> str:
        """The managed job's hints (slurm/hints.py): what a researcher would declare, in wall seconds."""
        rng = f" gpus={self.gpus_range[0]}-{self.gpus_range[1]}" if self.gpus_range else ""
        return (f"shockwave epochs={self.epochs} bs={self.schedule[0]} min_bs={min(self.schedule)} "
                f"max_bs={self.declared_max_bs} samples={self.samples} "
                f"epoch_s={self.epoch_s[self.schedule[0]] / time_scale:.4f}{rng}{self.speedup_hint()}{self.speed_hint()}")

    def speedup_hint(self) -> str:
        """An elastic job's profile at its first batch size, as a researcher who profiled it declares it
        (``speedup=2x1.55/...``: its speed on each other count as a multiple of its speed on its own)."""
        at = {int(n): s for n, s in (self.epoch_s_by_gpus.get(self.schedule[0]) or {}).items()}
        own = at.get(self.gpus)
        others = sorted((int(n), own / s) for n, s in at.items() if int(n) != self.gpus and s > 0) if own else []
        return " speedup=" + "/".join(f"{n}x{f:.3f}" for n, f in others) if others else ""

    def speed_hint(self) -> str:
        """On a cluster of several GPU types, its speed on each type at its first batch size relative to its fastest,
        as a researcher who profiled it declares it (``speed=v100x1.000/k80x0.312``, slurm/hints.py)."""
        at = {t: s for t, s in (self.epoch_s_by_type.get(self.schedule[0]) or {}).items() if s > 0}
        best = min(at.values(), default=0.0)
        return " speed=" + "/".join(f"{t}x{best / s:.3f}" for t, s in sorted(at.items())) if len(at) > 1 else ""

    def spec(self, time_scale: float) -> dict:
        """The emulated program's input (a JSON file next to the job's work directory)."""
        return {"name": self.name, "epochs": self.epochs, "schedule": list(self.schedule),
                "epoch_s": {str(k): v for k, v in self.epoch_s.items()}, "samples": self.samples,
                "time_scale": time_scale, "min_bs": min(self.schedule), "max_bs": self.declared_max_bs,
                "epoch_s_by_gpus": _str_keys(self.epoch_s_by_gpus),
                "epoch_s_by_type": _str_keys(self.epoch_s_by_type), "node_types": dict(self.node_types)}

    def to_json(self) -> dict:
        d = asdict(self)
        d["epoch_s"] = {str(k): v for k, v in self.epoch_s.items()}
        d["epoch_s_by_gpus"] = _str_keys(self.epoch_s_by_gpus)
        d["epoch_s_by_type"] = _str_keys(self.epoch_s_by_type)
        return d


def _str_keys(by: dict) -> dict:
    return {str(bs): {str(n): v for n, v in at.items()} for bs, at in by.items()}


def users(n: int, prefix: str = "swreplay") -> list[str]:
    return [f"{prefix}-u{i + 1}" for i in range(max(1, n))]


def plan_jobs(specs: list[JobSpec], throughputs, user_names: list[str], tables=None, node_types=None) -> list[ReplayJob]:
    """One ReplayJob per JobSpec (in arrival order), users assigned round robin; `tables` ({type: table}) and
    `node_types` ({node: type}): a cluster of several GPU types (each job's epoch durations on each type)."""
    out = []
    for i, s in enumerate(sorted(specs, key=lambda s: (s.arrival_time, s.job_id))):
        sched = tuple(profiles.schedule_of(s))
        durations = {}
        for bs in sorted(set(sched)):
            thr = throughputs.get(s.model, bs, s.num_gpus) or throughputs.get(s.model, s.initial_bs, s.num_gpus)
            durations[bs] = s.samples / bs / thr
        by_gpus = {}
        if s.gpus_range is not None:            # the simulator's counts (sim/cluster.py `_gpu_counts`)
            lo, hi = s.gpus_range
            by_gpus = {bs: {n: s.samples / bs / thr for n, thr in throughputs.gpu_counts(s.model, bs).items()
                            if lo <= n <= hi and thr} for bs in sorted(set(sched))}
        by_type = {bs: {t: s.samples / bs / _thr(tab, s, bs) for t, tab in (tables or {}).items()}
                   for bs in sorted(set(sched))} if tables else {}
        out.append(ReplayJob(index=int(s.job_id), name=f"t{int(s.job_id):03d}", user=user_names[i % len(user_names)],
                             model=s.model, mode=s.mode, gpus=s.num_gpus, arrival_s=float(s.arrival_time),
                             samples=s.samples, schedule=sched, epoch_s=durations,
                             isolated_s=float(s.isolated_runtime), max_bs=s.declared_max_bs,
                             gpus_range=tuple(s.gpus_range) if s.gpus_range else None, epoch_s_by_gpus=by_gpus,
                             requeue=s.preemptible is not False, epoch_s_by_type=by_type,
                             node_types=dict(node_types or {})))
    return out


def _thr(table, s: JobSpec, bs: int) -> float:
    """The job's throughput at `bs` on its gang in `table` (at its first batch size where `bs` is not profiled);
    ValueError where neither is (the controller could place it on that type, the simulator could not)."""
    thr = table.get(s.model, bs, s.num_gpus) or table.get(s.model, s.initial_bs, s.num_gpus)
    if not thr:
        raise ValueError(f"job {s.job_id} ({s.model}, {s.num_gpus} GPU(s)): no throughput on a GPU type of the cluster")
    return thr


def check_counts(jobs: list[ReplayJob], node_gpus: int) -> None:
    """ValueError unless every elastic job may run on the same counts on both sides at every batch size of its
    schedule: the controller's (its range's counts that divide the batch and fit one node of `node_gpus`; the replay
    runs each job on one node) and the simulator's (the profiled ones, each with an epoch duration here)."""
    from slurm_shockwave.slurm.resize import counts
    bad = []
    for j in jobs:
        if j.gpus_range is None:
            continue
        if j.gpus_range[1] > node_gpus:
            bad.append(f"{j.name}: range {j.gpus_range[0]}-{j.gpus_range[1]} beyond a node's {node_gpus} GPUs")
            continue
        for bs, at in sorted(j.epoch_s_by_gpus.items()):
            controller = counts(j.gpus_range, j.gpus, bs, node_gpus, 1)
            if controller != sorted(at):
                bad.append(f"{j.name} ({j.model}, batch {bs}): the controller's counts {controller}, the profiled "
                           f"ones {sorted(at)}")
    if bad:
        raise ValueError("elastic jobs whose GPU counts differ between Slurm and the simulator:\n  "
                         + "\n  ".join(bad[:10]))


def with_users(specs: list[JobSpec], jobs: list[ReplayJob]) -> list[JobSpec]:
    """The JobSpecs with the replay's users (the simulator's per-user figures use them)."""
    import dataclasses
    by = {j.index: j.user for j in jobs}
    return [dataclasses.replace(s, user=by.get(int(s.job_id), s.user)) for s in specs]


def write_spec(path: Path, job: ReplayJob, time_scale: float) -> None:
    path.write_text(json.dumps(job.spec(time_scale)))
