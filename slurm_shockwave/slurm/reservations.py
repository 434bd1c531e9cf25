"""A restart's nodes kept for it: the race between a requeue and Slurm's own start of an arrival.

In authoritative mode a running job that the round runs again on another GPU count (an elastic resize, resize.py)
or on other nodes (a move, nodes.py) is signalled, requeued held and released by a later round, pinned to its new
nodes.  Until that release Slurm starts what it can on the GPUs the job will use: the idle ones from the signal on,
its own from its requeue on, and among what it starts are arrivals that no round has seen yet, so none holds them
(Slurm 22.05, replay of 2026-11-28 10:42, docs/replay-elastic.md: 0.37 s after the requeue).  The job then waits on
its new count until a round takes the change back: a restart for nothing.

So right after the round that signals such a job, its new nodes are reserved (``scontrol create reservation``:
``IGNORE_JOBS``, the jobs running there keep running; ``OVERLAP``, beside an admin's reservation or another
restart's; its only user is the controller's, so no job runs in it).  The round that releases the job deletes it
after the release: the job, pending with the round's high SiteFactor, is the first that Slurm starts there, and an
arrival submitted meanwhile does not start before it (slurmctld starts a new job at once only when no pending job
of its partition has a higher priority).  Checked on 22.05, 24.11 and 26.05: tests/test_reservations_slurm.py.

What it costs: the reserved nodes start nothing else between the signal and the restart (a job the same round
releases there has usually started already, a few milliseconds before the reservation); a restart whose nodes
another restart still keeps starts when that one does.

Ownership lives in Slurm: the reservation is named ``shockwave-restart-JOBID``; it ends by itself after a few minutes
(a crash leaves none for long); every round deletes one whose job is no longer on its way to that restart, and
``controller uninstall`` deletes them all.  A create that fails (a node down, no permission) is journalled and the
restart goes on unprotected, as before.
"""

from __future__ import annotations

import math
import os
import pwd
import re

from slurm_shockwave.journal.verbs import Verb
from slurm_shockwave.slurm.argv import RESTART_RESERVATION as PREFIX
from slurm_shockwave.slurm.enact import Action

_NAME_RE = re.compile(r"(?:^|\s)ReservationName=(\S+)")
_NODE_RE = re.compile(r"^[A-Za-z0-9_.\-\[\],]+$")


def ours(cli) -> set[int]:
    """The jobs whose restart reservation Slurm holds (``scontrol --oneliner show reservation``; an admin's are not
    ours)."""
    text = cli.run(["scontrol", "--oneliner", "show", "reservation"]).stdout
    names = (m.group(1) for m in _NAME_RE.finditer(text))
    return {int(n[len(PREFIX) :]) for n in names if n.startswith(PREFIX) and n[len(PREFIX) :].isdigit()}


def delete_all(cli) -> list[int]:
    """Uninstall: delete every restart reservation of the controller; the jobs whose reservation was deleted."""
    jobs = sorted(ours(cli))
    for j in jobs:
        cli.reservation(f"{PREFIX}{j}")
    return jobs


class Reservations:
    """The restart reservations the controller made (`live`: saved in its state before each create, so a restarted
    controller deletes those it made; read from Slurm only by uninstall), made and deleted after each round's
    enactment (`after`)."""

    def __init__(self, state, user: str | None = None):
        self.state = state
        self.user = user or pwd.getpwuid(os.geteuid()).pw_name
        self.live: set[int] = {int(j) for j in state.get("reservations", []) or []}

    def wanted(self, results, run, moves, observed: dict, follow: set, assigned: dict, minutes: int) -> list:
        """The deletes (jobs no longer on their way to the restart their reservation keeps: released, gone, or not
        run any more) and the creates (jobs signalled in this round for a resize or a move the round runs)."""
        done = {(a.verb, j) for a, r in results if r == "done" for j in a.job_ids}
        keep = set(follow) | {j for j in run if (Verb.REQUEUE_HOLD, j) in done}
        out = [Action(Verb.UNRESERVE, (j,)) for j in sorted(self.live - keep)]
        for j in sorted(run):
            ob, nodes = observed.get(j), ",".join(assigned.get(j) or ())
            restart = ob is not None and (j in moves or (ob.wanted_gpus and ob.wanted_gpus != ob.gpus))
            if restart and (Verb.SIGNAL, j) in done and j not in self.live and nodes and _NODE_RE.match(nodes):
                out.append(Action(Verb.RESERVE, (j,), f"Nodes={nodes} Duration={minutes} Users={self.user}"))
        return out

    def after(self, backend, results, run: set, moves, assigned: dict) -> None:
        """After the round's enactment (slurm/backend.py `apply`): make and delete the round's reservations, each
        lasting the grace, two rounds and a minute (it outlives the restart it keeps, not much more).  A create
        that failed may still have been made (a timeout): it is deleted like one that was."""
        minutes = max(2, math.ceil((backend.cfg.grace_seconds + 2 * backend.round_length) / 60) + 1)
        actions = self.wanted(results, run, moves, backend._observed, backend._follow, assigned, minutes)
        if not actions:
            return
        self._save(self.live | {a.job_ids[0] for a in actions if a.verb == Verb.RESERVE})  # before the creates
        results = backend.enactor.execute(backend.round_index, actions, backend._restarts)
        self._save(self.live - {a.job_ids[0] for a, r in results if a.verb == Verb.UNRESERVE and r == "done"})

    def _save(self, live: set[int]) -> None:
        self.live = live
        self.state.put("reservations", sorted(live))
