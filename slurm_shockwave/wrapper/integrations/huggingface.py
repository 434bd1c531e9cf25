"""Hugging Face ``Trainer`` integration: a callback that reports to Shockwave and checkpoints on its request.

The lines a Trainer script adds::

    from slurm_shockwave.wrapper.integrations.huggingface import ShockwaveCallback, last_checkpoint

    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[ShockwaveCallback()])
    trainer.train(resume_from_checkpoint=last_checkpoint(args.output_dir))

:class:`ShockwaveCallback` reports a ``resume`` event when training begins (the optimizer steps already done, 0
fresh) and an ``epoch_end`` for every epoch (global batch size = per-device batch x world size x gradient
accumulation).  At every optimizer step's end the ranks agree (``ranks.agree``: one all_reduce) whether a checkpoint
was requested (the wrapper's request file, its signal, or SIGTERM); if so, every rank sets ``should_save`` and
``should_training_stop`` at the same step, the Trainer writes ``checkpoint-<step>`` its own way, and once every rank
has written its part rank 0 adds ``shockwave.json`` to it (the mark of a complete checkpoint) and reports a
``checkpoint`` event.  ``trainer.train()`` then returns and the program exits 0; ``shockwave-run`` requeues.
On resume the Trainer skips the batches already done (``ignore_data_skip=False``), so no step is redone.

:func:`last_checkpoint` is ``transformers``' ``get_last_checkpoint`` for a Trainer that can be killed while saving:
the newest ``checkpoint-<N>`` that carries the mark (else, for checkpoints written without this callback, the newest
with its ``trainer_state.json`` and without HF's ``checkpoint-is-incomplete.txt``).

SIGTERM and ``TrainingArguments(enable_jit_checkpoint=True)``: HF's just-in-time checkpoint replaces the SIGTERM
handler (without chaining to the one before it), waits 3 s, then saves on each rank on its own (not agreed across
ranks; from ``on_pre_optimizer_step`` it saves step N and then still runs step N+1, which a resume redoes).  When it
is on, this callback takes SIGTERM back at ``on_train_begin``: Shockwave's checkpoint wins, HF's stays idle.

Elastic GPU counts (the controller restarts the job on another count): give the callback the global batch size
(``ShockwaveCallback(batch_size=256)``) and the arguments this run's per-device batch,
``TrainingArguments(per_device_train_batch_size=per_device_batch_size(256, gas), gradient_accumulation_steps=gas)``
(the world size is the launcher's: torchrun, ``accelerate launch``, ``srun``).  The Trainer's resume skips the
steps done x ``gradient_accumulation_steps`` batches of each rank, as many on any count when the global batch is
kept.  Other arguments stop the run at ``on_train_begin``, before its first step; a count that does not divide the
global batch is the job's exit reason.  ``auto_find_batch_size`` changes the batch itself: not for elastic jobs.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import time
from typing import Any

from transformers import TrainerCallback

from slurm_shockwave.wrapper import api, ranks
from slurm_shockwave.wrapper.checkpoint import earlier_job
from slurm_shockwave.wrapper.context import warn
from slurm_shockwave.wrapper.integrations import per_device_batch

PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR
MARK = "shockwave.json"
_NAME = re.compile(rf"^{PREFIX}-(\d+)$")


class ShockwaveCallback(TrainerCallback):
    """Reports to Shockwave and checkpoints on its request (see the module docstring).

    ``reporter``: default the process-wide one (built now, so the signal handlers are in place before training);
    ``every``: agree every N-th optimizer step only (each agreement is an all_reduce and, on GPUs, a sync; the stop
    then waits up to N-1 more steps); ``batch_size``: the global batch size (module docstring), checked at train
    begin; ``configure``: fields added to every ``epoch_end`` (``min_batch_size``, ...)."""

    def __init__(
        self, reporter: api.Reporter | None = None, every: int = 1, batch_size: int | None = None, **configure: Any
    ) -> None:
        self.reporter = reporter or api.get_reporter()
        self.global_batch_size = batch_size
        self.every = max(1, every)
        self.extra = configure
        self.requested = False  # every rank agreed: checkpoint and stop
        self.steps_per_epoch = 1
        self.batch_size = 0
        self._resumed = False
        self._epoch_t0, self._epoch_step0, self._reported = time.monotonic(), 0, -1

    # ------------------------------------------------------------------ training begins
    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if getattr(args, "enable_jit_checkpoint", False):
            _take_sigterm()
        gas = max(1, args.gradient_accumulation_steps)
        if self.global_batch_size:
            if args.auto_find_batch_size:
                raise ValueError("auto_find_batch_size changes the global batch size: not with ShockwaveCallback's")
            devices = max(1, args.world_size) * max(1, args.n_gpu)  # n_gpu > 1: DataParallel in one process
            per_device_batch(self.global_batch_size, devices, gas, args.per_device_train_batch_size, self.reporter)
        loader = kw.get("train_dataloader")
        n = _len(loader)
        if n:
            self.steps_per_epoch = max(1, math.ceil(n / gas))
        else:  # an unsized dataset: the Trainer runs max_steps
            self.steps_per_epoch = max(1, math.ceil(state.max_steps / max(1, state.num_train_epochs)))
        self.batch_size = args.per_device_train_batch_size * max(1, args.world_size) * gas
        self.reporter.configure(
            total_epochs=int(state.num_train_epochs),
            samples_per_epoch=self.steps_per_epoch * self.batch_size,
            **self.extra,
        )
        step = state.global_step
        self._epoch_t0, self._epoch_step0, self._reported = time.monotonic(), step, step // self.steps_per_epoch - 1
        if not self._resumed:
            path = _path(args, step)
            self.reporter.resumed(step, epoch=step // self.steps_per_epoch, path=path if os.path.isdir(path) else None)
            self._resumed = True

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._epoch_t0, self._epoch_step0 = time.monotonic(), state.global_step

    # ------------------------------------------------------------------ the request, agreed at each step's end
    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.requested or state.global_step % self.every:
            return
        if ranks.agree(self.reporter.should_checkpoint()):  # a collective: every rank, every step
            self.requested = True
            if state.global_step < state.max_steps:  # at the last step the run is over: nothing to resume
                control.should_save = True
                control.should_training_stop = True

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        ranks.agree(False)  # a barrier: every rank has written its part (its RNG state)
        if not state.is_world_process_zero:
            return
        path = _path(args, state.global_step)
        try:
            _write_mark(path, state.global_step)
        except OSError as exc:
            warn(f"cannot mark checkpoint {path} complete: {exc}")
            return
        done = state.global_step // self.steps_per_epoch
        self.reporter.checkpointed(path, epoch=done - 1 if done else None, step=state.global_step)

    # ------------------------------------------------------------------ epochs
    def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.requested:
            control.should_save = False  # saved at the step already (save_strategy="epoch" would write it again)
        step = state.global_step
        if step <= self._epoch_step0 or not (step % self.steps_per_epoch == 0 or step >= state.max_steps):
            return  # left mid-epoch
        epoch = (step - 1) // self.steps_per_epoch
        if epoch <= self._reported:
            return
        self._reported = epoch
        self.reporter.report_epoch(
            epoch,
            batch_size=self.batch_size,
            samples=(step - self._epoch_step0) * self.batch_size,
            duration_s=time.monotonic() - self._epoch_t0,
        )


def per_device_batch_size(global_batch_size: int, gradient_accumulation_steps: int = 1) -> int:
    """``per_device_train_batch_size`` on this run's ranks: global // (world size x gradient accumulation)."""
    return per_device_batch(global_batch_size, ranks.detect().world_size, gradient_accumulation_steps)


