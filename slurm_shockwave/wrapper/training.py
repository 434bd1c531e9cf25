"""One object owns reporting and checkpointing, so neither can be forgotten.

Your object says *how* to save and restore (``state_dict()`` / ``load_state_dict(state)``, as in
submitit's ``Checkpointable`` or a torch module); :class:`Training` decides *when*: it restores the last
checkpoint when it is built, reports every epoch (with its total, so ``shockwave-run`` knows when the
training is finished), saves after every epoch, and on Slurm's preemption signal saves and ends the loop,
so the program exits 0 and ``shockwave-run`` requeues the job::

    from slurm_shockwave.wrapper import Training

    run = Training(trainer, total_epochs=30, samples_per_epoch=50_000, max_batch_size=256)
    for epoch in run.epochs():              # continues after the last checkpointed epoch
        for batch in loader:
            ...
            if run.should_checkpoint():     # optional, mid-epoch: leave, the loop saves and stops
                break
        else:
            run.report(batch_size=bs)       # optional: duration is measured, samples default to the total
            continue
        break                               # left mid-epoch on the signal

An epoch counts as done when the loop body runs to its end (reported by :meth:`report`, or automatically
with the measured duration).  A body that ``break``s out of the loop on the checkpoint request leaves the
epoch unfinished: the state is saved as it is (keep the position inside the epoch in ``state_dict`` to
resume mid-epoch, else the epoch is redone from its start).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol

from slurm_shockwave.wrapper import api
from slurm_shockwave.wrapper.checkpoint import CheckpointManager
from slurm_shockwave.wrapper.context import warn


class Stateful(Protocol):
    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class Training:
    """Drives the epoch loop of ``obj`` (see the module docstring)."""

    def __init__(
        self,
        obj: Stateful,
        total_epochs: int,
        *,
        samples_per_epoch: int | None = None,
        batch_size: int | None = None,
        min_batch_size: int | None = None,
        max_batch_size: int | None = None,
        checkpoint_dir: str | None = None,
        reporter: api.Reporter | None = None,
        save_every: int = 1,
    ):
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
            raise TypeError("Training needs an object with state_dict() and load_state_dict(state)")
        if not isinstance(total_epochs, int) or isinstance(total_epochs, bool) or total_epochs < 1:
            raise ValueError(f"total_epochs must be an int >= 1, got {total_epochs!r}")
        self.obj, self.total_epochs = obj, total_epochs
        self.samples_per_epoch = samples_per_epoch
        self.batch_size = batch_size
        self.save_every = max(1, int(save_every))
        self.reporter = reporter or api.get_reporter()
        self.reporter.configure(
            total_epochs=total_epochs,
            samples_per_epoch=samples_per_epoch,
            min_batch_size=min_batch_size,
            max_batch_size=max_batch_size,
        )
        self.ckpt = CheckpointManager(checkpoint_dir, reporter=self)
        state = self.ckpt.load()
        self.start_epoch = 0
        if state is not None:
            self.obj.load_state_dict(state)
            self.start_epoch = min(self.ckpt.resume_epoch(), total_epochs)
        self.epoch: int | None = None
        self.stopped_early = False
        self._reported = False
        self._t0 = 0.0

    # the CheckpointManager reports through us, so every checkpoint event carries the total
    def checkpointed(self, path, epoch=None) -> bool:
        return self.reporter.emit("checkpoint", path=str(path)[:1024], epoch=epoch, total_epochs=self.total_epochs)

    def should_checkpoint(self) -> bool:
        """True once Slurm's preemption signal (or SIGTERM) arrived: leave the epoch, the loop saves."""
        return self.reporter.should_checkpoint()

    def report(
        self, batch_size: int | None = None, samples: int | None = None, duration_s: float | None = None, **extra: Any
    ) -> None:
        """Report the current epoch as done (batch size it ran at; duration measured if not given)."""
        if self.epoch is None:
            raise RuntimeError("report() belongs inside `for epoch in run.epochs():`")
        if batch_size is not None:
            self.batch_size = batch_size
        bs = self.batch_size or 1
        dt = duration_s if duration_s is not None else max(time.monotonic() - self._t0, 1e-6)
        n = samples if samples is not None else (self.samples_per_epoch or 0)
        self.reporter.report_epoch(self.epoch, bs, n, dt, **extra)
        self._reported = True

    def save(self, epochs_done: int) -> None:
        self.ckpt.save(self.obj.state_dict(), epochs_done=epochs_done)

    def epochs(self) -> Iterator[int]:
        """The epochs still to run; saves after each, and ends early (after saving) on the signal."""
        epoch = self.start_epoch
        try:
            while epoch < self.total_epochs:
                self.epoch, self._reported, self._t0 = epoch, False, time.monotonic()
                yield epoch
                # the body ran to its end: the epoch is done (a body that leaves mid-epoch uses `break`)
                requested = self.should_checkpoint()
                if not self._reported:
                    self.report()
                epoch += 1
                if requested or epoch % self.save_every == 0 or epoch == self.total_epochs:
                    self.save(epoch)
                if requested and epoch < self.total_epochs:
                    self.stopped_early = True
                    return
        except GeneratorExit:  # `break` out of the loop
            if self.should_checkpoint():  # left mid-epoch on the signal
                self.save(epoch + 1 if self._reported else epoch)
                self.stopped_early = True
            else:
                warn(
                    "the epoch loop was left without a checkpoint request: the work done since the last "
                    "save is not saved, and shockwave-run will not record the job as finished"
                )
            raise
