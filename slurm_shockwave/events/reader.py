"""Incremental, defensive reader of the event store.

Never raises on file *content*: every bad line is counted in ``rejected`` (a Counter of
reasons) and listed per job as ``(line_no, reason)``.  Only complete lines are consumed;
a torn last line (no newline yet) is left for the next call.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from slurm_shockwave.events.layout import EVENTS_NAME, SYSTEM_DIR, SYSTEM_SUFFIX, USERS_DIR, system_file_name
from slurm_shockwave.events.schema import (
    MAX_FUTURE_S,
    MAX_LINE_BYTES,
    SYSTEM_KINDS,
    Event,
    decode_line,
    is_valid_job_id,
)
from slurm_shockwave.events.store import FileRejected, job_file_candidates, list_job_ids, open_for_read

#: Per-job cap on remembered rejected lines (the counter keeps counting).
MAX_REJECTED_PER_JOB = 200
#: Bytes read from one file per poll() (the rest comes on the next call): bounds what one job can add
#: to a round (about 4,500 typical lines).
MAX_READ_PER_POLL = 1 << 20
#: read_job() stops after this many bytes and records ``file_too_large``.
MAX_FILE_BYTES = 64 << 20


@dataclass
class JobEvents:
    """Result of :meth:`EventReader.read_job`: accepted events (time-ordered) and rejections."""

    job_id: str
    events: list[Event] = field(default_factory=list)
    rejected: list[tuple[str, int, str]] = field(default_factory=list)  # (file, line_no, reason)

    @property
    def rejected_count(self) -> int:
        return len(self.rejected)


@dataclass
class _FileState:
    offset: int = 0
    line_no: int = 0
    skip: bool = False  # inside an oversized line: drop bytes up to the next newline
    ino: int = 0
    dev: int = 0


class EventReader:
    """Reads ``<root>/<jobid>/events.jsonl`` and ``<root>/_system/<jobid>.jsonl``.

    * job files count only if owned by the job's uid (``expected_uid``; ``None`` = not
      checked) and may not contain system kinds (prolog_*, epilog_*, requeue);
    * system files count only if owned by a uid in ``system_uids`` (root and SlurmUser)
      and may contain only system kinds;
    * symlinks, non-regular and hard-linked files are rejected (reason per file).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        system_uids: Iterable[int] = (0,),
        max_future_s: float = MAX_FUTURE_S,
        clock: Callable[[], float] = time.time,
        max_read_per_poll: int = MAX_READ_PER_POLL,
    ):
        self.root = os.fspath(root)
        self.system_uids = frozenset(int(u) for u in system_uids)
        self.max_future_s = float(max_future_s)
        self.clock = clock
        self.max_read_per_poll = max(int(max_read_per_poll), MAX_LINE_BYTES)
        self.rejected: Counter[str] = Counter()
        self.accepted = 0  # lines accepted by poll() since this reader was made (metrics)
        self.rejected_lines: dict[str, list[tuple[int, str]]] = {}
        self._state: dict[str, _FileState] = {}
        self._job_keys: dict[str, set[str]] = {}  # job id -> its keys in _state (O(1) export/forget)
        self._file_rejects: dict[str, str] = {}

    # ----------------------------------------------------------------- offsets
    def export_offsets(self, job_ids: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
        """JSON-serialisable per-file state (keys like ``users/1001/123/events.jsonl``), of every
        file or only of ``job_ids``'s files."""
        keys = (
            list(self._state)
            if job_ids is None
            else [k for j in job_ids for k in self._job_keys.get(str(j), ()) if k in self._state]
        )
        return {
            k: {"offset": s.offset, "line_no": s.line_no, "skip": int(s.skip), "ino": s.ino, "dev": s.dev}
            for k in keys
            for s in (self._state[k],)
        }

    def import_offsets(self, data: Mapping[str, Any]) -> None:
        """Restore state saved by :meth:`export_offsets`; malformed entries are ignored."""
        if not isinstance(data, Mapping):
            return
        for key, val in data.items():
            job = _key_job(key) if isinstance(key, str) else None
            if job is None or not isinstance(val, Mapping):
                continue
            try:
                st = _FileState(
                    int(val.get("offset", 0)),
                    int(val.get("line_no", 0)),
                    bool(val.get("skip", 0)),
                    int(val.get("ino", 0)),
                    int(val.get("dev", 0)),
                )
            except (TypeError, ValueError):
                continue
            if st.offset >= 0 and st.line_no >= 0:
                self._state[key] = st
                self._job_keys.setdefault(job, set()).add(key)

    # ------------------------------------------------------------------ public
    def poll(self, jobs: Mapping[str, int | None] | Iterable[str] | None = None) -> dict[str, list[Event]]:
        """New accepted events since the last call, per job id (time-ordered).

        ``jobs`` maps job id -> expected uid (the job's Slurm user); an iterable of ids or
        ``None`` (every job found under the root) means the owner is not checked.
        """
        if jobs is None:
            jobs = list_job_ids(self.root)
        uids: Mapping[str, int | None] = jobs if isinstance(jobs, Mapping) else dict.fromkeys(jobs)
        out: dict[str, list[Event]] = {}
        for job_id, uid in uids.items():
            job_id = str(job_id)
            if not is_valid_job_id(job_id):
                self._reject(job_id, "?", 0, "bad_job_id")
                continue
            evs = self._read_file(job_id, False, uid, incremental=True)
            evs += self._read_file(job_id, True, None, incremental=True)
            if evs:
                evs.sort(key=lambda e: e.ts)
                out[job_id] = evs
                self.accepted += len(evs)
        return out

    def read_job(self, job_id: str, expected_uid: int | None = None) -> JobEvents:
        """All accepted events of one job plus its rejected lines (does not move offsets)."""
        job_id = str(job_id)
        res = JobEvents(job_id)
        if not is_valid_job_id(job_id):
            res.rejected.append(("?", 0, "bad_job_id"))
            return res
        for system in (False, True):
            res.events += self._read_file(job_id, system, expected_uid, incremental=False, sink=res.rejected)
        res.events.sort(key=lambda e: e.ts)
        return res

    # ---------------------------------------------------------------- internals
    def _reject(self, job_id: str, fname: str, line_no: int, reason: str, sink: list | None = None) -> None:
        if sink is not None:  # read_job(): report to the caller only
            if len(sink) < MAX_FILE_BYTES // 64:
                sink.append((fname, line_no, reason))
            return
        self.rejected[reason] += 1
        lst = self.rejected_lines.setdefault(job_id, [])
        if len(lst) < MAX_REJECTED_PER_JOB:
            lst.append((line_no, reason))

    def _target(self, job_id: str, system: bool, uid: int | None):
        """(key, open_for_read kwargs) of the file to read, or (key, reason) when it is ambiguous."""
        if system:
            return f"{SYSTEM_DIR}/{system_file_name(job_id)}", {"system": True, "allowed_uids": self.system_uids}
        if uid is None:
            cands = job_file_candidates(self.root, job_id)
            if len(cands) > 1:
                return f"{USERS_DIR}/*/{job_id}/{EVENTS_NAME}", "ambiguous_owner"
            if not cands:
                return f"{job_id}/{EVENTS_NAME}", {"legacy": True, "allowed_uids": None}
            uid = cands[0]
        key = f"{USERS_DIR}/{uid}/{job_id}/{EVENTS_NAME}"
        kw = {"uid": uid, "allowed_uids": frozenset({uid})}
        if not os.path.lexists(os.path.join(self.root, USERS_DIR, str(uid), job_id)) and os.path.lexists(
            os.path.join(self.root, job_id)
        ):
            return f"{job_id}/{EVENTS_NAME}", {"legacy": True, "allowed_uids": frozenset({uid})}
        return key, kw

    def _read_file(
        self, job_id: str, system: bool, uid: int | None, *, incremental: bool, sink: list | None = None
    ) -> list[Event]:
        key, kw = self._target(job_id, system, uid)
        try:
            if isinstance(kw, str):
                raise FileRejected(kw, key)
            fd, st = open_for_read(self.root, job_id, **kw)
        except FileNotFoundError:
            return []
        except (FileRejected, OSError) as exc:
            reason = exc.reason if isinstance(exc, FileRejected) else f"open_failed:{exc.errno}"
            # count a rejected file once per poll-state, not once per poll() call
            if sink is not None or self._file_rejects.get(key) != reason:
                self._reject(job_id, key, 0, reason, sink)
                if sink is None:
                    self._file_rejects[key] = reason
                    self._job_keys.setdefault(job_id, set()).add(key)
            return []
        self._file_rejects.pop(key, None)
        try:
            if not incremental:
                return self._scan(fd, job_id, key, system, _FileState(), MAX_FILE_BYTES, sink)
            state = self._state.get(key)
            if state is None or (state.ino, state.dev) not in ((0, 0), (st.st_ino, st.st_dev)):
                if state is not None:
                    self._reject(job_id, key, 0, "file_replaced")
                state = _FileState()
            elif st.st_size < state.offset:
                self._reject(job_id, key, 0, "file_truncated")
                state = _FileState()
            state.ino, state.dev = st.st_ino, st.st_dev
            self._state[key] = state
            self._job_keys.setdefault(job_id, set()).add(key)
            return self._scan(fd, job_id, key, system, state, self.max_read_per_poll, None)
        finally:
            os.close(fd)

    def forget(self, job_ids: Iterable[str]) -> None:
        """Drop the offsets and remembered rejections of jobs that are gone (bounded memory)."""
        for j in {str(j) for j in job_ids}:
            for key in self._job_keys.pop(j, ()):
                self._state.pop(key, None)
                self._file_rejects.pop(key, None)
            for system in (True, False):
                self._file_rejects.pop(f"{SYSTEM_DIR}/{system_file_name(j)}" if system else f"{j}/{EVENTS_NAME}", None)
            self.rejected_lines.pop(j, None)

    def _scan(
        self, fd: int, job_id: str, key: str, system: bool, state: _FileState, budget: int, sink: list | None
    ) -> list[Event]:
        """Consume complete lines from ``state.offset`` on (at most ``budget`` bytes)."""
        events: list[Event] = []
        now = self.clock()
        total = 0
        while total < budget:
            try:
                chunk = os.pread(fd, min(1 << 20, budget - total) + MAX_LINE_BYTES, state.offset)
            except OSError as exc:
                self._reject(job_id, key, state.line_no, f"read_failed:{exc.errno}", sink)
                break
            if not chunk:
                break
            pos = 0
            while True:
                nl = chunk.find(b"\n", pos)
                if nl < 0:
                    break
                line = chunk[pos:nl]
                pos = nl + 1
                if state.skip:  # tail of an oversized line, already counted
                    state.skip = False
                    continue
                state.line_no += 1
                if not line.strip():
                    continue
                ev, reason = decode_line(line, job_id, now=now, max_future_s=self.max_future_s)
                if ev is not None:
                    if (ev.kind in SYSTEM_KINDS) != system:
                        reason = "job_kind_in_system_file" if system else "system_kind_in_job_file"
                    else:
                        events.append(_with_origin(ev, system, state.line_no))
                        continue
                self._reject(job_id, key, state.line_no, reason or "invalid", sink)
            rest = len(chunk) - pos
            if rest >= MAX_LINE_BYTES and not state.skip:
                # no newline within the cap: an oversized line; skip it up to its newline
                state.line_no += 1
                self._reject(job_id, key, state.line_no, "oversized", sink)
                state.skip = True
                pos = len(chunk)
            elif state.skip and rest:
                pos = len(chunk)  # still inside the oversized line
            state.offset += pos
            total += pos
            if pos == 0:
                break  # only a torn (incomplete) last line remains
        else:
            if sink is not None:
                self._reject(job_id, key, state.line_no, "file_too_large", sink)
        return events


def _with_origin(ev: Event, system: bool, line_no: int) -> Event:
    return replace(ev, origin="system" if system else "job", line_no=line_no)


def _key_job(key: str) -> str | None:
    """The job id of an offsets key (``users/<uid>/<job>/events.jsonl``, ``<job>/events.jsonl`` or
    ``_system/<job>.jsonl``), or None if the key is malformed."""
    parts = key.split("/")
    if len(parts) == 2 and parts[0] == SYSTEM_DIR and parts[1].endswith(SYSTEM_SUFFIX):
        job = parts[1][: -len(SYSTEM_SUFFIX)]
    elif len(parts) == 2 and parts[1] == EVENTS_NAME:
        job = parts[0]
    elif (
        len(parts) == 4
        and parts[0] == USERS_DIR
        and parts[1].isascii()
        and parts[1].isdigit()
        and len(parts[1]) <= 10
        and parts[3] == EVENTS_NAME
    ):
        job = parts[2]
    else:
        return None
    return job if is_valid_job_id(job) else None
