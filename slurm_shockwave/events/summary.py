"""Pure summary of a job's events, as the controller's predictor needs it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from .schema import Event


@dataclass(frozen=True)
class JobProgress:
    """What the events say about one job.  All fields are plain values (no I/O).

    ``epochs_done`` counts distinct completed epochs (``epoch_end`` carries the 0-based
    index of the epoch that just ended; an epoch redone after a restart counts once).
    ``bs_per_epoch[i]`` is the batch size epoch ``i`` ran at (the latest report wins;
    an epoch never reported takes the batch size of the previous one).
    ``finished``: the last ``exit`` has code 0, follows the last start/requeue, and either
    ``epochs_done >= total_epochs`` or, with no total known, it was not a preemption exit.
    """

    job_id: str | None = None
    epochs_done: int = 0
    total_epochs: int | None = None
    batch_size: int | None = None
    bs_per_epoch: tuple[int, ...] = ()
    epoch_duration_by_bs: dict[int, float] = field(default_factory=dict)
    samples_per_epoch: int | None = None
    last_throughput: float | None = None
    last_throughput_bs: int | None = None
    last_throughput_gpus: int | None = None
    gpus: int | None = None
    restarts: int = 0
    min_batch_size: int | None = None
    max_batch_size: int | None = None
    finished: bool = False
    exit_code: int | None = None
    last_gns: float | None = None
    last_checkpoint_path: str | None = None
    last_checkpoint_ts: float | None = None
    last_event_ts: float | None = None
    started: bool = False
    running: bool = False
    peak_mem_bytes: int | None = None

    @property
    def remaining_epochs(self) -> int | None:
        if self.total_epochs is None:
            return None
        return max(0, self.total_epochs - self.epochs_done)


def summarize(events: Iterable[Event]) -> JobProgress:
    """Fold a job's accepted events (any order) into a :class:`JobProgress`."""
    evs = sorted(events, key=lambda e: (e.ts, e.line_no))
    if not evs:
        return JobProgress()
    by_epoch: dict[int, int] = {}
    dur_by_epoch: dict[int, tuple[int, float]] = {}
    v: dict = {"job_id": evs[-1].job, "restarts": 0}
    bs = None
    exit_code = None
    exit_preempted = False
    # timestamps of the last exit / (prolog_)start / end of a run / requeue
    exit_ts = start_ts = end_ts = requeue_ts = -1.0
    for e in evs:
        v["restarts"] = max(v["restarts"], e.restart)
        for name in ("total_epochs", "samples_per_epoch", "min_batch_size", "max_batch_size",
                     "gpus", "peak_mem_bytes"):
            val = getattr(e, name)
            if val is not None:
                v[name] = max(val, v.get(name) or 0) if name == "peak_mem_bytes" else val
        if e.gns is not None:
            v["last_gns"] = e.gns
        if e.throughput is not None:
            v["last_throughput"] = e.throughput
            v["last_throughput_bs"] = e.throughput_bs
            v["last_throughput_gpus"] = e.throughput_gpus
        if e.kind in ("start", "prolog_start"):
            start_ts = e.ts
            if e.kind == "start" and e.batch_size is not None:
                bs = e.batch_size
        elif e.kind == "epoch_end":
            by_epoch[e.epoch] = e.batch_size  # type: ignore[index]
            dur_by_epoch[e.epoch] = (e.batch_size, e.duration_s)  # type: ignore[index,assignment]
            bs = e.batch_size
            if e.throughput is None and e.samples and e.duration_s:
                v["last_throughput"] = e.samples / e.duration_s
                v["last_throughput_bs"] = e.batch_size
                v["last_throughput_gpus"] = e.gpus
        elif e.kind == "batch_size_change":
            bs = e.batch_size
        elif e.kind == "checkpoint":
            v["last_checkpoint_path"] = e.path
            v["last_checkpoint_ts"] = e.ts
        elif e.kind == "exit":
            exit_code = e.exit_code
            exit_preempted = (e.reason or "").startswith("preempted")
            exit_ts = end_ts = e.ts
        elif e.kind == "epilog_end":
            end_ts = e.ts
        elif e.kind == "requeue":
            requeue_ts = end_ts = e.ts
    epochs_done = (max(by_epoch) + 1) if by_epoch else 0
    bs_list: list[int] = []
    prev = None
    for i in range(epochs_done):
        cur = by_epoch.get(i, prev)
        if cur is None:  # leading unknown epochs: take the first known one
            cur = by_epoch[min(by_epoch)]
        bs_list.append(cur)
        prev = cur
    sums: dict[int, list[float]] = {}
    for b, d in dur_by_epoch.values():
        acc = sums.setdefault(b, [0.0, 0.0])
        acc[0] += d
        acc[1] += 1
    total = v.get("total_epochs")
    finished = bool(exit_code == 0 and exit_ts >= max(start_ts, requeue_ts)
                    and (epochs_done >= total if total is not None else not exit_preempted))
    return JobProgress(
        epochs_done=epochs_done,
        batch_size=bs,
        bs_per_epoch=tuple(bs_list),
        epoch_duration_by_bs={b: s / n for b, (s, n) in sorted(sums.items())},
        finished=finished,
        exit_code=exit_code,
        last_event_ts=evs[-1].ts,
        started=start_ts >= 0,
        running=start_ts >= 0 and start_ts > end_ts,
        **v,
    )
