"""What a job's events say about it (`JobProgress`): the result of folding them (events/summary.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any


@dataclass(frozen=True)
class JobProgress:
    """What the events say about one job.  All fields are plain values (no I/O).

    ``epochs_done`` is the highest completed epoch index + 1 (``epoch_end`` carries the 0-based index of the
    epoch that just ended; an epoch redone after a restart counts once).  ``bs_runs`` is the batch size of each
    completed epoch, run-length encoded; ``bs_per_epoch`` expands it (the latest report of an epoch wins, an
    epoch never reported takes the batch size of the previous one).  ``finished``: the last ``exit`` has code 0,
    follows the last start/requeue, and either ``epochs_done >= total_epochs`` or, with no total known, it was
    not a preemption exit.  ``ended_early``: the job's last run ended (exit after the last start) with fewer
    epochs than its total and was not requeued: the controller shows "ended early: 2/12 epochs".
    """

    job_id: str | None = None
    epochs_done: int = 0
    total_epochs: int | None = None
    batch_size: int | None = None
    bs_runs: tuple[tuple[int, int], ...] = ()
    epoch_duration_by_bs: dict[int, float] = field(default_factory=dict)
    epochs_by_bs: dict[int, int] = field(default_factory=dict)
    samples_per_epoch: int | None = None
    last_throughput: float | None = None
    last_throughput_bs: int | None = None
    last_throughput_gpus: int | None = None
    last_throughput_run: int | None = None  # the restart count of the run that reported it (its GPU type's run)
    gpus: int | None = None
    restarts: int = 0
    min_batch_size: int | None = None
    max_batch_size: int | None = None
    finished: bool = False
    exit_code: int | None = None
    exit_reason: str | None = None
    last_gns: float | None = None
    last_checkpoint_path: str | None = None
    last_checkpoint_ts: float | None = None
    last_event_ts: float | None = None
    started: bool = False
    running: bool = False
    requeued_after_exit: bool = False
    peak_mem_bytes: int | None = None
    ignored: int = 0
    history_truncated: bool = False
    # comment hint -> {"hint": value in --comment, "reported": value the job reported}; the report wins
    hint_conflicts: dict[str, dict[str, Any]] = field(default_factory=dict)
    preempt_cost_s: float | None = None  # mean measured cost of its preemptions (module docstring)
    preemptions_measured: int = 0
    start_restart: int = -1  # the latest run whose wrapper reported its start (handlers up)

    @cached_property
    def bs_per_epoch(self) -> tuple[int, ...]:
        """Batch size of each completed epoch (expanded once from ``bs_runs``; at most the job's total)."""
        out: list[int] = []
        for b, n in self.bs_runs:
            out += [b] * n
        return tuple(out)

    @property
    def remaining_epochs(self) -> int | None:
        if self.total_epochs is None:
            return None
        return max(0, self.total_epochs - self.epochs_done)

    @property
    def ended_early(self) -> bool:
        return (
            self.exit_code is not None
            and not self.running
            and not self.finished
            and not self.requeued_after_exit
            and self.total_epochs is not None
            and self.epochs_done < self.total_epochs
        )

    def run_ended(self, restart: int) -> bool:
        """The wrapper of run `restart` (Slurm's restart count) reported its start, then that the job finished (not
        a run that failed, nor one whose own requeue failed: Slurm, or the controller's requeue, still has to act)."""
        return self.finished and self.start_restart >= restart

    def busy_seconds(self, default_s: float) -> float:
        """Sum of the mean epoch duration of every completed epoch's batch size (no expansion)."""
        d = self.epoch_duration_by_bs
        return float(sum(d.get(b, default_s) * n for b, n in self.bs_runs))
