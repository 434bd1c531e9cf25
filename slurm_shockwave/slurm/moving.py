"""A move on its way: a running job a round moved to other nodes or another GPU type (nodes.py, gpu_types.py), or to
another GPU count (an elastic job, resize.py), is signalled, requeued held and released by a later round; until it
runs again Slurm lists it PENDING.

The simulator moves a job at once: the next round sees it running on its new nodes and type.  Read as a waiting job,
the moved job was decided afresh in the round after its move: its new GPUs went to other jobs (type moves of
others into them) and it was placed back on the type it left, a restart for nothing (typed replay of 2026-12-07
08:43: job 8 moved from a K80 to a V100 in round 20, started again on a K80 in round 21).  So from its requeue until
it runs again (or a round does not run it, or it leaves) its view is that of the job the move made: it ran the
last round, on the nodes and the type it was moved to, and asks for that type (`view`); the round then keeps it
there, or judges its preemption as any running job's, and its release pins and steers it there.

`InFlight` keeps {job: (nodes, type, GPUs, the restart count it ran at, until when)} in the state ("moving"),
bounded to the jobs the last round ran.
"""

from __future__ import annotations

from dataclasses import replace

from slurm_shockwave.journal.verbs import Verb
from slurm_shockwave.slurm.kept_rates import KeptRates, saved_dict
from slurm_shockwave.slurm.models import SlurmJob
from slurm_shockwave.slurm.nodes import assigned_nodes
from solver.types import JobView

#: the actions that take a moving job off its GPUs (a job without a checkpoint signal is requeued at once)
STOPS = (Verb.SIGNAL, Verb.REQUEUE_HOLD)
#: a job in these states runs (or is being started) where Slurm allocated it
STARTED = ("RUNNING", "CONFIGURING")


class InFlight(KeptRates):
    """The moves signalled and not yet run again (module docstring)."""

    KEY = "moving"

    def __init__(self, state):
        super().__init__(state)
        self.by_job: dict[str, dict] = {
            str(k): v
            for k, v in saved_dict(state, self.KEY).items()
            if str(k).isdigit()
            and isinstance(v, dict)
            and isinstance(v.get("nodes"), list)
            and all(isinstance(n, str) for n in v["nodes"])
            and isinstance(v.get("type"), (str, type(None)))
            and isinstance(v.get("restarts"), int)
            and isinstance(v.get("gpus"), int)
            and isinstance(v.get("until"), (int, float))
        }

    def started(self, backend, moves: dict, decision, run: set, results) -> None:
        """After a round's enactment (`results`: (action, outcome) pairs): the jobs it signalled for a move (`moves`:
        job -> its new nodes) or a count change (`Elastic.want`, slurm/resize.py) are on their way, for as long as
        their restart reservation lasts at most (the grace and two rounds, reservations.py); one the round no longer
        runs is not (its move was taken back, or it is preempted)."""
        until = backend.clock() + backend.cfg.grace_seconds + 2 * backend.round_length
        signalled = {j for a, r in results if r == "done" and a.verb in STOPS for j in a.job_ids}
        assigned = assigned_nodes(decision)
        for jid in [k for k in self.by_job if int(k) not in run]:
            del self.by_job[jid]
            self._dirty = True
        for jid in sorted((set(moves) | set(backend.elastic.want)) & signalled):
            by = decision.placement.get(jid) or decision.placement.get(str(jid)) or {}
            self.by_job[str(jid)] = {
                "nodes": [str(n) for n in (moves.get(jid) or assigned.get(jid) or ())],
                "type": str(next(iter(by))) if len(by) == 1 else None,
                "restarts": int(backend._restarts.get(jid, 0)),
                "gpus": int(sum(by.values())),
                "until": until,
            }
            self._dirty = True
        self.save()

    def target(self, job: SlurmJob, now: float) -> dict | None:
        """The move `job` is on its way to: requeued (at a later restart count than it was moved at: PENDING, or
        still REQUEUED on its way there), not running yet; a job running again is where Slurm says it is, and one not
        started by `until` waits as any pending job (both forgotten)."""
        entry = self.by_job.get(str(job.job_id))
        if entry is None or job.restart_count <= entry["restarts"]:
            return None
        if job.state in STARTED or now > entry["until"]:
            del self.by_job[str(job.job_id)]
            self._dirty = True
            return None
        return entry

    @staticmethod
    def view(view: JobView, entry: dict | None) -> JobView:
        """A requeued moving job's view (`entry`: its `target`): it ran the last round, on the nodes it was moved to
        (and its count, an elastic job's); the type it runs on is `GpuTypes.speeds`' (given the entry), and it asks
        for that type as a running job does (`JobView.gpu_type`: the policies keep it there, solver/type_moves.py)."""
        if entry is None:
            return view
        gpus = entry["gpus"] if view.gpus_range is not None and entry["gpus"] > 0 else view.running_gpus
        kind = view.running_type or view.gpu_type
        return replace(view, ran_last_round=True, nodes=tuple(entry["nodes"]), running_gpus=gpus, gpu_type=kind)
