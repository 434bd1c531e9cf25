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

Several processes (torchrun, ``srun`` one task per GPU, ``accelerate launch``): every rank builds its
``Training``; global rank 0 reports and writes the checkpoint (every rank calls ``state_dict()``, which a
sharded model needs; ``per_rank=True`` has each rank write its own ``checkpoint.rank<N>.pkl`` instead), and every
rank resumes from the same checkpoint.  Once ``torch.distributed`` is initialized, :meth:`should_checkpoint` and
the check at the end of each epoch are collectives (``ranks.agree``): every rank must call
``should_checkpoint()`` the same number of times, and all of them stop at the same step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol

from slurm_shockwave.wrapper import api, ranks
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
        per_rank: bool = False,
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
        self.rank, self.per_rank = ranks.detect(), per_rank
        name = f"checkpoint.rank{self.rank.rank}" if per_rank else "checkpoint"
        self.ckpt = CheckpointManager(checkpoint_dir, reporter=self, name=name)
        state = self.ckpt.load()
        self.start_epoch = 0
        if state is not None:
            self.obj.load_state_dict(state)
            self.start_epoch = min(self.ckpt.resume_epoch(), total_epochs)
        self.epoch: int | None = None
        self.stopped_early = False
        self._reported = False
        self._agreed = False  # the ranks' last common answer to should_checkpoint()
        self._t0 = 0.0

    # the CheckpointManager reports through us, so every checkpoint event carries the total
    def checkpointed(self, path, epoch=None) -> bool:
        return self.reporter.emit("checkpoint", path=str(path)[:1024], epoch=epoch, total_epochs=self.total_epochs)

    def should_checkpoint(self) -> bool:
        """True once Slurm's preemption signal (or SIGTERM) arrived: leave the epoch, the loop saves.
        Under torch.distributed: true on every rank once any rank saw the request (a collective)."""
        self._agreed = ranks.agree(self.reporter.should_checkpoint())
        if self._agreed:
            self.reporter.request_checkpoint()  # sticky on every rank, also for the low-level api
        return self._agreed

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
        state = self.obj.state_dict()  # on every rank: a sharded model's state_dict() is itself a collective
        if self.per_rank or self.rank.leader:
            self.ckpt.save(state, epochs_done=epochs_done)

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
        except GeneratorExit:  # `break` out of the loop; under torch.distributed no new collective: the last answer
            if self._agreed if ranks.distributed() else self.should_checkpoint():  # left mid-epoch on the signal
                self.save(epoch + 1 if self._reported else epoch)
                self.stopped_early = True
            else:
                warn(
                    "the epoch loop was left without a checkpoint request: the work done since the last "
                    "save is not saved, and shockwave-run will not record the job as finished"
                )
            raise
