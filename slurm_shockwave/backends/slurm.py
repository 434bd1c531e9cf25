"""SlurmBackend: the round loop's view of a real Slurm cluster.

observe(): one `squeue --json` (+ `sprio` for SiteFactors) and one `sinfo --json`; the managed jobs (see
`is_managed`) become JobViews, completed with what their training wrappers wrote to the event store.
A failed or partial read raises (SlurmError): the daemon backs off and retries, it never acts on it.
apply(): the reconcile of controller/enact.py, journalled in the state store.
advance(): sleeps until the next round boundary (interruptible).

Managed jobs are marked by the job templates with `--comment="shockwave key=value ..."`; the optional
keys describe the job before it has reported anything: `epochs=`, `bs=`, `min_bs=`, `max_bs=`,
`samples=`, `epoch_s=` (expected seconds per epoch at `bs`).  With `managed_by = "partition"` every job of
the partition is managed.  Jobs of other partitions, or without the marker, are never touched.
"""
from __future__ import annotations

import logging
import math
import threading
import time

from solver.types import ClusterView, JobView, RoundDecision

from ..controller.enact import Enactor, Observed, reconcile
from ..events.summary import summarize
from .base import ClusterBackend

log = logging.getLogger("slurm_shockwave.slurm")
ACTIVE_STATES = ("PENDING", "RUNNING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED")


def parse_marker(comment: str, marker: str) -> dict | None:
    """`shockwave epochs=30 bs=32` -> {'epochs': 30, 'bs': 32}; None if the comment lacks the marker."""
    text = (comment or "").strip()
    if not text.startswith(marker):
        return None
    rest = text[len(marker):]
    if rest and not rest[0] in " :;,":
        return None
    out = {}
    for token in rest.replace(":", " ").replace(";", " ").replace(",", " ").split():
        key, _, value = token.partition("=")
        if key in ("epochs", "bs", "min_bs", "max_bs", "samples") and value.isdigit() and 0 < int(value) < 10**9:
            out[key] = int(value)
        elif key == "epoch_s":
            try:
                v = float(value)
                if 0 < v < 1e7:
                    out[key] = v
            except ValueError:
                pass
    return out


