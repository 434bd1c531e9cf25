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

An elastic job (hint ``gpus=MIN-MAX``) also keeps its base GPU count there, the count it asked for when the
controller first saw it (its fair share is defined on it; its request is resized later): ``shockwave:held base=2
deferred`` while held, ``shockwave:elastic base=2`` otherwise (not a hold: ``elastic`` is never released).  Written
before its first resize, kept by every later mark (`marked`, `unmarked`), removed only by uninstall (`cleared`), so it
survives a restart of the controller, a lost state directory and slurmctld's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "shockwave:"
SEP = " | "
STATUSES = ("held", "elastic")
_BASE = re.compile(r"base=([0-9]{1,6})\Z")
MAX_REASON = 80
_UNSAFE = re.compile(r"[^\x20-\x7e]|\|")


@dataclass(frozen=True)
class Mark:
    status: str  # held | elastic (only the base count)
    reason: str = ""
    foreign: str = ""  # an AdminComment that was there before ours
    base: int | None = None  # an elastic job's base GPU count


def _clean(text: str, limit: int) -> str:
    return " ".join(_UNSAFE.sub(" ", str(text or "")).split())[:limit]


def format_mark(status: str, reason: str = "", foreign: str = "", base: int | None = None) -> str:
    if status not in STATUSES:
        raise ValueError(f"unknown mark status {status!r}")
    reason = _clean(reason, MAX_REASON)
    if _BASE.match(reason.split(" ")[0]):
        reason = "- " + reason  # never read back as a base count
    words = [PREFIX + status] + ([f"base={int(base)}"] if base is not None else []) + ([reason] if reason else [])
    ours = " ".join(words)
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
    first, _, rest = reason.strip().partition(" ")
    base = _BASE.match(first)
    return Mark(status, (rest if base else reason).strip(), foreign, int(base.group(1)) if base else None)


def marked(admin_comment: str, status: str, reason: str = "", base: int | None = None) -> str:
    """The AdminComment with our mark set (an admin's own text and an elastic job's base count kept; `base` sets
    it)."""
    m = parse_mark(admin_comment)
    foreign = m.foreign if m else (admin_comment or "")
    return format_mark(status, reason, foreign, base if base is not None else (m.base if m else None))


def unmarked(admin_comment: str) -> str:
    """The AdminComment with our hold mark removed (what it was before we marked it; an elastic job keeps its
    base count)."""
    m = parse_mark(admin_comment)
    if m is not None and m.base is not None:
        return format_mark("elastic", "", m.foreign, m.base)
    return m.foreign if m else (admin_comment or "")


def cleared(admin_comment: str) -> str:
    """The AdminComment with everything of ours removed (uninstall)."""
    m = parse_mark(admin_comment)
    return m.foreign if m else (admin_comment or "")


def status_of(admin_comment) -> str | None:
    """``held`` (the hold is ours), ``elastic`` (not held: only a base count) or None (nothing of ours)."""
    m = parse_mark(admin_comment)
    return m.status if m else None


def base_of(admin_comment) -> int | None:
    """An elastic job's base GPU count kept in its mark (None: not recorded yet)."""
    m = parse_mark(admin_comment)
    return m.base if m else None


def admin_comments(jobs) -> dict:
    """{job_id: AdminComment} of these SlurmJobs (squeue --json carries it on every supported version)."""
    return {j.job_id: j.admin_comment or "" for j in jobs}


def with_base(admin_comment: str, base: int) -> str:
    """The AdminComment with an elastic job's base count recorded (a hold mark and its reason kept)."""
    m = parse_mark(admin_comment)
    if m is not None:
        return format_mark(m.status, m.reason, m.foreign, base)
    return format_mark("elastic", "", admin_comment or "", base)
