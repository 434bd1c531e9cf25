"""The enactment verbs: what the controller does to a job (slurm/enact.py, gpu_types.py, nodes.py) and what the
journal's ``actions`` table stores (``verb`` column).  A ``StrEnum``: each member is its journalled string, so a
journal written before the enum existed reads the same and SQL compares the same text."""

from __future__ import annotations

from enum import StrEnum


class Verb(StrEnum):
    SITE_FACTOR = "site_factor"  # scontrol update SiteFactor=
    HOLD = "hold"  # marked and held as admin (Priority=0) in one update
    RELEASE = "release"  # released, StartTime=now, unmarked
    MARK = "mark"  # only the AdminComment mark rewritten
    SIGNAL = "signal"  # the checkpoint signal: value `B:NAME` (batch shell, scancel --batch) or `NAME` (the job steps)
    REQUEUE_HOLD = "requeue_hold"  # requeued held (then held as admin)
    UPDATE_GPUS = "update_gpus"  # a pending job's GPU count (TresPerNode=gres:gpu:[type:]N)
    PLACE_TRES = "place_tres"  # a pending job to a GPU type through its request (Slurm 23.11+)
    PLACE_FEATURES = "place_features"  # the same through the nodes' Features (earlier Slurm)
    PLACE_NODES = "place_nodes"  # a pending job pinned to its round's nodes (NodeList=)
    RESERVE = "reserve"  # a restart's new nodes reserved from its signal to its release (slurm/reservations.py)
    UNRESERVE = "unreserve"  # that reservation deleted


#: verbs that leave a job held by the controller (uninstall releases it), and the one that undoes them
HOLDING = frozenset({Verb.HOLD, Verb.REQUEUE_HOLD})
