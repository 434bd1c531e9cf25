"""One object owns reporting and checkpointing, so neither can be forgotten.

Your object says *how* to save and restore (``state_dict()`` / ``load_state_dict(state)``, as in
submitit's ``Checkpointable`` or a torch module); :class:`Training` decides *when*: it restores the last
checkpoint when it is built, reports every epoch (with its total, so ``shockwave-run`` knows when the
training is finished), saves after every epoch, and on Slurm's preemption signal saves and ends the loop,
so the program exits 0 and ``shockwave-run`` requeues the job.

Step-level resume (every optimizer step runs exactly once across preemptions): let :meth:`Training.steps` count
the steps of each epoch.  It continues at the step after the checkpoint's, and on the request it stops at a step
boundary; the epoch loop then saves that position and ends (no ``break`` needed)::

    run = Training(trainer, total_epochs=30, steps_per_epoch=len(loader), samples_per_epoch=50_000)
    for epoch in run.epochs():              # continues at the checkpoint's epoch
        for i in run.steps(len(loader)):    # ... and at its next step (i: the step's index in the epoch)
            train_step(batch_of(epoch, i))  # the data of a step must depend on (epoch, i) only

A loop of your own calls ``run.step_done()`` after each optimizer step instead: it counts the step and returns
True when the ranks agreed to stop, then ``break`` out of both loops (the loop saves the position).
``run.step`` is the number of optimizer steps done since the job's first run, ``run.epoch_step`` those done in
the current epoch; both are stored in the checkpoint (not in your state), the ``checkpoint`` events carry
``step``, and one ``resume`` event per run says where it starts (step, epoch, checkpoint path).

Epoch-level (the older form, still supported)::

    run = Training(trainer, total_epochs=30, samples_per_epoch=50_000, max_batch_size=256)
    for epoch in run.epochs():
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
epoch unfinished: the state is saved as it is (keep the position inside the epoch in ``state_dict``, or count
steps as above, to resume mid-epoch, else the epoch is redone from its start).

Several processes (torchrun, ``srun`` one task per GPU, ``accelerate launch``): every rank builds its
``Training`` (after ``init_process_group``); global rank 0 reports and writes the checkpoint (every rank calls
``state_dict()``, which a sharded model needs; ``per_rank=True`` has each rank write its own
``checkpoint.rank<N>.pkl`` instead), and every rank resumes from the same checkpoint: building ``Training`` is then
a collective that checks every rank restored the same epoch and step (else it raises, on every rank, with one line
saying which).  :meth:`should_checkpoint`, :meth:`step_done`, :meth:`steps` and the check at the end of each epoch
are collectives (``ranks.agree``): every rank must call them the same number of times, and all of them stop at the
same step.
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
    """Drives the epoch (and step) loop of ``obj`` (see the module docstring)."""

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
        steps_per_epoch: int | None = None,
    ):
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
            raise TypeError("Training needs an object with state_dict() and load_state_dict(state)")
        if not isinstance(total_epochs, int) or isinstance(total_epochs, bool) or total_epochs < 1:
            raise ValueError(f"total_epochs must be an int >= 1, got {total_epochs!r}")
        if steps_per_epoch is not None and (not isinstance(steps_per_epoch, int) or steps_per_epoch < 1):
            raise ValueError(f"steps_per_epoch must be an int >= 1, got {steps_per_epoch!r}")
        self.obj, self.total_epochs = obj, total_epochs
        self.samples_per_epoch = samples_per_epoch
        self.batch_size = batch_size
        self.steps_per_epoch = steps_per_epoch
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
        self.step = 0  # optimizer steps done since the job's first run
        self.epoch_step = 0  # optimizer steps done in the current epoch
        self._counting = steps_per_epoch is not None  # are steps counted (known)?
        if state is not None:
            self.obj.load_state_dict(state)
            self.start_epoch = min(self.ckpt.resume_epoch(), total_epochs)
            pos = self.ckpt.position()
            if pos is not None:
                self.step, self.epoch_step = pos
                self._counting = True
            elif steps_per_epoch is not None:
                self.step = self.start_epoch * steps_per_epoch
        self._same_on_every_rank()
        self.start_step = self.step
        self.epoch: int | None = None
        self.stopped_early = False
        self._reported = False
        self._agreed = False  # the ranks' last common answer to should_checkpoint()
        self._left_mid_epoch = False  # steps() stopped on the request before the epoch's last step
        self._epoch_first_step = 0
        self._steps_n: int | None = None
        self._t0 = 0.0
        self._resume_reported = False
        if self._counting:
            self._report_resume()

    def _same_on_every_rank(self) -> None:
        """Every rank must continue at the same epoch and step (``per_rank``: each read its own file; or a rank
        fell back to the previous checkpoint): checked with one collective, else a clear error on every rank."""
        mine = [self.start_epoch, self.step, self.epoch_step]
        low, high = ranks.spread(mine)
        if low != high:
            raise RuntimeError(
                f"the ranks restored different checkpoints (epoch, step, step in epoch from {low} to {high}; this "
                f"rank {self.rank.rank}: {mine}): remove the newer checkpoint files in {self.ckpt.dir} or restore "
                "the missing ones, so that every rank resumes at the same step"
            )

    def _report_resume(self) -> None:
        if self._resume_reported:
            return
        self._resume_reported = True
        path = self.ckpt.path if self.step or self.start_epoch else None
        self.reporter.resumed(self.step, epoch=min(self.start_epoch, self.total_epochs - 1), path=path)

    # the CheckpointManager reports through us, so every checkpoint event carries the total
    def checkpointed(self, path, epoch=None, step=None) -> bool:
        return self.reporter.emit(
            "checkpoint", path=str(path)[:1024], epoch=epoch, step=step, total_epochs=self.total_epochs
        )

    def should_checkpoint(self) -> bool:
        """True once Slurm's preemption signal (or SIGTERM) arrived: leave the epoch, the loop saves.
        Under torch.distributed: true on every rank once any rank saw the request (a collective)."""
        self._agreed = ranks.agree(self.reporter.should_checkpoint())
        if self._agreed:
            self.reporter.request_checkpoint()  # sticky on every rank, also for the low-level api
        return self._agreed

    def step_done(self) -> bool:
        """Count one optimizer step as done; True when the ranks agreed to checkpoint now (then ``break`` out of
        the step and epoch loops: the epoch loop saves this position).  A collective under torch.distributed."""
        self._count_step()
        return self.should_checkpoint()

    def _count_step(self) -> None:
        if not self._counting:
            self._counting = True
            self._report_resume()
        self.step += 1
        self.epoch_step += 1

    def steps(self, n: int) -> Iterator[int]:
        """Indices (0-based, in this epoch) of the epoch's steps still to run, out of ``n``; each step is counted
        when its body ends, and on the request the iteration stops at that step boundary (the epoch loop then saves
        the position and ends the run)."""
        if self.epoch is None:
            raise RuntimeError("steps() belongs inside `for epoch in run.epochs():`")
        self._steps_n = n
        if not self._counting:
            self._counting = True
            self._report_resume()
        while self.epoch_step < n:
            yield self.epoch_step
            self._count_step()
            if self.epoch_step < n and self.should_checkpoint():
                self._left_mid_epoch = True
                return

    def report(
        self, batch_size: int | None = None, samples: int | None = None, duration_s: float | None = None, **extra: Any
    ) -> None:
        """Report the current epoch as done (batch size it ran at; duration measured if not given; samples
        default to those of the steps this run did, else the epoch's)."""
        if self.epoch is None:
            raise RuntimeError("report() belongs inside `for epoch in run.epochs():`")
        if batch_size is not None:
            self.batch_size = batch_size
        bs = self.batch_size or 1
        dt = duration_s if duration_s is not None else max(time.monotonic() - self._t0, 1e-6)
        n = samples if samples is not None else (self.samples_per_epoch or 0)
        if samples is None and self._steps_n and self.samples_per_epoch:  # a resumed epoch: the part it ran
            n = max(1, round(self.samples_per_epoch * (self.epoch_step - self._epoch_first_step) / self._steps_n))
        self.reporter.report_epoch(self.epoch, bs, n, dt, **extra)
        self._reported = True

    def save(self, epochs_done: int) -> None:
        state = self.obj.state_dict()  # on every rank: a sharded model's state_dict() is itself a collective
        if self.per_rank or self.rank.leader:
            if self._counting:
                inner = self.epoch_step if epochs_done == (self.epoch if self.epoch is not None else -1) else 0
                self.ckpt.save(state, epochs_done=epochs_done, step=self.step, epoch_step=inner)
            else:
                self.ckpt.save(state, epochs_done=epochs_done)

    def epochs(self) -> Iterator[int]:
        """The epochs still to run; saves after each, and ends early (after saving) on the signal."""
        epoch = self.start_epoch
        if self._counting:
            self._report_resume()
        try:
            while epoch < self.total_epochs:
                self.epoch, self._reported, self._t0 = epoch, False, time.monotonic()
                self._epoch_first_step, self._steps_n = self.epoch_step, None
                yield epoch
                if self._left_mid_epoch:  # steps() stopped at a step boundary on the request: save, end
                    self.save(epoch)
                    self.stopped_early = True
                    return
                # the body ran to its end: the epoch is done (a body that leaves mid-epoch uses `break`)
                requested = self.should_checkpoint()
                if not self._reported:
                    self.report()
                epoch += 1
                self.epoch_step = 0
                if requested or epoch % self.save_every == 0 or epoch == self.total_epochs:
                    self.save(epoch)
                if requested and epoch < self.total_epochs:
                    self.stopped_early = True
                    return
        except GeneratorExit:  # `break` out of the loop; under torch.distributed no new collective: the last answer
            if self._agreed if ranks.distributed() else self.should_checkpoint():  # left mid-epoch on the signal
                if self._reported:
                    self.epoch_step = 0
                self.save(epoch + 1 if self._reported else epoch)
                self.stopped_early = True
            else:
                warn(
                    "the epoch loop was left without a checkpoint request: the work done since the last "
                    "save is not saved, and shockwave-run will not record the job as finished"
                )
            raise
