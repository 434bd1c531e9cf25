"""The checkpoint signals the controller sent (its `signalled` state: job -> [time, restart count], and a third item,
1, once a later round planned the job again while it still ran): when this run was signalled, whether a later round
overruled the signal, and what is left of them after a round (backend.py `apply`)."""

from __future__ import annotations

from collections.abc import Mapping


def signal_time(entry, restart_count: int):
    """When this run of the job got its preemption signal; a signal sent to an earlier run (the job was requeued and
    restarted since) does not count for this one."""
    if isinstance(entry, (list, tuple)):
        if len(entry) not in (2, 3) or entry[1] != restart_count:
            return None
        entry = entry[0]
    return entry if isinstance(entry, (int, float)) else None


def replanned(entry) -> bool:
    """A signalled run that a later round planned again while it still ran: its signal may still requeue it, so it
    is not released while it runs; it is signalled afresh if it loses a later round (enact.py `reconcile`)."""
    return isinstance(entry, (list, tuple)) and len(entry) == 3 and bool(entry[2])


def settle(signalled: dict, observed: Mapping, run: set, moves: Mapping) -> set:
    """After a round's enactment: forget the signals of jobs gone, off their GPUs or restarted since; mark as
    overruled (`replanned`) those of jobs the round runs again as they are.  Returns the jobs the round runs whose
    requeue it waits for (a resize, a move, or planned again after its signal): back in the queue, they start the
    next round early, to be released then (timing.py `wait_for_round`)."""
    for j, entry in list(signalled.items()):
        ob = observed.get(j)
        if ob is None or ob.state != "RUNNING" or signal_time(entry, ob.restart_count) is None:
            signalled.pop(j, None)
        elif j in run and not ob.wanted_gpus and j not in moves and not replanned(entry):
            signalled[j] = [*entry[:2], 1]
    return {j for j in signalled if j in run}
