"""When the Slurm backend acts (slurm/backend.py): the wait for the next round, ended early when GPUs are freed,
and the gap between a requeue and the release of the restarted job."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Set

from slurm_shockwave.journal.verbs import Verb
from slurm_shockwave.slurm.commands import RESTART_GAP_SECONDS, SlurmCLI
from slurm_shockwave.slurm.enact import Action
from slurm_shockwave.slurm.models import ACTIVE_STATES

log = logging.getLogger("slurm_shockwave.slurm")


def wait_for_round(
    cli: SlurmCLI,
    stop: threading.Event,
    clock: Callable[[], float],
    started: float,
    timing: tuple[float, float],
    round_length: float,
    ours: set[int],
    foreign: set[int],
    waiting: bool,
    follow: Set[int] = frozenset(),
) -> set[int]:
    """Wait for the round boundary (`started` + `round_length`), or until `stop` is set; polled every
    `timing[0]` s, once `timing[1]` s have passed since `started`: the jobs whose GPUs were freed while a managed
    job waits (`ours` that ENDED, `foreign` that left RUNNING), or a job of `follow` (the round runs it, after its
    requeue) back in the queue or gone, end the wait early.  Empty: no early round."""
    deadline = started + round_length
    poll, min_gap = timing
    watched = (ours | foreign if waiting else set()) | follow
    while not stop.is_set():
        left = deadline - clock()
        if left <= 0:
            return set()
        stop.wait(min(left, poll))
        if not watched or stop.is_set() or clock() - started < min_gap:
            continue
        try:
            live = {j.job_id: j.state for j in cli.squeue_jobs(job_ids=watched)}
        except Exception as e:  # noqa: BLE001 - a failed poll just waits for the regular round
            log.debug("early-round poll of the queue failed (%s): waiting for the round boundary", e)
            continue
        freed = {j for j in follow if live.get(j) not in ("RUNNING", "COMPLETING", "CONFIGURING")}  # requeued
        if waiting:
            freed |= {j for j in ours if live.get(j) not in ACTIVE_STATES}
            freed |= {j for j in foreign if live.get(j) != "RUNNING"}
        if freed:
            return freed
    return set()


def restart_gap(
    actions: Iterable[Action], pending_since: dict[tuple[int, int], float], clock: Callable[[], float]
) -> float:
    """Seconds to wait before this round's releases: a release (which also sends StartTime=now) of a requeued job
    waits until RESTART_GAP_SECONDS after the job was first seen PENDING at this restart count (Slurm 24.11 kills
    a restart in the same second as its requeue: the job would end FAILED); at most RESTART_GAP_SECONDS."""
    released = {j for a in actions if a.verb == Verb.RELEASE for j in a.job_ids}
    since = [t for (j, _r), t in pending_since.items() if j in released]
    wait = max(since) + RESTART_GAP_SECONDS - clock() if since else 0.0
    if wait <= 0:
        return 0.0
    log.debug("waiting %.2f s before releasing a job requeued just now", wait)
    return min(wait, RESTART_GAP_SECONDS)
