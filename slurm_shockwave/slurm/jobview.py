"""The job view of one round on Slurm: managed jobs as JobViews, unmanaged jobs of the partition as fixed
capacity (running) and demand (pending), and the per-round snapshot that `status` and `explain` read.

* Arrival: a job's FIRST submit time (the state keeps it); Slurm moves `submit_time` on every requeue, and a
  preempted job must not lose its place in fair-share targets, rho-hat or FIFO order.
* Epoch durations before the job has reported an epoch, best first: its own events; the `epoch_s=` hint; the
  history of finished jobs of the same user and program (job name) per batch size; its time limit spread
  over its epochs (an upper bound); the round length.  Each source carries a confidence shown to users.
* Priority classes in Slurm while the controller runs: planned managed jobs (released, SiteFactor high) >
  unmanaged jobs (Slurm's own multifactor order) > deferred managed jobs (held).  Unmanaged running jobs
  shrink the managed capacity until their end (estimated from their time limit).
* Checkpoint signal (`job_signal`): the job's own, read from its submission: its ``signal=`` hint, else its
  ``--signal`` where Slurm shows it (26.05's submit line), else USR2 to the steps of a job submitit submitted
  (its script ``--signal=USR2@90``, which no Slurm version shows); else the configured one to the batch shell.
"""

from __future__ import annotations

import logging
import math
import os
import re
from typing import Any

from slurm_shockwave.journal.context import JobContext, Unmanaged, UnmanagedJob
from slurm_shockwave.journal.record import SHORT_HISTORY
from slurm_shockwave.slurm.hints import checkpoint_signal
from slurm_shockwave.slurm.models import FINISHED_STATES, SlurmJob, in_partition
from solver.types import JobView

log = logging.getLogger("slurm_shockwave.slurm")

#: confidence of each source of epoch durations
SOURCES = {"events": "high", "hint": "medium", "history": "medium", "time_limit": "low", "default": "low"}
#: a job submitit submitted: its batch script as sbatch got it (``<folder>/.submission_file_<hex>.sh``) or its output
#: (``<folder>/%j_%t_log.out`` of task 0, expanded or not); it checkpoints on USR2 in its steps (``SUBMITIT_SIGNAL``)
_SUBMITIT = re.compile(r"(?:^|/)(?:\.submission_file_[0-9a-f]+\.sh|(?:\d+|%j|(?:\d+|%A)_(?:\d+|%a))_0_log\.out)\Z")
SUBMITIT_SIGNAL = "USR2"


def job_signal(job, marker: dict, default: str) -> tuple[str, str | None]:
    """(the checkpoint signal its preemption sends, ``B:NAME`` or ``NAME``; a note for status or None): see the module
    docstring; a signal that would kill the job is refused for ``default`` (hints.checkpoint_signal)."""
    own = marker.get("signal") or getattr(job, "signal", "")
    return checkpoint_signal(own or (SUBMITIT_SIGNAL if is_submitit(job) else None), default)


def is_submitit(job) -> bool:
    """submitit submitted it (its batch script or its task 0's output, `_SUBMITIT`)."""
    return any(_SUBMITIT.search(getattr(job, k, "") or "") for k in ("command", "std_out"))


def left_to_slurm(job, no_requeue: str) -> str | None:
    """Why a job the site's `controller.no_requeue = "leave"` leaves to Slurm is not planned; None to plan it."""
    if no_requeue == "leave" and not job.requeue:
        return 'submitted with --no-requeue: this site leaves such jobs to Slurm (controller.no_requeue = "leave")'
    return None


def program_of(job) -> str:
    """What "the same program" means for the ETA history: the job name, else the batch script's name."""
    return job.name or os.path.basename(job.command or "") or "?"


