"""Slurm's accounting rules shared by the sacct readers (`sacct --json`, `sacct -P`): the runs of one job become one
imported job (docs/trace-import.md, "sacct").

* A job is its job id; an array task is its own job (`<array job>_<task>`), as is a heterogeneous job's component
  (`<job>+<offset>`).
* A requeued job has one run per start: `sacct --duplicates` (and 22.05's `sacct --json`, which always lists
  them) shows the earlier ones in state REQUEUED.  The arrival is the earliest run's submit time (Slurm resets
  Submit at a requeue, so without --duplicates a requeued job arrives at its last requeue); the run time is
  End - Start of the run that finished (the last one); the GPUs are the ones it was allocated.
* Finished: any final state (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, DEADLINE,
  BOOT_FAIL).  A run with no allocation (AllocTRES empty: cancelled while pending) never started, whatever its
  times say (Slurm sets its Start to its End); RUNNING/SUSPENDED/COMPLETING: still running; PENDING: never started.
* A job submitted with `--no-requeue` may not be preempted (`preemptible` false: no requeue can stop it and bring
  it back), one submitted with `--requeue` may (true), where its runs' submit line says so (`sacct --json` 24.11+);
  else unknown (the site's `JobRequeue`).
* The time limit is the one of the run that counts (what `sbatch --time` asked, or the partition's default), in
  seconds, else the latest earlier run's (26.05 records a requeued job's last run as unlimited); none when no run
  has one.
"""

from __future__ import annotations

from dataclasses import dataclass

from shockwave_lab.imports.common import Row, span

FINISHED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "DEADLINE",
    "BOOT_FAIL",
    "SPECIAL_EXIT",
    "REVOKED",
}
RUNNING = {"RUNNING", "SUSPENDED", "COMPLETING", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING", "CONFIGURING"}


@dataclass(frozen=True)
class Run:
    """One row of sacct: one run of a job (several for a requeued job)."""

    id: str
    line: int | str  # a line number, or where in a JSON file ("job 3")
    state: str  # first word, upper case: "CANCELLED by 0" -> CANCELLED
    submit: float
    start: float | None
    end: float | None
    alloc_gpus: int | None  # None: no allocation at all (never started)
    req_gpus: int
    user: str | None
    account: str | None
    gpu_type: str | None = None
    names: tuple[str, str] = ("Start", "End")  # the start and end fields, for errors
    limit: float | None = None  # seconds (TimeLimit); None: not given or unlimited
    requeue: bool | None = None  # --requeue / --no-requeue on its submit line (imports/submit_line.py); None: unsaid


def state_word(text: str) -> str:
    return (text or "").strip().split(" ")[0].upper()


def _limit(group: list[Run], last: Run) -> float | None:
    """The time limit of the run that counts, else of the latest earlier run that records one (Slurm may record
    a requeued job's last run as unlimited)."""
    return last.limit if last.limit is not None else next((r.limit for r in reversed(group) if r.limit), None)


def rows_of(runs: list[Run], path) -> list[Row]:
    """One Row per job (its runs grouped by id, in the order first seen)."""
    jobs: dict[str, list[Run]] = {}
    for r in runs:
        jobs.setdefault(r.id, []).append(r)
    out = []
    for jid, group in jobs.items():
        last = group[-1]
        finals = [r for r in group if r.state != "REQUEUED"]
        if finals:
            last = finals[-1]
        gpus = last.alloc_gpus if last.alloc_gpus is not None else last.req_gpus
        runtime, unfinished = None, False
        if last.state in FINISHED and last.alloc_gpus is not None:
            at = (f"{path} ({last.line})", 0) if isinstance(last.line, str) else (path, last.line)
            runtime = span(*at, last.names[0], last.start, last.names[1], last.end)
        elif last.state in RUNNING:
            unfinished = True
        out.append(
            Row(
                jid,
                min(r.submit for r in group),
                runtime,
                gpus,
                last.user,
                last.account,
                last.gpu_type,
                preemptible=next((r.requeue for r in reversed(group) if r.requeue is not None), None),
                unfinished=unfinished,
                limit=_limit(group, last),
            )
        )
    return out
