"""SlurmBackend: the round loop's view of a real Slurm cluster.

observe(): the queue (slurm/queue_read.py: `squeue --json`, or from 23.x a compact listing and the JSON of the jobs
that changed), `sprio` (SiteFactors), the nodes; the managed jobs (`is_managed`) become JobViews with their events.
A failed or partial read raises (SlurmError): the daemon backs off and retries, it never acts on it.
apply(): the reconcile of slurm/enact.py, journalled in the state store.
advance(): sleeps until the next round boundary (interruptible).

Managed jobs are marked by the job templates with `--comment="shockwave key=value ..."`; the optional keys
(slurm/hints.py) describe the job before it has reported anything, and its GPU counts (slurm/resize.py).  With
`managed_by = "partition"` every job of the partition is managed.  Jobs of other partitions, or without the marker, are
never touched.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from slurm_shockwave.backends.base import ServiceBackend
from slurm_shockwave.events.tracker import EventTracker
from slurm_shockwave.journal.context import JobContext, RoundContext, Unmanaged
from slurm_shockwave.journal.verbs import Verb
from slurm_shockwave.slurm import jobview, preflight
from slurm_shockwave.slurm.commands import SlurmCLI
from slurm_shockwave.slurm.enact import Enactor, Observed, held_orphans, plan_reasons, reconcile
from slurm_shockwave.slurm.errors import SlurmError
from slurm_shockwave.slurm.fairshare_round import FairShareRound
from slurm_shockwave.slurm.gpu_types import GpuTypes
from slurm_shockwave.slurm.hints import HintError, check_gpus_range, parse_hints
from slurm_shockwave.slurm.models import ACTIVE_STATES, in_partition, node_in_partition
from slurm_shockwave.slurm.moving import InFlight
from slurm_shockwave.slurm.nodes import NodePins, assigned_nodes
from slurm_shockwave.slurm.ownership import admin_comments, status_of
from slurm_shockwave.slurm.preemptions import PreemptionLog, settle, stopping
from slurm_shockwave.slurm.reservations import Reservations
from slurm_shockwave.slurm.resize import Elastic, per_node_wanted
from slurm_shockwave.slurm.timing import restart_gap, wait_for_round
from slurm_shockwave.slurm.uninstall import uninstall
from solver.preemption import work_left_s
from solver.types import ClusterView, JobView, RoundDecision

log = logging.getLogger("slurm_shockwave.slurm")


class SlurmBackend(ServiceBackend):
    label = "Slurm"

    @classmethod
    def from_config(cls, cfg, journal, reader, metrics=None, clock=None, cli=None) -> SlurmBackend:
        """`cli`: a SlurmCLI to use instead of the config's (tests inject failures through it)."""
        return cls(cli or SlurmCLI.from_config(cfg), cfg, journal, reader, metrics, clock or time.time)

    def __init__(self, cli: SlurmCLI, config, state, reader=None, metrics=None, clock=time.time, sleep=time.sleep):
        """Its collaborators: `cli` the Slurm commands (a SlurmCLI, or an object with its methods), `config` the
        controller config, `state` the journal (a journal.StateStore), `reader` the event store's EventReader (None:
        no events), `metrics` the Prometheus metrics (None: none), `clock` the time, `sleep` how it waits between a
        requeue and a release."""
        self.cli, self.cfg, self.state, self.reader, self.metrics = cli, config, state, reader, metrics
        self.round_length = float(config.round_seconds)
        self.clock = clock
        self.stop_event = threading.Event()
        self.enactor = Enactor(cli, state, dry_run=config.dry_run, metrics=metrics)
        self.round_index = state.next_round()
        self.signalled: dict = {int(k): v for k, v in state.get("signalled", {}).items()}
        # jobs left to Slurm because of their data (invalid hints, unreadable record): job -> one-line reason
        self.quarantined: dict[int, str] = {}
        self._bad: dict[int, str] = {}
        self._orphans: list[Observed] = []
        self._ac: dict[int, str] = {}
        self._legacy_held = {int(j) for j in state.held_by_us()}  # holds from before ownership marks: ours while held
        # the SiteFactor we last set per job (sprio does not list held jobs): loaded once, kept up to date
        self._site_factor: dict[int, int] = state.last_values(Verb.SITE_FACTOR)
        self._events = EventTracker(reader, state)  # bounded per-job event summaries, persisted offsets
        self._observed: dict[int, Observed] = {}
        self._restarts: dict[int, int] = {}
        self._round_started = clock()
        self._meta: dict[int, JobContext] = {}  # job -> what status/explain show beside its view (jobview.build)
        self._unmanaged = Unmanaged()
        self._partition_gpus = self._hint_gpus = 0  # the partition's available GPUs; all its nodes' (hints' bound)
        self._first_submit: dict = {}
        self._history: dict = {}
        self._pending_since: dict = {}  # (job, restart count) of a requeued job -> first seen PENDING
        self._run_ends = jobview.RunEnds()  # when a round first saw a running job's run end in its events
        self._follow: set[int] = set()  # planned jobs whose requeue the last round waits for (apply)
        self.sleep = sleep
        self.preemptions = PreemptionLog(state, metrics)
        self._left: dict = {}  # job -> predicted seconds of work left (this round's view)
        self._costs: dict = {}  # job -> measured preemption cost (its events)
        self.fairshare = FairShareRound(cli)  # market budgets from Slurm's shares and usage (fairshare_round.py)
        self.types = GpuTypes(state)  # capacity per GPU type, pins, steering (gpu_types.py)
        self.pins = NodePins(state)  # GPUs per node, where jobs run, node pins and moves (nodes.py)
        self.elastic = Elastic(state, metrics)  # elastic jobs' base counts, counts and resizes (resize.py)
        self.reservations = Reservations(state)  # a resized or moved job's new nodes kept for its restart
        self.moving = InFlight(state)  # the moved jobs on their way (moving.py)

    # ------------------------------------------------------------------ contract
    def done(self) -> bool:
        return self.stop_event.is_set()

    def stop(self) -> None:
        self.stop_event.set()

    def wait(self, seconds: float) -> None:
        self.stop_event.wait(seconds)

    def reconfigure(self, cfg) -> None:
        self.cfg = cfg
        self.round_length = float(cfg.round_seconds)
        self.enactor.dry_run = cfg.dry_run
        self.cli.timeout = cfg.slurm_timeout
        self.cli.env = dict(cfg.slurm.env)
        self.cli.bin_dir = cfg.slurm.bin_dir

    def preemption_costs(self) -> dict:
        return dict(self._costs)

    def stopping(self) -> frozenset:
        return stopping(self.signalled, self._observed)

    def startup_warnings(self) -> list[str]:
        try:
            text = self.cli.run(["scontrol", "show", "config"]).stdout
        except SlurmError:
            return []  # Slurm down: the round loop reports and retries
        return preflight.check_slurm_conf(preflight.parse_show_config(text), self.cfg.mode)

    def health_warnings(self) -> list[str]:
        return preflight.partition_warnings(self.cli, self.cfg.partition)

    @classmethod
    def check(cls, cfg, facts: dict | None = None) -> list[str]:
        return preflight.check_slurm(cfg, facts=facts)

    @classmethod
    def uninstall(cls, cfg) -> dict:
        return uninstall(cfg)

    def is_managed(self, job) -> dict | None:
        """The job's hints if the controller manages it, else None.  Never raises: a job whose data is
        invalid (hints, or a Slurm record read with a `problem`) is not managed and its reason is kept in
        `self._bad` (observe() quarantines it)."""
        try:
            if not in_partition(job, self.cfg.partition):
                return None
            problem = job.problem
            try:  # `shockwave epochs=30 bs=32` -> {'epochs': 30, 'bs': 32}; None: not marked (hints.py)
                hints = parse_hints(job.comment, self.cfg.marker, self._hint_gpus or None)
                check_gpus_range(hints and hints.gpus_range, max(job.gpus, 1), jobview.is_submitit(job))
                marker = None if hints is None else hints.as_dict()
            except HintError as e:
                marker, problem = None, problem or f"invalid hints: {e}"
            if marker is None and self.cfg.managed_by == "partition" and not problem:
                marker = {}
            if marker is not None and not problem:  # a job it would manage; another is not ours to quarantine
                problem = jobview.left_to_slurm(job, self.cfg.no_requeue)
            if problem:
                self._bad[job.job_id] = str(problem).splitlines()[0][:300] if str(problem) else "unreadable record"
                return None
            return marker
        except Exception as e:  # noqa: BLE001 - nothing in one job's data may stop a round (quarantined: logged)
            self._bad[job.job_id] = f"unreadable job record: {type(e).__name__}: {e}"[:300]
            return None

    def observe(self) -> ClusterView:
        t0 = time.perf_counter()
        begun = self.clock()  # the round's start: before the reads, so rounds are round_seconds apart
        self._run_ends.reading()
        with ThreadPoolExecutor(1) as pool:  # the nodes are read while the queue is (while Slurm answers)
            reading = pool.submit(self.cli.sinfo_nodes) if self.cli.answering else None
            jobs = self.cli.squeue_jobs(with_site_factor=True, incremental=True)
            nodes = reading.result() if reading is not None else self.cli.sinfo_nodes()
        if self.metrics:
            self.metrics.slurm_latency.observe(time.perf_counter() - t0)
        now = self.clock()
        self._run_ends.answered()
        self._round_started = begun
        self._bad = {}
        self._ac = admin_comments(jobs)  # our ownership marks (slurm/ownership.py)
        # hints are bounded by all the partition's nodes' GPUs, whatever their state (docs/guarantees.md)
        mine = [n for n in nodes if node_in_partition(n, self.cfg.partition)]
        self._partition_gpus, self._hint_gpus = sum(n.gpus for n in mine if n.available), sum(n.gpus for n in mine)
        managed = [(j, m) for j in jobs for m in [self.is_managed(j)] if m is not None and j.state in ACTIVE_STATES]
        bad = {j.job_id: j for j in jobs if j.job_id in self._bad and j.state in ACTIVE_STATES}
        self.quarantined = {k: v for k, v in self.quarantined.items() if k in bad}
        self._quarantine(bad, now)
        # GPUs held by jobs we do not manage (other users' plain jobs in the partition) are not ours to plan
        managed_ids = {j.job_id for j, _ in managed}
        self._unmanaged = jobview.unmanaged(jobs, managed_ids, self.cfg.partition, now)
        capacity = self.types.observe(nodes, jobs, managed_ids, self.cfg.partition)  # {type: GPUs}, less unmanaged
        by_node = self.pins.observe(nodes, jobs, managed_ids, self.cfg.partition)  # {node: (type, GPUs)}, the same
        capacity = self.pins.capacity() if by_node else capacity
        self.elastic.observe(jobs, nodes, self.cfg.partition, begun, self.round_length)
        self._first_submit, self._history, self._meta = self.state.first_submit_times(), {}, {}
        ended = jobview.ended_managed(jobs, self.is_managed, self.state)
        self.fairshare.refresh(self.cfg.weights, [j for j, _ in managed] + [j for j, _ in ended], now)
        # new event lines of the active jobs folded into bounded per-job summaries (events/tracker.py); reader
        # offsets and summaries are persisted in the state, so a restart neither re-reads nor forgets
        self._events.poll(
            {**{str(j.job_id): j.user_id for j, _ in managed}, **{str(j.job_id): j.user_id for j, _ in ended}},
            {str(j.job_id): m for j, m in [*managed, *ended]},
        )
        views, self._observed, self._restarts, self._costs = [], {}, {}, {}
        failed = {}
        # what sprio shows (it does not list held jobs): known from now on
        self._site_factor.update({j.job_id: j.site_factor for j, _ in managed if j.site_factor is not None})
        for j, marker in managed:
            try:
                progress = self._events.progress(str(j.job_id))
                view = self._view(j, marker, progress, now)
                if progress.preempt_cost_s is not None:
                    self._costs[j.job_id] = progress.preempt_cost_s
                    self._meta[j.job_id] = replace(self._meta[j.job_id], preempt_cost_s=progress.preempt_cost_s)
            except Exception as e:  # nothing in one job's data may stop a round (quarantined and logged)
                log.debug("job %s: view failed", j.job_id, exc_info=True)
                self._bad[j.job_id] = f"could not build its view: {type(e).__name__}: {e}"[:300]
                failed[j.job_id] = j
                continue
            views.append(view)
            self._restarts[j.job_id] = j.restart_count
            self._observed[j.job_id] = Observed(
                j.job_id,
                j.state,
                j.held,
                j.state_reason,
                j.restart_count,
                j.site_factor if j.site_factor is not None else self._site_factor.get(j.job_id),
                max(j.gpus, 1),
                progress.gpus if progress.gpus and progress.gpus != max(j.gpus, 1) else None,
                now - j.start_time if j.state == "RUNNING" and j.start_time else None,
                self._ac.get(j.job_id, ""),
                self._mark_of(j),
                # a job that never reported runs without the wrapper
                progress.start_restart >= j.restart_count or progress.last_event_ts is None,
                self.types.pinned(j),
                jobview.job_signal(j, marker, self.cfg.preempt_signal)[0],  # its own checkpoint signal
                requeue=j.requeue,
                run_ended_for=self._run_ends.ended_for(j, progress, now),
            )
        self._run_ends.keep(self._observed)
        self._pending_since = {
            k: self._pending_since.get(k, now)
            for k in ((j.job_id, j.restart_count) for j, _ in managed if j.state == "PENDING" and j.restart_count > 0)
        }
        if failed:
            self._quarantine(failed, now)
            managed = [(j, m) for j, m in managed if j.job_id not in failed]
        self.types.rates.keep(j.job_id for j, _ in managed)  # each job's own speed per GPU type (type_speeds.py)
        self._left = {v.job_id: work_left_s(v, None) for v in views}
        self.preemptions.observe({j.job_id: j for j in jobs}, self.round_length, now)
        self._orphans = held_orphans(jobs, self._observed, self._ac, self.cfg.partition)
        seen = {str(j.job_id) for j, _ in managed} | {str(j) for j in self.quarantined}
        gone = [r["job_id"] for r in self.state.jobs() if r["job_id"] not in seen]
        if gone:
            jobview.finish_gone(self.state, gone, ended, self._events.progress, now)
        self.state.upsert_jobs(jobview.job_rows([j for j, _ in managed], views, self._meta), now)
        return ClusterView(
            now=now,
            round_index=self.round_index,
            round_length=self.round_length,
            num_gpus=sum(capacity.values()),
            jobs=tuple(views),
            total_jobs=len(views),
            capacity=capacity,
            nodes=by_node,
        )

    def apply(self, decision: RoundDecision) -> None:
        run, now, assigned = {int(j) for j in decision.run}, self.clock(), assigned_nodes(decision)
        nodes = self.pins.moves(assigned, run) if self.cfg.mode == "authoritative" else {}  # and types: gpu_types.py
        moves, why = self.types.moves(decision.placement, run, assigned, nodes, self.cfg.mode == "authoritative")
        self.preemptions.kept(sum(1 for j in decision.run if getattr(decision.plans.get(j), "rule", "") == "kept"))
        self.elastic.prepare(decision, run, self._observed, self.enactor, self.round_index, self._restarts)
        actions = reconcile(
            list(self._observed.values()),
            run,
            self.cfg.mode,
            self.cfg.site_factor,
            now,
            self.signalled,
            self.cfg.grace_seconds,
            self.state.requeued_at,
            self.cfg.preempt_signal,
            self.cfg.min_run_seconds if self.cfg.min_run_seconds is not None else self.round_length,
            reasons={**plan_reasons(decision), **why},
            orphans=self._orphans,
            moves=moves,
        )
        # a pending job goes to its round's GPU type (after a GPU count update) and nodes before its release
        first = sum(1 for a in actions if a.verb == Verb.UPDATE_GPUS)
        steer = self.types.steer(decision.placement, run, self.cli.slurm_version, per_node_wanted(self._observed))
        actions[first:first] = steer + self.pins.pins(assigned, run)

        def done(action):
            for j in action.job_ids:
                if action.verb == Verb.SIGNAL:
                    self.signalled[j] = [now, self._restarts.get(j, 0)]  # this run only (see enact.py)
                    self.preemptions.signalled(j, self._restarts.get(j, 0), now, self._left.get(j), self.round_length)
                elif action.verb == Verb.REQUEUE_HOLD:
                    self.signalled.pop(j, None)
                elif action.verb == Verb.SITE_FACTOR:
                    self._site_factor[j] = int(action.value)
            if action.verb in (Verb.SIGNAL, Verb.REQUEUE_HOLD):
                # saved at once: a crash right after a signal must not send it again
                self.state.put("signalled", {str(k): v for k, v in self.signalled.items()})
                self.preemptions.save()

        if (wait := restart_gap(actions, self._pending_since, self.clock)) > 0:  # at most one short wait per round
            self.sleep(wait)
        results = self.enactor.execute(self.round_index, actions, self._restarts, on_done=done)
        self.elastic.enacted(results, self._round_started, self.round_length)  # the round's start (resize.py)
        self._follow = settle(self.signalled, self._observed, run, moves)  # preemptions.py
        self.moving.started(self, moves, decision, run, results)  # moving.py
        self.reservations.after(self, results, run, moves, assigned)  # reservations.py
        self.state.put("signalled", {str(k): v for k, v in self.signalled.items()})
        self.preemptions.save()

    def round_context(self) -> RoundContext:
        """Beside the views: per job what Slurm says (state, time limit, ETA source, warnings), the partition's
        unmanaged load, the quarantined jobs, the mode (status and explain show them)."""
        return RoundContext(
            jobs={str(k): m for k, m in self._meta.items()},
            partition_gpus=self._partition_gpus,
            unmanaged=self._unmanaged,
            mode=self.cfg.mode,
            dry_run=self.cfg.dry_run,
            quarantined={str(k): v for k, v in self.quarantined.items()},
            fairshare=self.fairshare.context(),
        )

    def advance(self) -> None:
        """Wait for the next round boundary; end the wait early (an event-driven round) when GPUs were freed
        by a managed job that ENDED (completed, failed, cancelled: not one we preempt, whose GPUs the planned
        jobs released in this round already take) or an unmanaged job that left RUNNING, while a managed job
        waits, or when a job the round runs left RUNNING for its requeue (`_follow`: released in that round); never
        sooner than `min_round_seconds` after the last round started (no re-solving more often)."""
        self.round_index += 1
        ended = self.stopping() | self._follow  # leaving RUNNING, these are requeued, not ended
        ours = {j for j, ob in self._observed.items() if ob.state == "RUNNING" and j not in ended}
        foreign = {r.job_id for r in self._unmanaged.running if r.job_id is not None}  # set: built from squeue
        waiting = any(ob.state == "PENDING" for ob in self._observed.values())
        self.early_round = False
        started, timing = self._round_started, self.cfg.early_round_timing
        watched = (ours, foreign, waiting, self._follow)
        freed = wait_for_round(self.cli, self.stop_event, self.clock, started, timing, self.round_length, *watched)
        if freed:
            log.info("jobs %s left RUNNING: starting round %d early", sorted(freed), self.round_index)
            self.early_round = True
            if self.metrics is not None:
                self.metrics.early_rounds.inc()

    # ------------------------------------------------------------------ internals
    def _mark_of(self, job) -> str | None:
        """Is the job's hold ours?  Our AdminComment mark (ownership.py); a hold journalled before marks
        existed counts while the job is still held without a mark."""
        status = status_of(self._ac.get(job.job_id, ""))
        if status is None and job.job_id in self._legacy_held:
            if job.held:
                return "held"
            self._legacy_held.discard(job.job_id)
        return status

    def _quarantine(self, jobs: dict, now: float) -> None:
        """Leave these jobs to Slurm (not planned, not touched; their GPUs are foreign while they run), keep
        the reason for status/explain, log each job once per reason."""
        for jid in jobs:
            reason = self._bad.get(jid, "invalid job data")
            if self.quarantined.get(jid) != reason:
                log.warning("job %s quarantined (left to Slurm, not scheduled by shockwave): %s", jid, reason)
            self.quarantined[jid] = reason
        try:
            self.state.set_quarantined(jobview.quarantine_rows(jobs, self.quarantined), now)
        except (TypeError, ValueError) as e:  # an odd value in a record: still not fatal
            log.warning("quarantine of %s not recorded: %s", sorted(jobs), e)

    def _view(self, j, marker: dict, p, now: float) -> JobView:
        key = (j.user, jobview.program_of(j))
        if key not in self._history:
            self._history[key] = self.state.epoch_history(*key)
        view, self._meta[j.job_id] = jobview.build(
            j,
            marker,
            p,
            now,
            round_length=self.round_length,
            weight=self.fairshare.weight(j.user, j.account),
            arrival=jobview.arrival_of(j, self._first_submit, now),
            history=self._history[key],
            gpu_type=self.types.view_type(j),
            preempt_signal=self.cfg.preempt_signal,
        )
        nodes = self.pins.running_on(j) if j.state == "RUNNING" else ()
        view = replace(view, nodes=nodes, allowed_nodes=self.pins.user_nodes(j))
        moving = self.moving.target(j, now)  # a move on its way: seen where it goes (moving.py)
        view = self.types.speeds(j, view, self.cfg.gpu_type_speeds, marker.get("speed"), p, moving)
        self._meta[j.job_id] = replace(self._meta[j.job_id], **self.types.meta(j))
        return self.moving.view(self.elastic.view(j, marker, p, view, self.cfg.elastic_speedup_exponent), moving)