class RunEnds:
    """When a round first saw each running job's run end in its events while Slurm still showed it RUNNING ((job,
    restart count) -> time; enact.py `RUN_END_S`).  Slurm hears of such an end from slurmstepd's retries once slurmctld
    answers again, so after a read of the queue that failed (`reading` without `answered`) every window starts anew."""

    def __init__(self) -> None:
        self.first: dict = {}
        self._reading = False

    def reading(self) -> None:
        if self._reading:  # the read before never answered
            self.first = {}
        self._reading = True

    def answered(self) -> None:
        self._reading = False

    def keep(self, job_ids) -> None:
        self.first = {k: t for k, t in self.first.items() if k[0] in job_ids}

    def ended_for(self, job, progress, now: float) -> float | None:
        """Seconds since a round first saw this job's run end (None: it runs on, or Slurm does not show it RUNNING)."""
        if job.state != "RUNNING" or not progress.run_ended(job.restart_count):
            return None
        return now - self.first.setdefault((job.job_id, job.restart_count), now)


def arrival_of(job, first_submit: dict, now: float) -> float:
    """The job's first submit time: the stored one when it is earlier than Slurm's (moved by a requeue)."""
    live = float(job.submit_time) if job.submit_time else None
    stored = first_submit.get(str(job.job_id))
    cands = [t for t in (stored, live) if t]
    return min(cands) if cands else now


def epoch_durations(p, marker: dict, job, total: int, bs: int, history: dict, round_length: float):
    """({batch size: seconds per epoch}, source, detail) from the best source available."""
    durations = dict(p.epoch_duration_by_bs)
    if durations:
        return durations, "events", f"{p.epochs_done} epoch(s) observed"
    if marker.get("epoch_s"):
        return {bs: float(marker["epoch_s"])}, "hint", "epoch_s= hint"
    if history:
        hist = {b: d for b, (d, _n) in history.items()}
        n = sum(n for _d, n in history.values())
        if bs not in hist:  # nearest batch size, scaled by the steps per epoch (same samples per epoch)
            near = min(hist, key=lambda b: abs(math.log(b / bs)))
            hist[bs] = hist[near]
        return hist, "history", f"{n} epoch(s) of finished jobs of this user and program"
    if job.time_limit:
        return (
            {bs: max(1.0, job.time_limit * 60.0 / max(total, 1))},
            "time_limit",
            f"time limit {job.time_limit} min over {total} epochs (an upper bound)",
        )
    return {bs: float(round_length)}, "default", "no information: one round per epoch"


