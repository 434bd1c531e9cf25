"""The controller's queue read at scale: a compact listing of every job, then ``squeue --json`` only for the jobs
whose listing changed (Slurm 23.x and newer; 22.05 ignores ``-j`` in ``squeue --json``, so it always reads all).

Facts (24.11.5 and 26.05.5 from their Debian roots, 5,000 pending jobs, idle 2-core machine): ``squeue --json``
prints 38.7 MB in 3.1 s and parsing it takes 0.8 s; ``squeue -h -O`` with :data:`FIELDS` prints 0.4 MB in
0.1-0.2 s; ``squeue --json -j <50 ids>`` takes 0.1 s (from 23.x the filter is applied before the JSON is made).
``-O JobID`` is the ``job_id`` that ``squeue --json`` lists, a pending array's meta record included (its tasks
split off under new ids as they start). User text (comment, name) is printed verbatim, newlines and ``|``
included, so every field ends with a separator made fresh for each read, which no user can write.
``squeue --json -j`` with only unknown ids fails (rc 1, ``Invalid job id specified``); with some known ids it
lists those (and selecting an array's meta id lists its tasks too).

What the listing does not show (a pending job's estimated start, its priority's age part, its command or output
paths) can be up to :data:`REFRESH_READS` reads old: every job's record is read again at least that often
whatever its listing says. Whether a job is held (priority 0) is in the listing; the numeric priority is not.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from slurm_shockwave.slurm.errors import SlurmError, unreachable
from slurm_shockwave.slurm.models import SlurmJob
from slurm_shockwave.slurm.parse import parse_squeue_meta
from slurm_shockwave.slurm.shapes import Meta

#: ``squeue -O`` fields whose change makes the job's record be read again (not StartTime/EndTime: a pending job's
#: estimate moves with every backfill pass; not the priority itself: its age part grows; held = priority 0)
# fmt: off
FIELDS = ("JobID", "State", "Reason", "PriorityLong", "NodeList", "RestartCnt", "AdminComment", "Comment",
          "TresPerNode", "TresPerJob", "TresPerTask", "TimeLimit", "Nice", "Partition", "Account", "Feature", "Name",
          "NumNodes", "UserName", "SubmitTime", "EligibleTime", "ReqNodes")
# fmt: on
_PRIORITY = FIELDS.index("PriorityLong")
#: every job's record is read again at least once in this many reads
REFRESH_READS = 10
#: when more than this share of the jobs changed, one full ``squeue --json`` is cheaper than the lists (the JSON
#: is most of the cost and is made only for the jobs asked for; each call adds ~0.05 s of loading every job)
FULL_SHARE = 0.75
#: job ids per ``squeue --json -j`` call
CHUNK = 1000
#: a list of more than twice this many ids is read in two calls at once
SPLIT_MIN = 100


def listing_argv(sep: str) -> list[str]:
    return ["squeue", "-h", "--states=all", "-O", ",".join(f"{f}:{sep}" for f in FIELDS)]


def parse_listing(text: str, sep: str) -> dict[int, tuple] | None:
    """{job_id: signature} of a listing, or None when it is not the format asked for (then read everything)."""
    parts = text.split(sep)
    k = len(FIELDS)
    if parts and parts[-1].strip():
        return None
    parts = parts[:-1] if parts else parts
    if len(parts) % k:
        return None
    out: dict[int, tuple] = {}
    for i in range(0, len(parts), k):
        rec = parts[i : i + k]
        head = rec[0].lstrip("\n")
        if not head.isdigit():
            return None
        rec[_PRIORITY] = "held" if rec[_PRIORITY].strip() == "0" else "-"
        out[int(head)] = tuple(rec[1:])
    return out


def read_selected(run: Callable[[list[str]], str], ids: list[int]) -> tuple[list[SlurmJob], Meta | None]:
    """``squeue --json -j`` for `ids` (23.x and newer apply it), at most CHUNK ids a call, and a list of more than
    2 x SPLIT_MIN ids in two calls run at once (squeue makes the JSON: two processes make it on two cores); ids
    Slurm no longer knows are not listed. The Meta is the last answer's (None when no call answered)."""
    parts = max(-(-len(ids) // CHUNK), 2 if len(ids) > 2 * SPLIT_MIN else 1)
    size = -(-len(ids) // parts) if ids else 1
    chunks = [ids[i : i + size] for i in range(0, len(ids), size)]

    def one(chunk):
        try:
            return parse_squeue_meta(run(["squeue", "--json", "--states=all", "-j", ",".join(map(str, chunk))]))
        except SlurmError as exc:
            if "invalid job id" not in str(exc).lower():
                raise
            return [], None  # every id of the chunk left Slurm

    if len(chunks) > 1:
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(one, chunks))
    else:
        answers = [one(c) for c in chunks]
    out: list[SlurmJob] = []
    meta = None
    for jobs, m in answers:
        out.extend(jobs)
        meta = m or meta
    return out, meta


class QueueReader:
    """Every job Slurm lists, each as fresh as its listing (see the module docstring). One per controller."""

    def __init__(self):
        self._jobs: dict[int, SlurmJob] = {}
        self._sigs: dict[int, tuple] = {}
        self._meta = Meta()
        self._reads = 0
        #: what the last read did: {"mode": "full" | "changed", "json_jobs": N, "listed": N}
        self.last: dict = {}

    def read(self, run: Callable[[list[str]], str], version: str) -> tuple[list[SlurmJob], Meta]:
        """``run(argv) -> stdout``; ``version``: major.minor the Slurm answering declared ("" = not yet known)."""
        self._reads += 1
        if version.startswith("22."):
            return self._full(run, None)
        sep = f"~{secrets.token_hex(8)}~"
        try:
            listed = parse_listing(run(listing_argv(sep)), sep)
        except SlurmError as exc:
            if unreachable(exc):
                raise
            listed = None  # a Slurm without one of the fields: read everything
        if listed is None or not version:
            return self._full(run, listed)
        turn = self._reads % REFRESH_READS
        want = [
            j
            for j, sig in listed.items()
            if j % REFRESH_READS == turn or j not in self._jobs or self._sigs.get(j) != sig
        ]
        if len(want) > FULL_SHARE * len(listed):
            return self._full(run, listed, split=True)
        for j in [j for j in self._jobs if j not in listed]:
            self._forget(j)
        jobs, meta = read_selected(run, want)
        self._meta = meta or self._meta
        fresh = {j.job_id: j for j in jobs}
        for j in want:
            if j in fresh:
                self._jobs[j], self._sigs[j] = fresh[j], listed[j]
            else:  # listed, then gone: read again next time if it is still listed
                self._forget(j)
        self.last = {"mode": "changed", "json_jobs": len(fresh), "listed": len(listed)}
        return [self._jobs[j] for j in listed if j in self._jobs], self._meta

    def _full(self, run, listed: dict | None, split: bool = False) -> tuple[list[SlurmJob], Meta]:
        """Every job's record: one ``squeue --json``, or (`split`: a Slurm that applies ``-j``) every listed job
        by read_selected, in two calls at once."""
        if split and listed:
            jobs, meta = read_selected(run, sorted(listed))
            meta = meta or self._meta
        else:
            jobs, meta = parse_squeue_meta(run(["squeue", "--json", "--states=all"]))
        self._meta = meta
        self._jobs = {j.job_id: j for j in jobs}
        self._sigs = {j: listed[j] for j in self._jobs if listed and j in listed}
        self.last = {"mode": "full", "json_jobs": len(jobs), "listed": len(listed) if listed is not None else None}
        return jobs, meta

    def _forget(self, job_id: int) -> None:
        self._jobs.pop(job_id, None)
        self._sigs.pop(job_id, None)
