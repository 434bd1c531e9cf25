"""The controller's durable state: SQLite in WAL mode under the state directory.

What survives a crash or restart: every round (time, decision, solve time, path), the latest plan and its
per-job explanations, per-job history, the journal of enactment actions (intent before the Slurm call,
done after), the policy's own state and the event reader's offsets.  Readers (the status CLI) open the
file read-only while the controller runs.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from slurm_shockwave.journal.verbs import HOLDING, Verb
from slurm_shockwave.strict_json import dumps

SCHEMA = """
CREATE TABLE IF NOT EXISTS rounds (
    round INTEGER PRIMARY KEY, started REAL, finished REAL, active INTEGER, run TEXT, decide_seconds REAL,
    mode TEXT, fallback INTEGER, status TEXT, capacity INTEGER, busy INTEGER);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, user TEXT, account TEXT, gpus INTEGER, state TEXT, submit_time REAL,
    first_seen REAL, last_seen REAL, finished REAL, restarts INTEGER, view TEXT);
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, round INTEGER, job_id TEXT, verb TEXT, value TEXT,
    restart_count INTEGER, status TEXT, ts REAL, error TEXT);
CREATE INDEX IF NOT EXISTS actions_job ON actions (job_id, verb, status);
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS round_views (round INTEGER PRIMARY KEY, ts REAL, payload TEXT);
CREATE TABLE IF NOT EXISTS epoch_history (
    user TEXT, program TEXT, bs INTEGER, epochs INTEGER, seconds REAL, PRIMARY KEY (user, program, bs));
