"""Which holds are the controller's: a mark in the job's AdminComment, in Slurm itself.

AdminComment is writable only by Slurm administrators (root/SlurmUser/operators), so a user cannot forge
or remove the mark, and it survives a crash of the controller, a lost or reset state directory and a
restart of slurmctld.  The enactor writes the mark BEFORE it holds or preempts a job and clears it only
AFTER the job was released; every round (so also the first round after a start-up) the reconcile trusts
the mark, not the journal and not Slurm's hold reason (``requeuehold`` leaves ``JobHeldUser`` on 22.05):

* a job marked ``held`` that is not planned stays held (an admin hold; a user hold left by a crash between
  ``requeuehold`` and ``hold`` is turned into an admin hold);
* a job marked ``held`` that is planned is released, then unmarked;
* a marked job the controller no longer manages is released and unmarked;
* ``shockwave controller uninstall`` releases and unmarks every marked job (read from Slurm).

Text: ``shockwave:held <short reason>``; an AdminComment an admin set before is kept in front:
``<theirs> | shockwave:held deferred`` (and restored when the mark is cleared).  Only this module writes
or reads the mark (`format_mark`, `parse_mark`, `marked`, `unmarked`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "shockwave:"
SEP = " | "
STATUSES = ("held",)
MAX_REASON = 80
_UNSAFE = re.compile(r"[^\x20-\x7e]|\|")


@dataclass(frozen=True)
class Mark:
    status: str  # held
    reason: str = ""
    foreign: str = ""  # an AdminComment that was there before ours


def _clean(text: str, limit: int) -> str:
    return " ".join(_UNSAFE.sub(" ", str(text or "")).split())[:limit]


def format_mark(status: str, reason: str = "", foreign: str = "") -> str:
    if status not in STATUSES:
        raise ValueError(f"unknown mark status {status!r}")
    ours = PREFIX + status + (" " + _clean(reason, MAX_REASON) if _clean(reason, MAX_REASON) else "")
    foreign = _clean(foreign, 400)
    return f"{foreign}{SEP}{ours}" if foreign else ours


def parse_mark(text) -> Mark | None:
    """The controller's mark in an AdminComment, None when there is none (anything else is not ours)."""
    if not isinstance(text, str) or PREFIX not in text:
        return None
    foreign, sep, ours = text.rpartition(SEP + PREFIX)
    if not sep:
        if not text.startswith(PREFIX):
            return None
        foreign, ours = "", text[len(PREFIX) :]
    status, _, reason = ours.partition(" ")
    if status not in STATUSES:
        return None
    return Mark(status, reason.strip(), foreign)


def marked(admin_comment: str, status: str, reason: str = "") -> str:
    """The AdminComment with our mark set (an admin's own text kept)."""
    m = parse_mark(admin_comment)
    foreign = m.foreign if m else (admin_comment or "")
    return format_mark(status, reason, foreign)


def unmarked(admin_comment: str) -> str:
    """The AdminComment with our mark removed (what it was before we marked it)."""
    m = parse_mark(admin_comment)
    return m.foreign if m else (admin_comment or "")


def status_of(admin_comment) -> str | None:
    m = parse_mark(admin_comment)
    return m.status if m else None


def admin_comments(jobs) -> dict:
    """{job_id: AdminComment} of these SlurmJobs (squeue --json carries it on every supported version)."""
    return {j.job_id: j.admin_comment or "" for j in jobs}