class SlurmBackend(ClusterBackend):
    def __init__(self, cli, config, state, reader=None, metrics=None, clock=time.time):
        self.cli, self.cfg, self.state, self.reader, self.metrics = cli, config, state, reader, metrics
        self.round_length = float(config.round_seconds)
        self.clock = clock
        self.stop_event = threading.Event()
        self.enactor = Enactor(cli, state, dry_run=config.dry_run, metrics=metrics)
        self.round_index = state.next_round()
        self.signalled: dict = {int(k): v for k, v in state.get("signalled", {}).items()}
        # the SiteFactor we last set per job (sprio does not list held jobs): loaded once, kept up to date
        self._site_factor: dict[int, int] = state.last_values("site_factor")
        self._events: dict[str, list] = {}
        self._observed: dict[int, Observed] = {}
        self._restarts: dict[int, int] = {}
        self._round_started = clock()
        self.last_enacted: list = []

    # ------------------------------------------------------------------ contract
    def done(self) -> bool:
        return self.stop_event.is_set()

    def is_managed(self, job) -> dict | None:
        if job.partition and self.cfg.partition and self.cfg.partition not in job.partition.split(","):
            return None
        marker = parse_marker(job.comment, self.cfg.marker)
        if marker is None and self.cfg.managed_by == "partition":
            marker = {}
        return marker

    def observe(self) -> ClusterView:
        t0 = time.perf_counter()
        jobs = self.cli.squeue_jobs(with_site_factor=True)
        nodes = self.cli.sinfo_nodes()
        if self.metrics:
            self.metrics.slurm_latency.observe(time.perf_counter() - t0)
        now = self.clock()
        self._round_started = now
        managed = [(j, m) for j in jobs for m in [self.is_managed(j)] if m is not None and j.state in ACTIVE_STATES]
        capacity = sum(n.gpus for n in nodes if n.available and (not self.cfg.partition or
                                                                  self.cfg.partition in n.partitions))
        # GPUs held by jobs we do not manage (other users' plain jobs in the partition) are not ours to plan
        managed_ids = {j.job_id for j, _ in managed}
        foreign = sum(j.gpus for j in jobs if j.state == "RUNNING" and j.job_id not in managed_ids and
                      (not self.cfg.partition or self.cfg.partition in (j.partition or "").split(",")))
        capacity = max(0, capacity - foreign)
        self._poll_events({str(j.job_id): j.user_id for j, _ in managed})
        views, self._observed, self._restarts = [], {}, {}
        for j, marker in managed:
            progress = summarize(self._events.get(str(j.job_id), []))
            view = self._view(j, marker, progress, now)
            views.append(view)
            self._restarts[j.job_id] = j.restart_count
            self._observed[j.job_id] = Observed(j.job_id, j.state, j.held, j.state_reason, j.restart_count,
                                                j.site_factor if j.site_factor is not None else
                                                self._site_factor.get(j.job_id), max(j.gpus, 1),
                                                progress.gpus if progress.gpus and progress.gpus != max(j.gpus, 1)
                                                else None,
                                                now - j.start_time if j.state == "RUNNING" and j.start_time else None)
        seen = {str(j.job_id) for j, _ in managed}
        gone = [r["job_id"] for r in self.state.jobs() if r["job_id"] not in seen]
        if gone:
            self.state.mark_finished(gone, now)
        self.state.upsert_jobs([{"job_id": str(j.job_id), "user": j.user, "account": j.account, "gpus": max(j.gpus, 1),
                                 "state": ("HELD" if j.held else j.state), "submit_time": j.submit_time,
                                 "restarts": j.restart_count, "view": _view_dict(v)}
                                for (j, _), v in zip(managed, views)], now)
        return ClusterView(now=now, round_index=self.round_index, round_length=self.round_length,
                           num_gpus=capacity, jobs=tuple(views), total_jobs=len(views))

    def apply(self, decision: RoundDecision) -> None:
        run = {int(j) for j in decision.run}
        now = self.clock()
        actions = reconcile(list(self._observed.values()), run, self.cfg.mode, self.cfg.site_factor, now,
                            self.signalled, self.cfg.grace_seconds, self.state.requeued_at, self.cfg.preempt_signal,
                            self.cfg.min_run_seconds if self.cfg.min_run_seconds is not None else self.round_length)
        results = self.enactor.execute(self.round_index, actions, self._restarts)
        for action, status in results:
            if status != "done":
                continue
            for j in action.job_ids:
                if action.verb == "signal":
                    self.signalled[j] = now
                elif action.verb == "requeue_hold":
                    self.signalled.pop(j, None)
                elif action.verb == "site_factor":
                    self._site_factor[j] = int(action.value)
        for j in list(self.signalled):
            ob = self._observed.get(j)
            if ob is None or ob.state != "RUNNING" or (j in run and not ob.wanted_gpus):
                self.signalled.pop(j, None)     # gone, already off its GPUs, or planned again as it is
        self.state.put("signalled", {str(k): v for k, v in self.signalled.items()})
        self.last_enacted = results

    def advance(self) -> None:
        self.round_index += 1
        deadline = self._round_started + self.round_length
        self.stop_event.wait(max(0.0, deadline - self.clock()))

    # ------------------------------------------------------------------ internals
    def _poll_events(self, uids: dict) -> None:
        if self.reader is None:
            return
        try:
            for job_id, events in self.reader.poll(uids).items():
                self._events.setdefault(job_id, []).extend(events)
        except OSError as e:
            log.warning("event store unreadable: %s", e)
        for job_id in [k for k in self._events if k not in uids]:
            del self._events[job_id]

    def _view(self, j, marker: dict, p, now: float) -> JobView:
        bs = p.batch_size or marker.get("bs") or 1
        samples = p.samples_per_epoch or marker.get("samples") or bs
        total = p.total_epochs or marker.get("epochs") or max(p.epochs_done + 1, 1)
        durations = dict(p.epoch_duration_by_bs)
        if not durations and "epoch_s" in marker:
            durations[bs] = marker["epoch_s"]
        epoch_s = durations.get(bs) or (sum(durations.values()) / len(durations) if durations else self.round_length)
        spe = math.ceil(samples / bs)
        throughput = spe / epoch_s if epoch_s > 0 else 1.0
        return JobView(
            job_id=j.job_id, arrival_time=float(j.submit_time or now), num_gpus=max(j.gpus, 1), batch_size=bs,
            epochs_done=p.epochs_done, total_epochs=total, samples_per_epoch=samples,
            steps_done=p.epochs_done * spe, total_steps=total * spe, throughput=throughput,
            epoch_duration_by_bs=durations, bs_history=tuple(p.bs_per_epoch), user=j.user, account=j.account,
            weight=self.cfg.weight(j.user, j.account), mode="unknown", job_type=j.name,
            min_batch_size=p.min_batch_size or marker.get("min_bs"), max_batch_size=p.max_batch_size or
            marker.get("max_bs"), ran_last_round=j.state == "RUNNING",
            run_time=sum(durations.get(b, epoch_s) for b in p.bs_per_epoch))


def _view_dict(v: JobView) -> dict:
    return {"batch_size": v.batch_size, "epochs_done": v.epochs_done, "total_epochs": v.total_epochs,
            "weight": v.weight, "gpus": v.num_gpus, "arrival": v.arrival_time, "bs_history": list(v.bs_history),
            "epoch_duration_by_bs": {str(k): d for k, d in v.epoch_duration_by_bs.items()},
            "min_bs": v.min_batch_size, "max_bs": v.max_batch_size}
