"""The controller's per-job event state: a bounded :class:`ProgressState` per active job, fed only the
new lines of each round, with the reader's offsets and the summaries persisted in the controller state.

    tracker = EventTracker(reader, state)          # restores offsets + summaries saved by the last run
    tracker.poll({job_id: uid}, {job_id: hints})   # reads new lines, folds them, saves what changed
    tracker.progress(job_id)                       # JobProgress (O(1) in the number of lines)
    tracker.outcome(job_id)                        # final summary of a job that left the queue

Per round the cost is the new lines (at most ``MAX_LINES_PER_ROUND``; a backlog is read over several rounds)
plus O(active jobs); memory per job is bounded (see summary.py) and the
state of a job that left the queue is dropped (its final summary is kept in the state for status/explain).
``state`` is a controller StateStore with ``load_event_progress`` / ``save_event_progress``; ``None`` keeps
everything in memory (tests, simulations).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from slurm_shockwave.events.progress import JobProgress
from slurm_shockwave.events.summary import HINT_FIELDS, ProgressState

log = logging.getLogger("slurm_shockwave.events")
#: event lines (accepted + rejected) read per round at most, over all jobs; a backlog (first start on a full
#: store, many jobs writing fast) is read over several rounds, so no round is slowed by more than this
MAX_LINES_PER_ROUND = 50_000


def hint_dict(hints: Any) -> dict[str, Any]:
    """Comment hints as a plain dict (accepts a mapping or an object with attributes)."""
    if hints is None:
        return {}
    if isinstance(hints, Mapping):
        return {k: hints[k] for k in HINT_FIELDS if hints.get(k) is not None}
    return {k: getattr(hints, k) for k in HINT_FIELDS if getattr(hints, k, None) is not None}


class EventTracker:
    def __init__(self, reader, state=None, max_lines_per_round: int = MAX_LINES_PER_ROUND):
        self.reader, self.state = reader, state
        self.max_lines_per_round = int(max_lines_per_round)
        self._cursor = 0
        self.jobs: dict[str, ProgressState] = {}
        self.uids: dict[str, int | None] = {}
        self._saved: dict[str, dict] = {}
        if state is not None and hasattr(state, "load_event_progress"):
            try:
                self._saved = state.load_event_progress()
            except Exception as exc:  # noqa: BLE001 - a damaged row costs a re-read, never the round
                log.warning("event progress not restored (%s); re-reading the event files", exc)
                self._saved = {}
            offsets: dict = {}
            for row in self._saved.values():
                offsets.update(row.get("offsets") or {})
            if reader is not None:
                reader.import_offsets(offsets)

    def _job(self, job_id: str, hints: Any) -> ProgressState:
        st = self.jobs.get(job_id)
        declared = hint_dict(hints)
        if st is None:
            row = self._saved.pop(job_id, None)
            st = (
                ProgressState.from_dict(job_id, row["summary"], declared)
                if row and row.get("summary")
                else ProgressState(job_id, declared)
            )
            if row and not row.get("summary") and self.reader is not None:
                self.reader.forget([job_id])  # offsets without a summary: read again
            self.jobs[job_id] = st
        else:
            st.set_declared(declared)
        return st

    def poll(self, uids: Mapping[str, int | None], hints: Mapping[str, Any] | None = None) -> list[str]:
        """Read the new lines of the active jobs ``{job_id: uid}``; returns the ids whose state changed."""
        hints = hints or {}
        for job_id in uids:
            self._job(job_id, hints.get(job_id))
        self.uids.update(uids)
        changed: list[str] = []
        if self.reader is not None:
            ids = list(uids)
            start = self._cursor % len(ids) if ids else 0
            lines0 = self._lines()
            try:
                for n, job_id in enumerate(ids[start:] + ids[:start]):  # one job at a time: bounded memory
                    if self._lines() - lines0 >= self.max_lines_per_round:
                        self._cursor = start + n  # the rest next round, starting here (no starvation)
                        log.info(
                            "event lines: round budget of %d used; %d jobs read next round",
                            self.max_lines_per_round,
                            len(ids) - n,
                        )
                        break
                    events = self.reader.poll({job_id: uids[job_id]}).get(job_id)
                    if events:
                        self.jobs[job_id].add(events)
                        changed.append(job_id)
            except OSError as exc:
                log.warning("event store unreadable: %s", exc)
        gone = [j for j in self.jobs if j not in uids]
        finals: dict[str, dict] = {}
        if gone:
            finals = self._finish(gone)
        stale = list(self._saved)  # saved jobs that never came back: final too
        if stale:
            for j in stale:
                row = self._saved.pop(j)
                if row.get("summary") and not row.get("final"):
                    finals[j] = row["summary"]
        self._save(changed, finals)
        return changed

    def _lines(self) -> int:
        return self.reader.accepted + sum(self.reader.rejected.values())

    def _finish(self, gone: list[str]) -> dict[str, dict]:
        """One last read of jobs that left the queue, then drop their state (bounded memory)."""
        if self.reader is not None:
            try:
                for job_id, events in self.reader.poll({j: self.uids.get(j) for j in gone}).items():
                    self.jobs[job_id].add(events)
            except OSError as exc:
                log.warning("event store unreadable: %s", exc)
            self.reader.forget(gone)
        out = {}
        for j in gone:
            out[j] = self.jobs.pop(j).to_dict()
            self.uids.pop(j, None)
        return out

    def _save(self, changed: list[str], finals: dict[str, dict]) -> None:
        if self.state is None or not hasattr(self.state, "save_event_progress") or not (changed or finals):
            return
        rows = {
            j: {
                "offsets": self.reader.export_offsets([j]) if self.reader is not None else {},
                "summary": self.jobs[j].to_dict(),
            }
            for j in changed
            if j in self.jobs
        }
        try:
            self.state.save_event_progress(rows, finals)
        except Exception as exc:  # noqa: BLE001 - the round goes on; the next save retries
            log.warning("event progress not saved: %s", exc)

    def progress(self, job_id: str) -> JobProgress:
        st = self.jobs.get(str(job_id))
        return st.progress() if st is not None else JobProgress(job_id=str(job_id))

    def outcome(self, job_id: str) -> JobProgress | None:
        """Final summary of a job that left the queue (None if unknown)."""
        if self.state is None or not hasattr(self.state, "event_outcome"):
            return None
        data = self.state.event_outcome(str(job_id))
        return ProgressState.from_dict(str(job_id), data).progress() if data else None
