"""A job's events folded into a bounded, incremental summary (what the controller's predictor needs).

:class:`ProgressState` is the controller's per-job state: events are added as they are read (each once) and
:meth:`ProgressState.progress` gives a :class:`JobProgress` in time independent of how many events the job wrote.
Memory is bounded per job whatever the job writes:

* the batch size of each completed epoch is kept run-length encoded (``bs_runs``: ``(batch size, epochs)``
  pairs, at most ``MAX_RUNS``; beyond that the two oldest runs merge and ``history_truncated`` is set);
* epoch counts and duration sums per batch size (at most ``MAX_BATCH_SIZES`` distinct sizes; more are ignored);
  the first epoch a restarted run reports is counted but not timed: a program resumed mid-epoch from its
  checkpoint reports only the part it ran (a 1/3 epoch averaged as a whole one made a long job look 1/3 shorter
  and kept it off the critical path in the replay, docs/replay.md), and so is not a throughput sample either;
* an ``epoch_end`` whose ``epoch`` is at or beyond the job's total (its own report, else the declared
  ``epochs=`` hint, else ``MAX_EPOCHS``) or jumps more than ``MAX_EPOCH_JUMP`` past the last one is ignored and
  counted in ``ignored`` (a hostile ``"epoch": 9999999`` changes nothing).

Each preemption's cost is measured from the job's own events (``preempt_cost_s``, the mean over its
preemptions): the checkpoint (the checkpoint signal to the end of that run) plus the restart (the next run's
start to its first epoch end, less that epoch's own duration: process start, checkpoint load, work redone).

``summarize(events)`` folds a list at once (any order) with the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from slurm_shockwave.events.progress import JobProgress as JobProgress  # re-exported: what summarize gives
from slurm_shockwave.events.schema import Event

MAX_RUNS = 2048
MAX_BATCH_SIZES = 64
MAX_EPOCHS = 1_000_000  # the hint validator's bound on epochs=
MAX_EPOCH_JUMP = 10_000  # an epoch index may skip at most this many unreported epochs
#: the wrapper's `signal` event of a checkpoint request (wrapper/cli.py) starts a preemption's cost
CHECKPOINT_REQUEST = "checkpoint request"
_LAST_FIELDS = ("total_epochs", "samples_per_epoch", "min_batch_size", "max_batch_size", "gpus")
#: hint key of the job comment -> JobProgress field it describes (the job's own report overrides the hint)
HINT_FIELDS = {
    "epochs": "total_epochs",
    "bs": "batch_size",
    "min_bs": "min_batch_size",
    "max_bs": "max_batch_size",
    "samples": "samples_per_epoch",
}


class ProgressState:
    """Incremental, bounded fold of one job's events (see the module docstring)."""

    # fmt: off
    __slots__ = ("bs", "bs_ts", "declared", "dur", "epochs_done", "exit", "ignored", "job_id", "pre", "runs",
                 "truncated", "ts", "v")
    # fmt: on

    def __init__(self, job_id: str | None = None, declared: Mapping[str, Any] | None = None):
        self.job_id = job_id
        self.declared: dict[str, Any] = {k: v for k, v in (declared or {}).items() if k in HINT_FIELDS}
        self.v: dict[str, Any] = {"restarts": 0}
        self.runs: list[list[int]] = []  # [[bs, epochs], ...] for epochs 0..epochs_done-1
        self.dur: dict[int, list[float]] = {}  # bs -> [sum of timed duration_s, epochs, epochs timed]
        self.epochs_done = 0
        self.bs: int | None = None
        self.bs_ts = -1.0
        # timestamps: last event, last (prolog_)start, last end of a run, last requeue, last exit
        self.ts: dict[str, Any] = {"last": None, "start": -1.0, "end": -1.0, "requeue": -1.0, "exit": -1.0}
        self.exit: dict[str, Any] = {}
        self.ignored = 0
        self.truncated = False
        # per restart count (str): checkpoint-request signal, exit and start times, restarts already measured;
        # "cost": [sum of measured costs, preemptions measured]
        self.pre: dict[str, Any] = {"sig": {}, "exit": {}, "start": {}, "done": [], "cost": [0.0, 0]}

    # --------------------------------------------------------------- folding
    def set_declared(self, declared: Mapping[str, Any] | None) -> None:
        """The job's comment hints (``epochs=`` bounds the epochs before the job reports its total)."""
        self.declared = {k: v for k, v in (declared or {}).items() if k in HINT_FIELDS}

    def limit(self) -> int:
        total = self.v.get("total_epochs") or self.declared.get("epochs")
        return min(int(total), MAX_EPOCHS) if total else MAX_EPOCHS

    def add(self, events: Iterable[Event]) -> None:
        for e in sorted(events, key=lambda e: (e.ts, e.line_no)):
            self._add(e)

    def _add(self, e: Event) -> None:
        v, ts = self.v, self.ts
        v["restarts"] = max(v["restarts"], e.restart)
        if ts["last"] is None or e.ts > ts["last"]:
            ts["last"] = e.ts
        # the first epoch_end of a restarted run (its restart count not measured yet): partial if resumed mid-epoch
        resumed = e.kind == "epoch_end" and e.restart > 0 and str(e.restart) not in self.pre["done"]
        if e.kind == "epoch_end" and not self._epoch(e, resumed):
            self.ignored += 1
            return
        self._preemption(e)
        for name in _LAST_FIELDS:
            val = getattr(e, name)
            if val is not None:
                v[name] = val
        if e.peak_mem_bytes is not None:
            v["peak_mem_bytes"] = max(e.peak_mem_bytes, v.get("peak_mem_bytes") or 0)
        if e.gns is not None:
            v["last_gns"] = e.gns
        if e.throughput is not None:
            v.update(
                last_throughput=e.throughput,
                last_throughput_bs=e.throughput_bs,
                last_throughput_gpus=e.throughput_gpus,
                last_throughput_run=e.restart,
            )
        if e.kind in ("start", "prolog_start"):
            ts["start"] = max(ts["start"], e.ts)
            if e.kind == "start" and e.batch_size is not None:
                self._set_bs(e)
        elif e.kind == "epoch_end":
            self._set_bs(e)
            if e.throughput is None and e.samples and e.duration_s and not resumed:
                v.update(
                    last_throughput=e.samples / e.duration_s,
                    last_throughput_bs=e.batch_size,
                    last_throughput_gpus=e.gpus,
                    last_throughput_run=e.restart,
                )
        elif e.kind == "batch_size_change":
            self._set_bs(e)
        elif e.kind == "checkpoint":
            v["last_checkpoint_path"] = e.path
            v["last_checkpoint_ts"] = e.ts
        elif e.kind == "exit":
            if e.ts >= ts["exit"]:
                self.exit = {"code": e.exit_code, "reason": e.reason}
                ts["exit"] = e.ts
            ts["end"] = max(ts["end"], e.ts)
        elif e.kind == "epilog_end":
            ts["end"] = max(ts["end"], e.ts)
        elif e.kind == "requeue":
            ts["requeue"] = max(ts["requeue"], e.ts)
            ts["end"] = max(ts["end"], e.ts)

    def _preemption(self, e: Event) -> None:
        """Fold one event into the preemption cost measurement (see the module docstring); bounded: only the
        last few restarts are kept."""
        pre, r = self.pre, str(e.restart)
        if e.kind == "signal" and e.origin == "job" and (e.reason or "").startswith(CHECKPOINT_REQUEST):
            pre["sig"].setdefault(r, e.ts)
        elif e.kind == "exit" and e.origin == "job":
            pre["exit"][r] = e.ts
        elif e.kind == "start" and e.origin == "job":
            pre["start"][r] = e.ts
            self.v["start_restart"] = max(self.v.get("start_restart", -1), e.restart)
        elif e.kind == "epoch_end" and e.restart > 0 and r not in pre["done"]:
            prev = str(e.restart - 1)
            sig, end, start = pre["sig"].get(prev), pre["exit"].get(prev), pre["start"].get(r)
            if sig is not None and end is not None and start is not None and end >= sig:
                cost = (end - sig) + max(0.0, e.ts - start - float(e.duration_s or 0.0))
                pre["cost"] = [pre["cost"][0] + cost, pre["cost"][1] + 1]
            pre["done"] = (pre["done"] + [r])[-4:]
        low = e.restart - 2
        for key in ("sig", "exit", "start"):
            for k in [k for k in pre[key] if int(k) < low]:
                del pre[key][k]

    def _set_bs(self, e: Event) -> None:
        if e.ts >= self.bs_ts:
            self.bs, self.bs_ts = e.batch_size, e.ts

    def _epoch(self, e: Event, resumed: bool = False) -> bool:
        """Record one epoch_end (`resumed`: counted, not timed); False if it is out of bounds (ignored)."""
        assert e.epoch is not None and e.batch_size is not None and e.duration_s is not None  # schema.REQUIRED
        n, bs = int(e.epoch), int(e.batch_size)
        limit = min(int(e.total_epochs), MAX_EPOCHS) if e.total_epochs else self.limit()
        if n >= limit or n > self.epochs_done + MAX_EPOCH_JUMP:
            return False
        if bs not in self.dur and len(self.dur) >= MAX_BATCH_SIZES:
            return False
        acc = self.dur.setdefault(bs, [0.0, 0, 0])
        acc[1] += 1
        if not resumed:
            acc[0] += float(e.duration_s)
            acc[2] += 1
        if n >= self.epochs_done:  # new epoch(s): unreported ones take the previous size
            gap = n - self.epochs_done
            if gap:
                self._append(self.runs[-1][0] if self.runs else bs, gap)
            self._append(bs, 1)
            self.epochs_done = n + 1
        else:  # an epoch redone after a restart: the latest report wins
            self._replace(n, bs)
        return True

    def _append(self, bs: int, count: int) -> None:
        if self.runs and self.runs[-1][0] == bs:
            self.runs[-1][1] += count
        else:
            self.runs.append([bs, count])
            self._bound()

    def _replace(self, index: int, bs: int) -> None:
        pos = 0
        for i, (b, n) in enumerate(self.runs):
            if index < pos + n:
                if b == bs:
                    return
                before, after = index - pos, pos + n - index - 1
                new = ([[b, before]] if before else []) + [[bs, 1]] + ([[b, after]] if after else [])
                self.runs[i : i + 1] = new
                self._merge()
                self._bound()
                return
            pos += n

    def _merge(self) -> None:
        out: list[list[int]] = []
        for b, n in self.runs:
            if out and out[-1][0] == b:
                out[-1][1] += n
            else:
                out.append([b, n])
        self.runs = out

    def _bound(self) -> None:
        while len(self.runs) > MAX_RUNS:
            (b0, n0), (_, n1) = self.runs[0], self.runs[1]
            self.runs[0:2] = [[b0, n0 + n1]]
            self.truncated = True

    # --------------------------------------------------------------- results
    def progress(self) -> JobProgress:
        ts, v = self.ts, dict(self.v)
        if ts["last"] is None:
            return JobProgress(job_id=self.job_id, ignored=self.ignored, total_epochs=self.declared.get("epochs"))
        total = v.get("total_epochs") or self.declared.get("epochs")  # the job's report, else the hint
        exit_code, reason = self.exit.get("code"), self.exit.get("reason")
        preempted = (reason or "").startswith("preempted")
        finished = bool(
            exit_code == 0
            and ts["exit"] >= max(ts["start"], ts["requeue"])
            and (self.epochs_done >= total if total is not None else not preempted)
        )
        v.pop("total_epochs", None)
        return JobProgress(
            job_id=self.job_id,
            epochs_done=self.epochs_done,
            total_epochs=total,
            batch_size=self.bs,
            bs_runs=tuple((b, n) for b, n in self.runs),
            epoch_duration_by_bs={b: s / t for b, (s, _, t) in sorted(self.dur.items()) if t},
            epochs_by_bs={b: int(n) for b, (_, n, _) in sorted(self.dur.items())},
            finished=finished,
            exit_code=exit_code,
            exit_reason=reason,
            last_event_ts=ts["last"],
            started=ts["start"] >= 0,
            running=ts["start"] >= 0 and ts["start"] > ts["end"],
            requeued_after_exit=ts["exit"] >= 0 and ts["requeue"] >= ts["exit"],
            ignored=self.ignored,
            history_truncated=self.truncated,
            hint_conflicts=self.conflicts(),
            preemptions_measured=int(self.pre["cost"][1]),
            preempt_cost_s=self.pre["cost"][0] / self.pre["cost"][1] if self.pre["cost"][1] else None,
            **v,
        )

    def conflicts(self) -> dict[str, dict[str, Any]]:
        """Hints of the comment that the job's own report contradicts (the report is what counts)."""
        reported = {
            "total_epochs": self.v.get("total_epochs"),
            "min_batch_size": self.v.get("min_batch_size"),
            "max_batch_size": self.v.get("max_batch_size"),
            "samples_per_epoch": self.v.get("samples_per_epoch"),
            "batch_size": self.runs[0][0] if self.runs else None,
        }
        out = {}
        for key, fname in HINT_FIELDS.items():
            hint, rep = self.declared.get(key), reported.get(fname)
            if hint is not None and rep is not None and hint != rep:
                out[key] = {"hint": hint, "reported": rep}
        return out

    # --------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        """JSON-able, bounded (restored by :meth:`from_dict`)."""
        return {
            "v": self.v,
            "runs": self.runs,
            "dur": {str(b): a for b, a in self.dur.items()},
            "done": self.epochs_done,
            "bs": self.bs,
            "bs_ts": self.bs_ts,
            "ts": self.ts,
            "exit": self.exit,
            "ignored": self.ignored,
            "truncated": self.truncated,
            "pre": self.pre,
        }

    @classmethod
    def from_dict(
        cls, job_id: str, data: Mapping[str, Any], declared: Mapping[str, Any] | None = None
    ) -> ProgressState:
        """Restore a saved state; anything malformed gives a fresh state (events are re-read)."""
        st = cls(job_id, declared)
        try:
            st.v = {str(k): val for k, val in dict(data["v"]).items()}
            st.v.setdefault("restarts", 0)
            st.runs = [[int(b), int(n)] for b, n in data["runs"]][:MAX_RUNS]
            st.dur = {
                int(b): [float(a[0]), int(a[1]), int(a[2] if len(a) > 2 else a[1])]  # before: all timed
                for b, a in dict(data["dur"]).items()
            }
            st.epochs_done = int(data["done"])
            st.bs = None if data["bs"] is None else int(data["bs"])
            st.bs_ts = float(data["bs_ts"])
            st.ts = {
                k: (None if data["ts"][k] is None else float(data["ts"][k]))
                for k in ("last", "start", "end", "requeue", "exit")
            }
            st.exit = dict(data.get("exit") or {})
            st.ignored = int(data.get("ignored", 0))
            st.truncated = bool(data.get("truncated", False))
            pre = data.get("pre")
            if pre is not None:
                st.pre = {k: {str(r): float(t) for r, t in dict(pre[k]).items()} for k in ("sig", "exit", "start")}
                st.pre["done"] = [str(r) for r in pre["done"]][-4:]
                st.pre["cost"] = [float(pre["cost"][0]), int(pre["cost"][1])]
        except (KeyError, TypeError, ValueError, IndexError):
            return cls(job_id, declared)
        if len(st.dur) > MAX_BATCH_SIZES or sum(n for _, n in st.runs) != st.epochs_done:
            return cls(job_id, declared)
        return st


def summarize(events: Iterable[Event], declared: Mapping[str, Any] | None = None) -> JobProgress:
    """Fold a job's accepted events (any order) into a :class:`JobProgress`."""
    evs = list(events)
    st = ProgressState(evs[-1].job if evs else None, declared)
    st.add(evs)
    return st.progress()
