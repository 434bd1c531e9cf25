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

Elastic GPU counts (a job whose comment declares ``gpus=MIN-MAX`` may be restarted by the controller on another
count): ``batch_size`` is the GLOBAL batch size (all ranks, one optimizer step), on the user's own schedule; the
per-rank batch follows from it (:meth:`per_rank_batch`: global // world size, a clear error when it does not
divide).  :meth:`batches` splits each global batch over the ranks: it yields this rank's positions in the epoch's
sample order (the order must depend on (seed, epoch) only, never on the world size), continues at the checkpoint's
sample position and stops on the request as :meth:`steps` does, so a resume on another count neither repeats nor
skips a sample::

    run = Training(job, total_epochs=30, samples_per_epoch=len(ds), batch_size=256)
    for epoch in run.epochs():
        order = torch.randperm(len(ds), generator=torch.Generator().manual_seed(epoch))
        for part in run.batches():               # a range: this rank's share of the step's global batch
            train_step(ds[order[part.start:part.stop]])
            run.batch_size = schedule(run.samples)  # the user's schedule may change the global batch (e.g. GNS)

The checkpoint keeps the global batch size (a resume continues with it, not with the constructor's), the samples
done (``run.samples`` since the job's first run, ``run.epoch_samples`` in the epoch: the position) and the world
size it was written at (``run.previous_world_size`` after a resume; ``shockwave-run`` exports the GPU counts as
``$SHOCKWAVE_GPUS`` and ``$SHOCKWAVE_PREVIOUS_GPUS``).  The epoch's last global batch may be short (it is split as
evenly as it goes).

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
from collections.abc import Callable, Iterator
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
        self.batch_size = batch_size  # the global batch size (module docstring: elastic GPU counts)
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
        self.samples = self.epoch_samples = 0  # samples done since the job's first run / in the current epoch
        self.previous_world_size: int | None = None  # the world size of the run that wrote the restored checkpoint
        if state is not None:
            self.obj.load_state_dict(state)
            meta = self.ckpt.meta()
            self.batch_size = meta.get("batch_size") or self.batch_size
            self.samples, self.epoch_samples = meta.get("samples") or 0, meta.get("epoch_samples") or 0
            self.previous_world_size = meta.get("world_size")
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
        self._batch_n: int | None = None  # the global batch of the step batches() runs
        self._epoch_first_samples = 0
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
        n = self._batch_n if self._batch_n is not None else (self.batch_size or 0)
        self.samples += n
        self.epoch_samples += n

    def steps(self, n: int) -> Iterator[int]:
        """Indices (0-based, in this epoch) of the epoch's steps still to run, out of ``n``; each step is counted
        when its body ends, and on the request the iteration stops at that step boundary (the epoch loop then saves
        the position and ends the run)."""
        self._steps_n, self._batch_n = n, None
        return self._stepping("steps", lambda: self.epoch_step < n, lambda: self.epoch_step)

    def batches(self, n: int | None = None) -> Iterator[range]:
        """This rank's positions in the epoch's sample order for each step still to run in an epoch of ``n``
        samples (default ``samples_per_epoch``): its share of the global batch ``batch_size`` (read at every step),
        counted and stopped on the request as :meth:`steps` (module docstring: elastic GPU counts)."""
        total = n or self.samples_per_epoch
        if not (total and self.batch_size):
            raise ValueError("batches() needs the epoch's samples and the global batch size (Training(batch_size=))")

        def share() -> range:
            first, world, r = self.epoch_samples, self.rank.world_size, self.rank.rank
            self._batch_n = m = min(self.batch_size or 0, total - first)
            if m == self.batch_size:  # a whole global batch must divide (the epoch's last one is split evenly)
                self.per_rank_batch()
            return range(first + m * r // world, first + m * (r + 1) // world)

        self._steps_n = None
        return self._stepping("batches", lambda: self.epoch_samples < total, share)

    def _stepping(self, name: str, more: Callable[[], bool], item: Callable[[], Any]) -> Iterator[Any]:
        if self.epoch is None:
            raise RuntimeError(f"{name}() belongs inside `for epoch in run.epochs():`")
        if not self._counting:
            self._counting = True
            self._report_resume()
        while more():
            yield item()
            self._count_step()
            if more() and self.should_checkpoint():
                self._left_mid_epoch = True
                return

    def per_rank_batch(self, global_bs: int | None = None) -> int:
        """This rank's batch size of the global batch ``global_bs`` (default ``batch_size``): global // world size,
        else :class:`~slurm_shockwave.wrapper.api.BatchSizeError`, recorded as the job's exit reason."""
        gbs = self.batch_size if global_bs is None else global_bs
        if not gbs:
            raise ValueError("per_rank_batch() needs the global batch size (Training(batch_size=...))")
        return self.reporter.per_rank_batch(gbs, self.rank.world_size)

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
        elif samples is None and self._batch_n is not None:  # batches(): the samples it ran
            n = self.epoch_samples - self._epoch_first_samples
        self.reporter.report_epoch(self.epoch, bs, n, dt, **extra)
        self._reported = True

    def save(self, epochs_done: int) -> None:
        state = self.obj.state_dict()  # on every rank: a sharded model's state_dict() is itself a collective
        if self.per_rank or self.rank.leader:
            meta = {"batch_size": self.batch_size, "world_size": self.rank.world_size, "samples": self.samples}
            if self._counting:
                inner = epochs_done == (self.epoch if self.epoch is not None else -1)  # saved inside that epoch
                meta.update(step=self.step, epoch_step=self.epoch_step if inner else 0)
                meta.update(epoch_samples=self.epoch_samples if inner else 0)
            self.ckpt.save(state, epochs_done=epochs_done, **meta)

    def epochs(self) -> Iterator[int]:
        """The epochs still to run; saves after each, and ends early (after saving) on the signal."""
        epoch = self.start_epoch
        if self._counting:
            self._report_resume()
        try:
            while epoch < self.total_epochs:
                self.epoch, self._reported, self._t0 = epoch, False, time.monotonic()
                self._epoch_first_step, self._steps_n = self.epoch_step, None
                self._epoch_first_samples, self._batch_n = self.epoch_samples, None
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
                self.epoch_step = self.epoch_samples = 0
                if requested or epoch % self.save_every == 0 or epoch == self.total_epochs:
                    self.save(epoch)
                if requested and epoch < self.total_epochs:
                    self.stopped_early = True
                    return
        except GeneratorExit:  # `break` out of the loop; under torch.distributed no new collective: the last answer
            if self._agreed if ranks.distributed() else self.should_checkpoint():  # left mid-epoch on the signal
                if self._reported:
                    self.epoch_step = self.epoch_samples = 0
                self.save(epoch + 1 if self._reported else epoch)
                self.stopped_early = True
            else:
                warn(
                    "the epoch loop was left without a checkpoint request: the work done since the last "
                    "save is not saved, and shockwave-run will not record the job as finished"
                )
            raise