"""
KEEP_ROUND_VIEWS = 5  # snapshots kept (status reads the latest; a few for post-mortems)


class StateStore:
    def __init__(self, path, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        if readonly:
            if not self.path.exists():
                raise FileNotFoundError(f"no controller state at {self.path}")
            self.db = _open_readonly(self.path)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(SCHEMA)
        self.db.row_factory = sqlite3.Row

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ key/value (policy state, offsets)
    def get(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        return json.loads(row["value"]) if row else default

    def put(self, key: str, value: Any) -> None:
        self.db.execute(
            "INSERT INTO kv(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, dumps(value)),
        )

    # ------------------------------------------------------------------ rounds
    def next_round(self) -> int:
        row = self.db.execute("SELECT MAX(round) AS r FROM rounds").fetchone()
        return 0 if row["r"] is None else row["r"] + 1

    def begin_round(self, round_index: int, started: float) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO rounds(round, started, status) VALUES(?, ?, 'deciding')", (round_index, started)
        )

    def record_round(self, record, busy: int) -> None:
        """The round's one record (journal/record.py), written once, before anything is enacted: the rounds
        row and the full record (what `status` and `explain` read), in one transaction."""
        payload = dumps(record.to_json())
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "UPDATE rounds SET active=?, run=?, decide_seconds=?, mode=?, fallback=?, status='enacting',"
                " capacity=?, busy=? WHERE round=?",
                (
                    len(record.view.jobs),
                    dumps([str(j) for j in record.run]),
                    record.decide_seconds,
                    record.context.mode,
                    int(record.fallback),
                    record.view.num_gpus,
                    busy,
                    record.round_index,
                ),
            )
            self.db.execute(
                "INSERT OR REPLACE INTO round_views(round, ts, payload) VALUES(?, ?, ?)",
                (record.round_index, time.time(), payload),
            )
            self.db.execute("DELETE FROM round_views WHERE round < ?", (record.round_index - KEEP_ROUND_VIEWS,))

    def finish_round(self, round_index: int, status: str = "done") -> None:
        self.db.execute("UPDATE rounds SET finished=?, status=? WHERE round=?", (time.time(), status, round_index))

    def last_round(self):
        return self.db.execute("SELECT * FROM rounds ORDER BY round DESC LIMIT 1").fetchone()

    def latest_round(self):
        """(RoundRecord, when it was written) of the latest round, or None."""
        from slurm_shockwave.journal.record import RoundRecord

        try:
            row = self.db.execute("SELECT ts, payload FROM round_views ORDER BY round DESC LIMIT 1").fetchone()
        except sqlite3.OperationalError:  # a state written before this table existed
            return None
        if row is None:
            return None
        try:
            return RoundRecord.from_json(json.loads(row["payload"])), row["ts"]
        except (ValueError, TypeError, KeyError):  # a record of an older layout: no snapshot until the next round
            return None

    # ------------------------------------------------------------------ jobs
    def upsert_jobs(self, rows: list[dict], now: float) -> None:
        with self.db:
            self.db.execute("BEGIN")
            for r in rows:
                self.db.execute(
                    "INSERT INTO jobs(job_id, user, account, gpus, state, submit_time, first_seen, last_seen, restarts,"
                    " view)"
                    " VALUES(:job_id, :user, :account, :gpus, :state, :submit_time, :now, :now, :restarts, :view)"
                    " ON CONFLICT(job_id) DO UPDATE SET state=excluded.state, last_seen=excluded.last_seen,"
                    " finished=NULL, gpus=excluded.gpus, restarts=excluded.restarts, view=excluded.view",
                    {**r, "now": now, "view": dumps(r.get("view", {}))},
                )

    def mark_finished(self, job_ids, now: float) -> None:
        with self.db:
            self.db.execute("BEGIN")
            for j in job_ids:
                self.db.execute(
                    "UPDATE jobs SET finished=?, state='FINISHED' WHERE job_id=? AND finished IS NULL", (now, str(j))
                )

    def first_submit_times(self) -> dict[str, float]:
        """{job: the submit time it had when first seen} (Slurm moves submit_time on every requeue)."""
        rows = self.db.execute(
            "SELECT job_id, submit_time FROM jobs WHERE submit_time IS NOT NULL AND finished IS NULL"
        )
        return {r["job_id"]: float(r["submit_time"]) for r in rows}

    def finish_jobs(self, final: dict, now: float) -> None:
        """Mark jobs finished with their final Slurm state and last view: {job_id: (state, view or None)}."""
        with self.db:
            self.db.execute("BEGIN")
            for j, (state, view) in final.items():
                if view is None:
                    self.db.execute(
                        "UPDATE jobs SET finished=?, state=? WHERE job_id=? AND finished IS NULL", (now, state, str(j))
                    )
                else:
                    self.db.execute(
                        "UPDATE jobs SET finished=?, state=?, view=? WHERE job_id=? AND finished IS NULL",
                        (now, state, dumps(view), str(j)),
                    )

    # ------------------------------------------------------------------ epoch history (ETAs before epoch 1)
    def add_epoch_history(self, user: str, program: str, durations: dict, counts: dict) -> None:
        """Fold a finished job's mean epoch durations per batch size into (user, program)'s history."""
        with self.db:
            self.db.execute("BEGIN")
            for bs, d in durations.items():
                n = int(counts.get(bs, 1) or 1)
                self.db.execute(
                    "INSERT INTO epoch_history(user, program, bs, epochs, seconds) VALUES(?, ?, ?, ?, ?)"
                    " ON CONFLICT(user, program, bs) DO UPDATE SET epochs=epochs+excluded.epochs,"
                    " seconds=seconds+excluded.seconds",
                    (user, program, int(bs), n, float(d) * n),
                )

    def epoch_history(self, user: str, program: str) -> dict[int, tuple[float, int]]:
        """{batch size: (mean epoch seconds, epochs seen)} of the user's finished jobs of this program."""
        try:
            rows = self.db.execute(
                "SELECT bs, epochs, seconds FROM epoch_history WHERE user=? AND program=?", (user, program)
            ).fetchall()
        except sqlite3.OperationalError:
            return {}
        return {int(r["bs"]): (r["seconds"] / r["epochs"], int(r["epochs"])) for r in rows if r["epochs"]}

    def jobs(self, include_finished: bool = False) -> list[dict]:
        q = "SELECT * FROM jobs" + ("" if include_finished else " WHERE finished IS NULL") + " ORDER BY first_seen"
        out = []
        for row in self.db.execute(q):
            d = dict(row)
            d["view"] = json.loads(d["view"] or "{}")
            out.append(d)
        return out

    # ------------------------------------------------------------------ action journal
    def intend(self, round_index, job_id, verb, value, restart_count) -> int:
        cur = self.db.execute(
            "INSERT INTO actions(round, job_id, verb, value, restart_count, status, ts)"
            " VALUES(?, ?, ?, ?, ?, 'intent', ?)",
            (round_index, str(job_id), verb, dumps(value), restart_count, time.time()),
        )
        assert cur.lastrowid is not None  # set by every INSERT
        return cur.lastrowid

    def intend_many(self, round_index, job_ids, verb, value, restart_counts: dict) -> list[int]:
        """`intend` for every job of one action, in one transaction (one commit instead of one per job)."""
        ids: list[int] = []
        now, text = time.time(), dumps(value)
        with self.db:
            self.db.execute("BEGIN")
            for j in job_ids:
                cur = self.db.execute(
                    "INSERT INTO actions(round, job_id, verb, value, restart_count, status, ts)"
                    " VALUES(?, ?, ?, ?, ?, 'intent', ?)",
                    (round_index, str(j), verb, text, restart_counts.get(j, 0), now),
                )
                assert cur.lastrowid is not None  # set by every INSERT
                ids.append(cur.lastrowid)
        return ids

    def settle(self, action_ids, status: str, error: str | None = None) -> None:
        with self.db:
            self.db.execute("BEGIN")
            for a in action_ids:
                self.db.execute("UPDATE actions SET status=?, error=? WHERE id=?", (status, error, a))

    def actions(self, job_id=None, verb=None, status=None, limit=None) -> list[dict]:
        q, args = "SELECT * FROM actions WHERE 1=1", []
        for col, val in (("job_id", job_id), ("verb", verb), ("status", status)):
            if val is not None:
                q += f" AND {col}=?"
                args.append(str(val))
        q += " ORDER BY id DESC" + (f" LIMIT {int(limit)}" if limit else "")
        return [dict(r) for r in self.db.execute(q, args)]

    def last_values(self, verb: Verb) -> dict[int, int]:
        """{job: value of its latest done `verb` action} (e.g. the SiteFactor we last set), in one query."""
        rows = self.db.execute("SELECT job_id, value FROM actions WHERE verb=? AND status='done' ORDER BY id", (verb,))
        return {int(r["job_id"]): json.loads(r["value"]) for r in rows}

    def requeued_at(self, job_id, restart_count) -> bool:
        """Was a requeue of this job already issued at this restart count (intent or done)?"""
        row = self.db.execute(
            "SELECT 1 FROM actions WHERE job_id=? AND verb=? AND restart_count=?"
            " AND status IN ('intent', 'done') LIMIT 1",
            (str(job_id), Verb.REQUEUE_HOLD, restart_count),
        ).fetchone()
        return row is not None

    def held_by_us(self) -> set[str]:
        """Jobs whose latest hold/release action is a hold (what uninstall must release).  A requeue-hold left an
        intent (a crash during its call) counts: one whose mark Slurm refused is requeued before it is marked
        (slurm/enact.py), so its hold may be ours with no mark to say so."""
        rows = self.db.execute(
            "SELECT job_id, verb FROM actions WHERE verb IN (?, ?, ?)"
            " AND (status='done' OR (status='intent' AND verb=?)) ORDER BY id",
            (Verb.HOLD, Verb.RELEASE, Verb.REQUEUE_HOLD, Verb.REQUEUE_HOLD),
        )
        held: set[str] = set()
        for r in rows:
            (held.add if r["verb"] in HOLDING else held.discard)(r["job_id"])
        return held

    def set_quarantined(self, rows: list[dict], now: float) -> None:
        """Jobs left to Slurm because their data is invalid: state 'QUARANTINED', the one-line reason
        in view["quarantined"] (rows: job_id, user, account, gpus, submit_time, restarts, reason)."""
        with self.db:
            self.db.execute("BEGIN")
            for r in rows:
                self.db.execute(
                    "INSERT INTO jobs(job_id, user, account, gpus, state, submit_time, first_seen, last_seen, restarts,"
                    " view)"
                    " VALUES(:job_id, :user, :account, :gpus, 'QUARANTINED', :submit_time, :now, :now, :restarts,"
                    " :view) ON CONFLICT(job_id) DO UPDATE SET state='QUARANTINED', last_seen=excluded.last_seen,"
                    " finished=NULL, view=excluded.view",
                    {
                        "job_id": str(r["job_id"]),
                        "user": r.get("user"),
                        "account": r.get("account"),
                        "gpus": r.get("gpus"),
                        "submit_time": r.get("submit_time"),
                        "restarts": r.get("restarts"),
                        "now": now,
                        "view": dumps({"quarantined": r["reason"]}),
                    },
                )

    # ------------------------------------------------------------------ event progress
    # per job: the event reader's offsets and the bounded summary (events/summary.py ProgressState), saved
    # only for jobs with new lines; `final=1` rows are the last summary of jobs that left the queue.
    _EVENT_TABLE = (
        "CREATE TABLE IF NOT EXISTS event_progress (job_id TEXT PRIMARY KEY, offsets TEXT, summary TEXT,"
        " final INTEGER DEFAULT 0, updated REAL)"
    )

    def load_event_progress(self) -> dict[str, dict]:
        """{job_id: {"offsets", "summary", "final"}} of the jobs still active (final=0)."""
        try:
            rows = self.db.execute("SELECT job_id, offsets, summary FROM event_progress WHERE final=0").fetchall()
        except sqlite3.OperationalError:  # no table yet (first run, or a read-only older state)
            return {}
        return {
            r["job_id"]: {"offsets": json.loads(r["offsets"] or "{}"), "summary": json.loads(r["summary"] or "{}")}
            for r in rows
        }

    def save_event_progress(self, rows: dict[str, dict], finals: dict[str, dict]) -> None:
        """Upsert the changed jobs' offsets + summaries, and the final summaries of jobs that left the queue."""
        now = time.time()
        with self.db:
            self.db.execute(self._EVENT_TABLE)
            self.db.execute("BEGIN")
            for j, r in rows.items():
                self.db.execute(
                    "INSERT INTO event_progress(job_id, offsets, summary, final, updated) VALUES(?, ?, ?, 0, ?)"
                    " ON CONFLICT(job_id) DO UPDATE SET offsets=excluded.offsets, summary=excluded.summary,"
                    " final=0, updated=excluded.updated",
                    (str(j), dumps(r.get("offsets") or {}), dumps(r.get("summary") or {}), now),
                )
            for j, summary in finals.items():
                self.db.execute(
                    "INSERT INTO event_progress(job_id, offsets, summary, final, updated) VALUES(?, '{}', ?, 1, ?)"
                    " ON CONFLICT(job_id) DO UPDATE SET offsets='{}', summary=excluded.summary, final=1,"
                    " updated=excluded.updated",
                    (str(j), dumps(summary), now),
                )

    def event_outcome(self, job_id) -> dict | None:
        """The saved event summary of a job (final or current); feed it to ProgressState.from_dict."""
        try:
            row = self.db.execute("SELECT summary FROM event_progress WHERE job_id=?", (str(job_id),)).fetchone()
        except sqlite3.OperationalError:
            return None
        return json.loads(row["summary"]) if row and row["summary"] else None


def _open_readonly(path: Path) -> sqlite3.Connection:
    """Read-only for any user: `mode=ro` (no writes, works beside a running controller); when that cannot
    open the WAL files (the controller is stopped and the directory is not writable for this user), read
    the file as immutable (no locks, no WAL: the controller is not writing it)."""
    errors = []
    for uri in (f"file:{path}?mode=ro", f"file:{path}?immutable=1"):
        db = sqlite3.connect(uri, uri=True, timeout=10)
        try:
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return db
        except sqlite3.Error as e:
            errors.append(str(e))
            db.close()
    raise PermissionError(f"cannot read the controller state {path}: {errors[-1]}")