def build(
    job: SlurmJob,
    marker: dict,
    p,
    now: float,
    *,
    round_length: float,
    weight: float,
    arrival: float,
    history: dict,
    gpu_type: str | None = None,
    preempt_signal: str = "USR1",
) -> tuple[JobView, JobContext]:
    """(JobView, context) of one managed job; the context is what status/explain show beside the view.  `gpu_type`:
    the type it must be placed on (its user's pin, or the type it runs on: slurm/gpu_types.py); `preempt_signal`: the
    configured checkpoint signal (a job's own that would kill it is refused for it, with a warning)."""
    bs = p.batch_size or marker.get("bs") or 1
    samples = p.samples_per_epoch or marker.get("samples") or bs
    total = p.total_epochs or marker.get("epochs") or max(p.epochs_done + 1, 1)
    durations, source, detail = epoch_durations(p, marker, job, total, bs, history, round_length)
    epoch_s = durations.get(bs) or (sum(durations.values()) / len(durations))
    spe = math.ceil(samples / bs)
    throughput = spe / epoch_s if epoch_s > 0 else 1.0
    view = JobView(
        job_id=job.job_id,
        arrival_time=arrival,
        num_gpus=max(job.gpus, 1),
        batch_size=bs,
        epochs_done=p.epochs_done,
        total_epochs=total,
        samples_per_epoch=samples,
        steps_done=p.epochs_done * spe,
        total_steps=total * spe,
        throughput=throughput,
        epoch_duration_by_bs=durations,
        bs_history=tuple(p.bs_per_epoch),
        user=job.user,
        account=job.account,
        weight=weight,
        mode="unknown",
        job_type=job.name,
        min_batch_size=p.min_batch_size or marker.get("min_bs"),
        max_batch_size=p.max_batch_size or marker.get("max_bs"),
        ran_last_round=job.state == "RUNNING",
        preemptible=bool(job.requeue),  # --no-requeue: no requeue can stop and bring it back (solver/pinned.py)
        gpu_type=gpu_type,
        restarts=int(job.restart_count or 0),
        run_time=sum(
            durations.get(b, epoch_s) * n
            for b, n in (
                p.bs_runs  # O(runs)
                or [(b, 1) for b in p.bs_per_epoch]
            )
        ),
    )
    warnings = []
    if not job.requeue:
        warnings.append(
            "submitted with --no-requeue: once it runs it is never preempted, resized or moved (before, it is "
            "only held or released)"
        )
    refused = job_signal(job, marker, preempt_signal)[1]
    if refused:
        warnings.append(refused)
    for key, c in (p.hint_conflicts or {}).items():
        warnings.append(
            f"hint {key}={c.get('hint')} disagrees with the job's report {c.get('reported')} (the report is used)"
        )
    meta = JobContext(
        slurm_state="HELD" if job.held else job.state,
        name=job.name,
        program=program_of(job),
        submit_time=arrival,
        slurm_submit_time=job.submit_time,
        time_limit_min=job.time_limit,
        start_time=job.start_time,
        restarts=job.restart_count,
        eta_source=source,
        eta_confidence=SOURCES[source],
        eta_detail=detail,
        warnings=tuple(warnings),
        requeue=bool(job.requeue),
    )
    return view, meta


def job_summary(v: JobView, meta: JobContext | None = None) -> dict:
    """What the jobs table keeps of a managed job (status shows it after the job left the queue; the history
    of finished jobs feeds the next jobs' ETAs).  The exact view decided on is in the round record."""
    short = list(v.bs_history) if len(v.bs_history) <= SHORT_HISTORY else None
    return {
        "batch_size": v.batch_size,
        "epochs_done": v.epochs_done,
        "total_epochs": v.total_epochs,
        "weight": v.weight,
        "gpus": v.num_gpus,
        "arrival": v.arrival_time,
        "bs_history": short,
        "epoch_duration_by_bs": {str(k): d for k, d in v.epoch_duration_by_bs.items()},
        "min_bs": v.min_batch_size,
        "max_bs": v.max_batch_size,
        **(meta.to_json() if meta else {}),
    }


def job_rows(jobs: list[SlurmJob], views: list[JobView], meta: dict[int, JobContext]) -> list[dict[str, Any]]:
    """The journal's rows (StateStore.upsert_jobs) of the managed jobs and their views (the same order)."""
    return [
        {
            "job_id": str(j.job_id),
            "user": j.user,
            "account": j.account,
            "gpus": max(j.gpus, 1),
            "state": ("HELD" if j.held else j.state),
            "submit_time": j.submit_time,
            "restarts": j.restart_count,
            "view": job_summary(v, meta.get(j.job_id)),
        }
        for j, v in zip(jobs, views, strict=True)
    ]


def quarantine_rows(jobs: dict[int, SlurmJob], reasons: dict[int, str]) -> list[dict[str, Any]]:
    """The journal's rows (StateStore.set_quarantined) of the quarantined jobs, with their reasons."""
    return [
        {
            "job_id": jid,
            "user": j.user,
            "account": j.account,
            "gpus": j.gpus,
            "submit_time": j.submit_time,
            "restarts": j.restart_count,
            "reason": reasons[jid],
        }
        for jid, j in jobs.items()
    ]


