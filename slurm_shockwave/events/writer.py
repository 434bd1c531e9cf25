"""Append events to a job's event file: one validated JSON line per ``os.write``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from slurm_shockwave.events.schema import check_job_id, encode_line, make_record
from slurm_shockwave.events.store import ensure_job_dir, job_event_path, open_append, write_line


class EventWriter:
    """Appends schema-v1 events for one job to one file.

    The file is opened per event (O_APPEND|O_CREAT|O_NOFOLLOW), so a writer is cheap,
    fork-safe and survives the file being rotated away.  ``emit`` validates the record
    with the same rules the reader applies and raises ``ValueError`` / ``OSError`` on
    failure; the training API wraps it so that training never crashes on event errors.
    """

    def __init__(self, path: str | os.PathLike, job_id: str, restart: int = 0, source: str | None = None):
        self.path = Path(path)
        self.job_id = check_job_id(job_id)
        self.restart = int(restart)
        self.source = source

    @classmethod
    def for_job(cls, root: str | os.PathLike, job_id: str, restart: int = 0, source: str | None = None) -> EventWriter:
        """Writer for ``<root>/<jobid>/events.jsonl``; creates the job directory."""
        ensure_job_dir(root, job_id)
        return cls(job_event_path(root, job_id), job_id, restart, source)

    def record(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Build (and validate) the record ``emit`` would write, without writing it."""
        ts = fields.pop("ts", None)
        if self.source is not None:
            fields.setdefault("source", self.source)
        return make_record(kind, self.job_id, self.restart, ts, **fields)

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Validate, encode and append one event; returns the record written."""
        rec = self.record(kind, **fields)
        data = encode_line(rec)
        fd = open_append(self.path)
        try:
            write_line(fd, data)
        finally:
            os.close(fd)
        return rec


def append_event(path: str | os.PathLike, kind: str, job_id: str, restart: int = 0, **fields: Any) -> dict[str, Any]:
    """One-shot helper: append a single event to ``path``."""
    return EventWriter(path, job_id, restart).emit(kind, **fields)
