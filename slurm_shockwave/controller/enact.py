"""Enactment as a reconcile: compare the round's desired state with what Slurm shows and issue only the
differences, batched (scontrol takes job lists).  Running it twice changes nothing more.

advisory (default): planned pending jobs are released (if we held them) and get a high SiteFactor;
    deferred pending jobs get SiteFactor 0 and are held so backfill cannot start them.  Running jobs are
    left alone.
authoritative: additionally a running job that lost its round is signalled (its checkpoint signal) and,
    after the grace period, requeued held (`scontrol requeuehold`); it is released when planned again.
    A requeue is journalled with the job's restart count, so a crash after issuing it never requeues the
    job a second time.
A job whose GPU request changed (its latest event reports another GPU count) is updated while pending; a
running one is, in authoritative mode, checkpointed and requeued first (then updated while pending).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("slurm_shockwave.enact")

OUR_HOLD_REASONS = ("JobHeldAdmin", "job_requeued_in_held_state")


@dataclass(frozen=True)
class Action:
    verb: str              # site_factor | hold | release | signal | requeue_hold | update_gpus
    job_ids: tuple
    value: object = None


@dataclass
class Observed:
    """What the reconcile needs to know about one managed job."""
    job_id: int
    state: str             # PENDING | RUNNING | ...
    held: bool
    hold_reason: str
    restart_count: int
    site_factor: int | None
    gpus: int
    wanted_gpus: int | None = None     # from the job's events, when it asked for another GPU count
    running_for: float | None = None   # seconds since it (re)started, while running


def reconcile(jobs: list[Observed], run: set, mode: str, high: int, now: float, signalled: dict, grace: float,
              already_requeued, signal: str = "USR1", min_run: float = 0.0) -> list[Action]:
    """The actions that bring Slurm to the desired state.  `signalled` maps job -> time of its preemption
    signal (updated in place by the caller after enactment); `already_requeued(job, restart_count)`.
    A job that (re)started less than `min_run` seconds ago is not preempted yet (no thrashing)."""
    by_verb: dict[tuple, list] = {}

    def add(verb, job, value=None):
        by_verb.setdefault((verb, value), []).append(job)

    for j in jobs:
        planned = j.job_id in run
        if j.state == "PENDING":
            if j.wanted_gpus and j.wanted_gpus != j.gpus:
                add("update_gpus", j.job_id, j.wanted_gpus)
            if planned:
                if j.held and j.hold_reason in OUR_HOLD_REASONS:
                    add("release", j.job_id)
                if j.site_factor != high:
                    add("site_factor", j.job_id, high)
            else:
                if j.site_factor != 0:
                    add("site_factor", j.job_id, 0)
                if not j.held:
                    add("hold", j.job_id)
        elif j.state == "RUNNING" and mode == "authoritative" and (
                not planned or (j.wanted_gpus and j.wanted_gpus != j.gpus)):
            # lost its round, or asks for another GPU count (resized while pending after the requeue)
            since = signalled.get(j.job_id)
            if since is None and j.running_for is not None and j.running_for < min_run:
                continue
            if since is None:
                add("signal", j.job_id, signal)
            elif now - since >= grace and not already_requeued(j.job_id, j.restart_count):
                add("requeue_hold", j.job_id)
    order = ("update_gpus", "signal", "requeue_hold", "site_factor", "hold", "release")
    return [Action(verb, tuple(sorted(ids)), value)
            for (verb, value), ids in sorted(by_verb.items(), key=lambda kv: (order.index(kv[0][0]), str(kv[0][1])))]


class Enactor:
    """Executes actions through a SlurmCLI with the state journal: intent first, then the call, then done."""

    def __init__(self, cli, state, dry_run: bool = False, metrics=None):
        self.cli, self.state, self.dry_run, self.metrics = cli, state, dry_run, metrics

    def execute(self, round_index: int, actions: list[Action], restart_counts: dict) -> list[tuple[Action, str]]:
        results = []
        for a in actions:
            if self.dry_run:
                log.info("dry-run: would %s %s %s", a.verb, a.value if a.value is not None else "", list(a.job_ids))
                results.append((a, "dry-run"))
                continue
            ids = [self.state.intend(round_index, j, a.verb, a.value, restart_counts.get(j, 0)) for j in a.job_ids]
            try:
                self._call(a)
            except Exception as e:  # noqa: BLE001 - a failed call is journalled, logged, retried next round
                self.state.settle(ids, "failed", str(e).splitlines()[0] if str(e) else type(e).__name__)
                log.warning("enact %s on %s failed: %s", a.verb, list(a.job_ids), e)
                results.append((a, "failed"))
                if self.metrics:
                    self.metrics.enact_errors.labels(a.verb).inc()
                continue
            self.state.settle(ids, "done")
            log.info("enacted %s%s on %d job(s): %s", a.verb, f" {a.value}" if a.value is not None else "",
                     len(a.job_ids), list(a.job_ids))
            if self.metrics:
                self.metrics.enact_actions.labels(a.verb).inc(len(a.job_ids))
            results.append((a, "done"))
        return results

    def _call(self, a: Action) -> None:
        ids = list(a.job_ids)
        if a.verb == "site_factor":
            self.cli.scontrol_update(ids, SiteFactor=a.value)
        elif a.verb == "hold":
            self.cli.hold(ids)
        elif a.verb == "release":
            self.cli.release(ids)
            # a released job may still carry a requeue's begin time; let it start in this round
            self.cli.scontrol_update(ids, StartTime="now")
        elif a.verb == "signal":
            self.cli.signal(ids, a.value, scope="batch")
        elif a.verb == "requeue_hold":
            self.cli.requeue(ids, hold=True)
            # requeuehold leaves a *user* hold (JobHeldUser) that the job's owner could release; make it ours
            self.cli.hold(ids)
        elif a.verb == "update_gpus":
            self.cli.scontrol_update(ids, TresPerNode=f"gres:gpu:{a.value}")
        else:  # pragma: no cover
            raise ValueError(f"unknown action {a.verb}")