def unmanaged(jobs: list[SlurmJob], managed_ids: set, partition: str | None, now: float) -> Unmanaged:
    """Jobs of the partition the controller does not manage: running ones hold GPUs until about their time
    limit; pending ones wait in Slurm's own order (priority, then submit time)."""
    running, pending = [], []
    for j in jobs:
        if j.job_id in managed_ids or not in_partition(j, partition) or j.gpus <= 0:
            continue
        if j.state == "RUNNING":
            end = (j.start_time + j.time_limit * 60) if j.start_time and j.time_limit else None
            running.append(
                UnmanagedJob(
                    job_id=j.job_id, user=j.user, gpus=j.gpus, start_time=j.start_time, expected_end=end, name=j.name
                )
            )
        elif j.state == "PENDING":
            pending.append(j)
    pending.sort(key=lambda j: (j.held, -(j.priority or 0), j.submit_time or 0, j.job_id))
    waiting = tuple(
        UnmanagedJob(
            job_id=j.job_id,
            user=j.user,
            gpus=j.gpus,
            priority=j.priority,
            held=j.held,
            submit_time=j.submit_time,
            name=j.name,
            position=i + 1,
        )
        for i, j in enumerate(pending)
    )
    return Unmanaged(
        running=tuple(running),
        pending=waiting,
        running_gpus=sum(r.gpus for r in running),
        pending_gpus=sum(r.gpus for r in waiting if not r.held),
    )


def ended_managed(jobs, is_managed, state) -> list:
    """Managed jobs the state still counts as active that Slurm now lists as finished (their final state)."""
    active = {r["job_id"] for r in state.jobs()}
    return [
        (j, m)
        for j in jobs
        if j.state in FINISHED_STATES and str(j.job_id) in active
        for m in [is_managed(j)]
        if m is not None
    ]


def finish_gone(state, gone: list, ended: list, progress_of, now: float) -> None:
    """Record jobs that left the active set: final Slurm state (when squeue still lists it), final progress,
    "ended early" when fewer epochs than declared were done, and their epoch durations into the history of
    (user, program) for the next jobs' ETAs."""
    rows = {r["job_id"]: r for r in state.jobs()}
    listed = {str(j.job_id): j for j, _m in ended}
    final: dict[str, tuple[str, dict[str, Any] | None]] = {}
    for jid in gone:
        row = rows.get(jid)
        if row is None:
            continue
        v = dict(row["view"] or {})
        if v.get("quarantined"):
            final[jid] = ("FINISHED", None)
            continue
        j = listed.get(jid)
        p = progress_of(jid) if j is not None else None
        if p is not None and p.epochs_done:
            v["epochs_done"] = max(int(v.get("epochs_done") or 0), p.epochs_done)
            durations = dict(p.epoch_duration_by_bs)
            counts = dict(p.epochs_by_bs or {})
            v["bs_history"] = list(p.bs_per_epoch) if p.epochs_done <= SHORT_HISTORY else None
        elif v.get("eta_source") == "events":
            durations = {int(k): d for k, d in (v.get("epoch_duration_by_bs") or {}).items()}
            counts = {}
            for b in v.get("bs_history") or ():
                counts[int(b)] = counts.get(int(b), 0) + 1
        else:
            durations, counts = {}, {}
        end_state = j.state if j is not None else "FINISHED"
        done, total = int(v.get("epochs_done") or 0), int(v.get("total_epochs") or 0)
        v["final_state"] = end_state
        reported = bool(p is not None and (p.started or p.epochs_done)) or v.get("eta_source") == "events"
        v["ended_early"] = bool(
            reported
            and total
            and done < total
            and (
                j is None
                or j.state == "COMPLETED"
                or end_state in ("FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")
            )
        )
        v["finished_at"] = now
        final[jid] = (end_state, v)
        if durations and row.get("user"):
            try:
                state.add_epoch_history(row["user"], v.get("program") or v.get("name") or "?", durations, counts)
            except Exception as e:  # noqa: BLE001 - the history only improves ETAs
                log.warning("job %s: its epoch durations were not added to the ETA history: %s", jid, e)
    state.finish_jobs(final, now)
