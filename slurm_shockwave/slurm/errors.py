"""Errors raised by the Slurm CLI layer."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from slurm_shockwave.backends.base import BackendUnavailable


def one_line(text: str, limit: int = 500) -> str:
    """Collapse ``text`` to one line (`` | `` between lines), cut to ``limit`` characters."""
    joined = " | ".join(part.strip() for part in (text or "").splitlines() if part.strip())
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


class SlurmError(BackendUnavailable):
    """A Slurm command failed or returned output that cannot be trusted.

    ``str(exc)`` is one line holding the command and its stderr. Attributes: ``cmd`` (argument
    list or None), ``returncode`` (None when the command did not finish), ``stderr``.
    """

    def __init__(self, message: str, cmd: Sequence[str] | None = None, returncode: int | None = None, stderr: str = ""):
        self.cmd = list(cmd) if cmd is not None else None
        self.returncode = returncode
        self.stderr = stderr or ""
        super().__init__(one_line(message, limit=1000))

    @classmethod
    def from_command(cls, cmd: Sequence[str], returncode: int | None, stderr: str, what: str = "failed") -> SlurmError:
        rc = f" (rc={returncode})" if returncode is not None else ""
        detail = one_line(stderr)
        msg = f"`{shlex.join(cmd)}` {what}{rc}" + (f": {detail}" if detail else "")
        return cls(msg, cmd=cmd, returncode=returncode, stderr=stderr)


class SlurmTimeout(SlurmError):
    """A Slurm command did not finish within the timeout (it was killed)."""


def unreachable(exc: Exception) -> bool:
    """Did this call fail because slurmctld did not answer (rather than because of what it was asked)?"""
    text = str(exc).lower()
    return isinstance(exc, SlurmTimeout) or "unable to contact slurm controller" in text or "connection refused" in text


def update_refused_until_requeue(exc: Exception) -> bool:
    """Did slurmctld refuse an ``scontrol update`` because the job's DB index is unset?  A running job resized in place
    (its ``NodeList`` set to nodes it runs on: slurm/nodes.py) has none until it is requeued on a cluster without
    slurmdbd, and slurmctld refuses every update of it (after retrying for 5 s); ``requeue`` and ``scancel`` still
    work (checked on 22.05)."""
    return "the db index is being set" in str(exc).lower()