def last_checkpoint(output_dir: str | os.PathLike[str]) -> str | None:
    """The checkpoint to resume from: the newest complete ``checkpoint-<N>`` of ``output_dir`` (module docstring),
    or None (a fresh start).  On a job's first run, a checkpoint that an earlier job with the same id left is
    ignored."""
    try:
        names = os.listdir(output_dir)
    except OSError:
        return None
    marked, unmarked = [], []
    for name in names:
        m = _NAME.match(name)
        path = os.path.join(output_dir, name)
        if not m or not os.path.isfile(os.path.join(path, "trainer_state.json")):
            continue
        if os.path.exists(os.path.join(path, "checkpoint-is-incomplete.txt")):
            continue
        mark = _read_mark(path)
        if mark is None:
            unmarked.append((int(m.group(1)), path))
        elif not _stale(mark):
            marked.append((int(m.group(1)), path))
    pool = marked or unmarked
    return max(pool)[1] if pool else None


def _path(args: Any, step: int) -> str:
    return os.path.join(args.output_dir, f"{PREFIX}-{step}")


def _len(loader: Any) -> int:
    try:
        return len(loader) if loader is not None else 0
    except TypeError:
        return 0


def _write_mark(path: str, step: int) -> None:
    """``shockwave.json`` (step, job id, time), written atomically: the checkpoint is complete."""
    job = os.environ.get("SHOCKWAVE_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    tmp = os.path.join(path, f".{MARK}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"step": step, "job_id": job, "time": time.time()}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, os.path.join(path, MARK))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_mark(path: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(path, MARK), encoding="utf-8") as fh:
            mark = json.load(fh)
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) else None


def _stale(mark: dict[str, Any]) -> bool:
    """Written by an earlier job with this job's id, before this job's first run started (CheckpointManager's rule)."""
    return earlier_job(mark.get("job_id"), mark.get("time"))


def _take_sigterm() -> None:
    """HF's JIT checkpoint replaced the SIGTERM handler: put Shockwave's back (module docstring)."""
    if signal.SIGTERM not in api._installed:  # the reporter was told not to handle SIGTERM: leave HF's
        return
    try:
        signal.signal(signal.SIGTERM, api._handler_for(signal.SIGTERM, None))
    except ValueError:  # not the main thread
        return
    warn("enable_jit_checkpoint: SIGTERM is handled by ShockwaveCallback (agreed across ranks); HF's JIT stays idle")
