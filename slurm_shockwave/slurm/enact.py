"""Enactment as a reconcile: compare the round's desired state with what Slurm shows and issue only the
differences, batched (scontrol takes job lists).  Running it twice changes nothing more.

advisory (default): planned pending jobs are released (if we held them) and get a high SiteFactor;
    deferred pending jobs get SiteFactor 0 and are held so backfill cannot start them, at most
    `MAX_NEW_HOLDS` newly in a round (the oldest first; slurmctld takes 1-3 ms per update, so a queue of
    5,000 new jobs is held over several rounds, while their SiteFactor 0 already keeps them behind the
    planned ones).  Running jobs are left alone.
authoritative: additionally a running job that lost its round is held (marked first) and signalled (its
    checkpoint signal: its own, `Observed.signal`, ``B:USR1`` to the batch shell or ``USR2`` to its steps, else the
    configured one to the batch shell; one ``scancel`` per signal and scope, never a signal that kills: hints.py
    `checkpoint_signal`; journalled as sent): when its program requeues itself after the checkpoint the hold comes
    back with it, so it never restarts by itself on the GPUs it freed; a job still running after the grace period
    is requeued held (`scontrol requeuehold`).  It is released when a later round plans it again.
    A requeue is journalled with the job's restart count, so a crash after issuing it never requeues the
    job a second time.
A job whose GPU request changed (its latest event reports another GPU count; an elastic job: its round runs it on
another count, slurm/resize.py) is updated while pending; a running one is, in authoritative mode, checkpointed and
requeued first (then updated while pending).  On a cluster of several GPU types a planned pending job is first steered
to the type its round placed it on (slurm/gpu_types.py: `place_tres` on Slurm 23.11+, `place_features` before), never
one whose user asked for a type; and pinned to the nodes its round gave it (slurm/nodes.py: `place_nodes`), never one
whose user asked for nodes.  In authoritative mode a running job the round moves to other nodes is preempted like one
that lost its round (`moves`).  A resized or moved job's new nodes are reserved from its signal to its release
(slurm/reservations.py: verbs RESERVE and UNRESERVE, made after the round's other actions).

Ownership of holds (slurm/ownership.py): a job is marked in its AdminComment before the controller
holds or requeue-holds it, and unmarked only after its release.  The reconcile releases only marked jobs
(never a user's or an admin's own hold, whatever Slurm's hold reason says), re-holds a marked job left with
the user hold of ``requeuehold`` (a crash between ``requeuehold`` and ``hold``), and releases and unmarks a
marked job it no longer manages (`orphans`).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_shockwave.journal.verbs import Verb
from slurm_shockwave.slurm.argv import RESTART_RESERVATION
from slurm_shockwave.slurm.errors import SlurmError, unreachable, update_refused_until_requeue
from slurm_shockwave.slurm.hints import checkpoint_signal
from slurm_shockwave.slurm.models import SlurmJob, in_partition
from slurm_shockwave.slurm.ownership import marked, parse_mark, status_of, unmarked
from slurm_shockwave.slurm.preemptions import replanned, signal_time

#: the verb of a node pin (nodes.py): consecutive pins are made in one call (Enactor._pin_together)
PIN_VERB = Verb.PLACE_NODES

log = logging.getLogger("slurm_shockwave.enact")

#: at most this many distinct mark texts, and this many jobs, are rewritten per round just to refresh a held
#: job's reason (each job is one RPC in slurmctld: ~0.7 ms per job on 22.05, measured with 1,000 jobs)
MAX_REASON_REWRITES = 4
#: pending deferred jobs held for the first time in one round (a requeued job of ours is always re-held)
MAX_NEW_HOLDS = 500
MAX_REASON_REWRITE_JOBS = 256
#: a run of a job that reports (it runs under the wrapper) whose wrapper has not reported this run's start yet
#: (its signal handlers are not up: a checkpoint signal would be lost, or kill a shell that has not reached its
#: `trap '' USR1`) is not preempted before this many seconds
UNREPORTED_START_S = 60.0
#: nor one whose wrapper reported that this run finished the job, for this many seconds: Slurm shows it RUNNING until
#: slurmstepd's completion message lands (retried every 15 s while slurmctld is away), and a requeue then would run the
#: finished job again; a job that claims an end it did not make gains this much once a run
RUN_END_S = 60.0
#: parts of a reason that change every round without news for the user (a countdown): not put in the mark
_VOLATILE = re.compile(r"\s*\(round [+-]?\d+\)")


@dataclass(frozen=True)
class Action:
    verb: Verb  # a plain string is taken for its Verb (ValueError when it is none)
    job_ids: tuple
    value: object = None

    def __post_init__(self):
        if not isinstance(self.verb, Verb):
            object.__setattr__(self, "verb", Verb(self.verb))


@dataclass
class Observed:
    """What the reconcile needs to know about one managed job."""

    job_id: int
    state: str  # PENDING | RUNNING | ...
    held: bool
    hold_reason: str
    restart_count: int
    site_factor: int | None
    gpus: int
    wanted_gpus: int | None = None  # its events ask for another GPU count; an elastic job: its round's (resize.py)
    running_for: float | None = None  # seconds since it (re)started, while running
    admin_comment: str = ""  # as Slurm shows it (our mark lives there, see ownership.py)
    mark: str | None = None  # status of our mark ("held") or None: is the hold ours?
    run_reported: bool = True  # the wrapper of this run reported its start (its handlers are up)
    gpu_type: str | None = None  # the GPU type its user asked for (kept when its GPU count is updated)
    signal: str | None = None  # its own checkpoint signal (``B:USR1``: batch shell, ``USR2``: its steps); None: ours
    wanted_nodes: int | None = None  # an elastic job's nodes at `wanted_gpus` (all of them, ``NumNodes=k-k``)
    grow: bool = False  # an elastic job its round grows (resize.py): bounded by the round's restart bound, not min_run
    requeue: bool = True  # False: --no-requeue, never stopped by a round (solver/pinned.py keeps it planned)
    run_ended_for: float | None = None  # seconds since its events first showed this run's end (None: not ended)


def held_orphans(
    jobs: list[SlurmJob], observed: Mapping[int, Observed], comments: Mapping[int, str], partition: str | None
) -> list[Observed]:
    """The active jobs of the partition that are not managed (any more) but still carry our hold mark
    (`comments`: their AdminComments): reconcile releases them."""
    return [
        Observed(
            j.job_id,
            j.state,
            j.held,
            j.state_reason,
            j.restart_count,
            None,
            max(j.gpus, 1),
            admin_comment=comments.get(j.job_id, ""),
            mark="held",
        )
        for j in jobs
        if j.job_id not in observed
        and j.state in ("PENDING", "RUNNING")
        and status_of(comments.get(j.job_id, "")) == "held"
        and in_partition(j, partition)
    ]


def reconcile(
    jobs: list[Observed],
    run: set,
    mode: str,
    high: int,
    now: float,
    signalled: dict,
    grace: float,
    already_requeued,
    signal: str = "USR1",
    min_run: float = 0.0,
    reasons: dict | None = None,
    orphans: Sequence[Observed] = (),
    moves=frozenset(),
) -> list[Action]:
    """The actions that bring Slurm to the desired state.  `signalled` maps job -> [time, restart count] of its
    preemption signal (updated by the caller after enactment); `already_requeued(job, restart_count)`.
    A job that (re)started less than `min_run` seconds ago is not preempted yet (no thrashing), but for an elastic
    job its round grows (`Observed.grow`: the elastic stage's own restart bound holds it, and a job Slurm started just
    before the round grows at its start, as in the simulator), nor a run whose wrapper has not reported its start yet
    (`UNREPORTED_START_S`), nor a run whose wrapper reported its end (`RUN_END_S`).
    `reasons`: job -> short human reason put into the mark of a held job; `orphans`: marked jobs that
    are no longer managed (released if held, unmarked); `moves`: running jobs the round runs on other nodes than
    they run on (slurm/nodes.py), treated in authoritative mode like jobs that lost their round."""
    by_verb: dict[tuple, list] = {}
    rewrites: dict[str, list] = {}
    new_holds: list[tuple[int, str]] = []
    reasons = {k: _VOLATILE.sub("", v) for k, v in (reasons or {}).items() if isinstance(v, str)}

    def add(verb, job, value=None):
        by_verb.setdefault((verb, value), []).append(job)

    for j in jobs:
        planned = j.job_id in run
        ours = j.mark == "held"
        if j.state == "PENDING":
            if j.wanted_gpus and j.wanted_gpus != j.gpus:
                add(Verb.UPDATE_GPUS, j.job_id, _gpu_request(j))
            if planned:
                if ours:
                    add(Verb.RELEASE if j.held else Verb.MARK, j.job_id, unmarked(j.admin_comment))
                if j.site_factor != high:
                    add(Verb.SITE_FACTOR, j.job_id, high)
            else:
                if j.site_factor != 0:
                    add(Verb.SITE_FACTOR, j.job_id, 0)
                old = parse_mark(j.admin_comment) if ours else None
                reason = reasons.get(j.job_id) or (old.reason if old else "") or "deferred"
                want = marked(j.admin_comment, "held", reason)
                if ours and j.hold_reason == "JobHeldUser":
                    add(Verb.HOLD, j.job_id, want)  # ours, left with requeuehold's user hold
                elif not j.held:
                    new_holds.append((j.job_id, want))  # marked and held as admin in one update
                elif ours and want != j.admin_comment:
                    rewrites.setdefault(want, []).append(j.job_id)
        elif j.state == "RUNNING":
            lost = not planned or j.job_id in moves or (j.wanted_gpus and j.wanted_gpus != j.gpus)
            entry = signalled.get(j.job_id)
            since = signal_time(entry, j.restart_count)
            if ours and (mode != "authoritative" or not lost):
                # a job can be held while running (it started between our observation and our hold): the
                # hold stays with it (a requeue brings it back held), so it is released with its mark; but not
                # a job signalled in this run: its own requeue may be under way, and released now it would
                # restart in the second of that requeue (Slurm kills such a restart: the job ends FAILED); it is
                # released once seen PENDING, after the restart gap (timing.py)
                if planned and not (j.held and since is not None):
                    add(Verb.RELEASE if j.held else Verb.MARK, j.job_id, unmarked(j.admin_comment))
                elif not planned and not j.held:
                    add(Verb.MARK, j.job_id, unmarked(j.admin_comment))
            ending = j.run_ended_for is not None and j.run_ended_for < RUN_END_S  # Slurm has not heard yet
            if mode != "authoritative" or not lost or not j.requeue or ending:
                continue
            # lost its round, moves to other nodes, or asks for another GPU count (resized while pending after the
            # requeue); a move is pinned to its new nodes when a later round releases it.  A signal that a later
            # round overruled (the job was planned again and kept running: `replanned`) is sent afresh.
            if replanned(entry):
                since = None
            young = j.running_for is not None and j.running_for < min_run and not (j.grow and planned)
            unreported = j.running_for is not None and not j.run_reported and j.running_for < UNREPORTED_START_S
            if since is None and (young or unreported):
                continue
            want = marked(j.admin_comment, "held", reasons.get(j.job_id) or "preempted")
            if not j.held:
                add(Verb.HOLD, j.job_id, want)  # held before the signal: a self-requeue stays held
            if since is None:  # grouped per signal and scope: one scancel each
                add(Verb.SIGNAL, j.job_id, checkpoint_signal(j.signal, signal)[0])
            elif now - since >= grace and not already_requeued(j.job_id, j.restart_count):
                add(Verb.REQUEUE_HOLD, j.job_id, want)
    for job_id, want in sorted(new_holds)[:MAX_NEW_HOLDS]:
        add(Verb.HOLD, job_id, want)
    for o in orphans:
        if o.held:
            add(Verb.RELEASE, o.job_id, unmarked(o.admin_comment))
        else:
            add(Verb.MARK, o.job_id, unmarked(o.admin_comment))
    # refreshing only the reason of an already held job: the biggest groups first, a bounded number of calls
    budget = MAX_REASON_REWRITE_JOBS
    for text, ids in sorted(rewrites.items(), key=lambda kv: -len(kv[1]))[:MAX_REASON_REWRITES]:
        for jid in sorted(ids)[:budget]:
            add(Verb.MARK, jid, text)
        budget -= min(budget, len(ids))
        if budget == 0:
            break
    order = (Verb.UPDATE_GPUS, Verb.HOLD, Verb.SIGNAL, Verb.REQUEUE_HOLD, Verb.SITE_FACTOR, Verb.RELEASE, Verb.MARK)
    return [
        Action(verb, tuple(sorted(ids)), value)
        for (verb, value), ids in sorted(by_verb.items(), key=lambda kv: (order.index(kv[0][0]), str(kv[0][1])))
    ]


def _gpu_request(j: Observed):
    """An update_gpus value: ``[type:]N`` GPUs per node, ``/k`` on k nodes for an elastic job (resize.py)."""
    per_node = j.wanted_gpus // j.wanted_nodes if j.wanted_nodes and j.wanted_gpus else j.wanted_gpus
    spec = f"{j.gpu_type}:{per_node}" if j.gpu_type else per_node
    return f"{spec}/{j.wanted_nodes}" if j.wanted_nodes else spec


def plan_reasons(decision) -> dict:
    """job -> the short human reason of its plan record, for the hold marks."""
    out = {}
    for jid, plan in decision.plans.items():
        if plan.reason:
            with contextlib.suppress(TypeError, ValueError):
                out[int(jid)] = plan.reason
    return out


class Enactor:
    """Executes actions through a SlurmCLI with the state journal: intent first, then the call, then done."""

    def __init__(self, cli, state, dry_run: bool = False, metrics=None):
        self.cli, self.state, self.dry_run, self.metrics = cli, state, dry_run, metrics

    def execute(
        self, round_index: int, actions: list[Action], restart_counts: dict, on_done=None
    ) -> list[tuple[Action, str]]:
        """Run the actions in order; `on_done(action)` right after each one succeeded (e.g. to save at once
        that a job was signalled, so a crash right after does not signal it again)."""
        results = []
        pinned: dict = {}  # action index -> (journal ids, error or None): node pins made together
        for k, a in enumerate(actions):
            if self.dry_run:
                log.info("dry-run: would %s %s %s", a.verb, a.value if a.value is not None else "", list(a.job_ids))
                results.append((a, "dry-run"))
                continue
            if a.verb == PIN_VERB and k not in pinned:
                pinned.update(self._pin_together(round_index, actions, k, restart_counts))
            if k in pinned:
                ids, e = pinned[k]
            else:
                ids, e = self.state.intend_many(round_index, a.job_ids, a.verb, a.value, restart_counts), None
                try:
                    self._call(a)
                except Exception as exc:  # noqa: BLE001 - a failed call is journalled, logged, retried next round
                    e = exc
            if e is not None:
                self.state.settle(ids, "failed", str(e).splitlines()[0] if str(e) else type(e).__name__)
                log.warning("enact %s on %s failed: %s", a.verb, list(a.job_ids), e)
                results.append((a, "failed"))
                if self.metrics:
                    self.metrics.enact_errors.labels(a.verb).inc()
                if unreachable(e):
                    # slurmctld is away: the other calls would each wait for their timeout too; the next
                    # round re-reads Slurm and reconciles what is left
                    skipped = actions[k + 1 :]
                    if skipped:
                        log.warning("slurmctld unreachable: %d action(s) left for the next round", len(skipped))
                    for i in range(k + 1, len(actions)):
                        if i in pinned:  # journalled with this one: settled with it
                            self.state.settle(pinned[i][0], "failed", "slurmctld unreachable")
                    results.extend((b, "skipped") for b in skipped)
                    break
                continue
            self.state.settle(ids, "done")
            value = f" {a.value}" if a.value is not None else ""
            log.info("enacted %s%s on %d job(s): %s", a.verb, value, len(a.job_ids), list(a.job_ids))
            if self.metrics:
                self.metrics.enact_actions.labels(a.verb).inc(len(a.job_ids))
            results.append((a, "done"))
            if on_done is not None:
                on_done(a)
        return results

    def _pin_together(self, round_index: int, actions: list[Action], k: int, restart_counts: dict) -> dict:
        """The node pins from actions[k] on (a pin per node value, consecutive) in one ``scontrol`` reading a line
        per job (commands.SlurmCLI.scontrol_update_jobs): a round's pins cost one process, not one per job.  All
        are journalled before the call; {action index: (journal ids, its error or None)}."""
        batch = []
        for i in range(k, len(actions)):
            if actions[i].verb != PIN_VERB:
                break
            batch.append(i)
        ids = {
            i: self.state.intend_many(round_index, actions[i].job_ids, PIN_VERB, actions[i].value, restart_counts)
            for i in batch
        }
        try:
            # only the jobs still pending: one Slurm started since the round read the queue would take the pin as a
            # resize in place, after which it takes no update until requeued (errors.update_refused_until_requeue)
            pending = self.cli.pending_ids([j for i in batch for j in actions[i].job_ids])
            failed = self.cli.scontrol_update_jobs(
                [(j, {"NodeList": actions[i].value}) for i in batch for j in actions[i].job_ids if int(j) in pending]
            )
        except Exception as e:  # noqa: BLE001 - every pin of the call failed with it: returned, journalled, logged
            return {i: (ids[i], e) for i in batch}
        for j in {int(j) for i in batch for j in actions[i].job_ids} - pending:
            failed.setdefault(j, f"job {j} is no longer pending: not pinned (it would be resized)")
        out = {}
        for i in batch:
            errors = [failed[int(j)] for j in actions[i].job_ids if int(j) in failed]
            text = f"NodeList={actions[i].value}: {errors[0]}" if errors else ""
            err = SlurmError(text, cmd=["scontrol"], returncode=1, stderr="\n".join(errors))
            out[i] = (ids[i], err if errors else None)
        return out

    def _call(self, a: Action) -> None:
        ids = list(a.job_ids)
        if a.verb == Verb.SITE_FACTOR:
            self.cli.scontrol_update(ids, SiteFactor=a.value)
        elif a.verb == Verb.HOLD:
            # ours and held in one update per job: `Priority=0` from an admin is what `scontrol hold` sends
            # (JobHeldAdmin, pending or running; checked on 22.05 and 24.11), so no job is ever held without the
            # mark, and a first round that holds 1,000 jobs makes one RPC per job, not two
            self.cli.scontrol_update(ids, AdminComment=a.value, Priority=0)
        elif a.verb == Verb.RELEASE:
            self.cli.release(ids)
            # a released job may still carry a requeue's begin time; let it start in this round (best effort:
            # scontrol fails for a job that already started, and still updates the others of the list)
            try:
                self.cli.scontrol_update(ids, StartTime="now")
            except Exception as e:  # noqa: BLE001 - best effort, logged
                log.debug("StartTime=now on %s failed: %s", ids, e)
            self.cli.scontrol_update(ids, AdminComment=a.value)  # not ours any more, after the release
        elif a.verb == Verb.MARK:
            self.cli.scontrol_update(ids, AdminComment=a.value)
        elif a.verb == Verb.SIGNAL:  # ``B:USR1``: scancel --batch (the batch shell); ``USR2``: the job's steps
            sig = str(a.value)
            self.cli.signal(ids, sig.removeprefix("B:"), scope="batch" if sig.startswith("B:") else "steps")
        elif a.verb == Verb.REQUEUE_HOLD:
            try:
                self.cli.scontrol_update(ids, AdminComment=a.value)  # ours, before we act
            except SlurmError as e:
                if not update_refused_until_requeue(e):
                    raise
                # a job resized in place takes no update until requeued: requeued first, then marked and held in one
                # update (a crash in between: journal/store.py `held_by_us`)
                log.warning("%s: requeued before its mark (%s)", ids, e)
                self.cli.requeue(ids, hold=True)
                self.cli.scontrol_update(ids, AdminComment=a.value, Priority=0)
                return
            self.cli.requeue(ids, hold=True)
            # requeuehold leaves a *user* hold (JobHeldUser) that the job's owner could release; make it ours
            self.cli.hold(ids)
        elif a.verb == Verb.UPDATE_GPUS:  # ``N``, ``type:N``; ``N/k``: N per node on k nodes (22.05, 24.11, 26.05)
            # one line per job: scontrol refuses an id list here (22.05: ``Invalid job ID 2,3``, no job updated)
            spec, _, nodes = str(a.value).partition("/")
            self.cli.scontrol_update_each(
                ids, TresPerNode=f"gres:gpu:{spec}", **({"NumNodes": f"{nodes}-{nodes}"} if nodes else {})
            )
        elif a.verb in (Verb.PLACE_TRES, Verb.PLACE_FEATURES):  # to its GPU type: request (23.11+), else Features
            self.cli.scontrol_update(ids, **{"TresPerNode" if a.verb == Verb.PLACE_TRES else "Features": a.value})
        elif a.verb in (Verb.RESERVE, Verb.UNRESERVE):  # a restart's nodes kept for it (reservations.py)
            self.cli.reservation(f"{RESTART_RESERVATION}{ids[0]}", a.value if a.verb == Verb.RESERVE else None)
        else:  # pragma: no cover
            raise ValueError(f"unknown action {a.verb}")
