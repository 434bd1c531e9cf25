"""Hugging Face Accelerate integration: a plain ``Accelerator`` loop that reports to Shockwave and checkpoints on
its request.

The lines a loop adds (after ``accelerator.prepare``)::

    from slurm_shockwave.wrapper.integrations.accelerate import ShockwaveAccelerate

    sw = ShockwaveAccelerate(accelerator, total_epochs=epochs)
    start_epoch, step = sw.resume()                # (0, 0) fresh; else load_state of the last checkpoint
    for epoch in range(start_epoch, epochs):
        for batch in sw.batches(loader, epoch):    # skips the batches already done; reports the epoch at its end
            ...                                    # forward, backward, optimizer.step()
            step += 1
            if sw.should_checkpoint():             # agreed by every rank, so all stop at this step
                sw.save(step)                      # checkpoint-<step>, written once, atomically
                sys.exit(0)                        # shockwave-run requeues the job

:meth:`ShockwaveAccelerate.should_checkpoint` turns the local request (the wrapper's request file, its signal, or
SIGTERM) into Accelerate's own cross-rank flag (``set_trigger``; ``check_trigger`` is one all_reduce), so every rank
sees it at the same call.  :meth:`~ShockwaveAccelerate.save` writes ``accelerator.save_state`` into a temporary
folder (every rank writes its part: its RNG state), then the main process adds ``shockwave.json`` (step, epoch and
the batches done in it) and renames the folder to ``checkpoint-<step>``: a checkpoint is there whole or not at all.
The two newest are kept.  :meth:`~ShockwaveAccelerate.resume` loads the newest (``load_state``) and reports
``resume``; :meth:`~ShockwaveAccelerate.batches` then skips the batches the interrupted epoch already did
(``accelerator.skip_first_batches``).  For the same data order after a resume, shuffle with
``DataLoaderConfiguration(use_seedable_sampler=True)`` (order = f(seed, epoch); ``batches`` calls ``set_epoch``).

Elastic GPU counts (the controller restarts the job on another count): give ``ShockwaveAccelerate`` the global batch
size (``batch_size=256``) and build the loader with this run's per-device batch, ``DataLoader(ds,
batch_size=per_device_batch_size(256, accelerator))``, before ``prepare``; the gradient accumulation is kept.  The
batches an interrupted epoch did are then as many on any count, so ``batches`` skips the same samples.  A prepared
LR scheduler steps once per process at each optimizer step (``split_batches=False``): its schedule would follow the
count, so build the ``Accelerator`` with ``step_scheduler_with_optimizer=False`` (one ``step()``, one step).  A
loader of another batch size, or such a scheduler, stops the run at the first ``batches``, before its first step; a
count that does not divide the global batch is the job's exit reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from slurm_shockwave.wrapper import api
from slurm_shockwave.wrapper.checkpoint import earlier_job
from slurm_shockwave.wrapper.context import warn
from slurm_shockwave.wrapper.integrations import per_device_batch

MARK = "shockwave.json"
_NAME = re.compile(r"^checkpoint-(\d+)$")
_TMP = re.compile(r"^\.checkpoint-\d+\.tmp$")


class ShockwaveAccelerate:
    """Wraps an ``Accelerator`` (see the module docstring).  ``checkpoint_dir``: default
    ``$SHOCKWAVE_CHECKPOINT_DIR``, else ``./checkpoints/accelerate``; ``every``: agree at every N-th
    :meth:`should_checkpoint` only (each agreement is an all_reduce and, on GPUs, a sync); ``batch_size``: the
    global batch size per optimizer step (default: the loader's ``total_batch_size`` x gradient accumulation);
    ``configure``: fields added to every ``epoch_end`` (``min_batch_size``, ...)."""

    def __init__(
        self,
        accelerator: Any,
        total_epochs: int | None = None,
        *,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        batch_size: int | None = None,
        keep: int = 2,
        every: int = 1,
        reporter: api.Reporter | None = None,
        **configure: Any,
    ) -> None:
        if getattr(accelerator.project_configuration, "automatic_checkpoint_naming", False):
            raise ValueError("ShockwaveAccelerate names its checkpoints: turn automatic_checkpoint_naming off")
        self.acc = accelerator
        self.reporter = reporter or api.get_reporter()
        default = os.environ.get("SHOCKWAVE_CHECKPOINT_DIR") or os.path.join("checkpoints", "accelerate")
        self.dir = Path(checkpoint_dir or default)
        self.batch_size, self.keep = batch_size, max(1, keep)
        self.reporter.configure(total_epochs=total_epochs, **configure)
        self.requested, self.every, self._calls = False, max(1, every), 0
        self.epoch, self.batch, self.epoch_len = 0, 0, 0  # where the loop is: epoch, batches done in it
        self._skip: tuple[int, int] = (0, 0)  # (epoch, batches) to skip on a resume

    # ------------------------------------------------------------------ resume
    def resume(self) -> tuple[int, int]:
        """Load the newest checkpoint (model, optimizer, scheduler, RNG: ``load_state``) and report ``resume``;
        returns (epoch to continue, optimizer steps done): (0, 0) without a checkpoint.  Call it once, on every
        rank, after ``accelerator.prepare``."""
        path, mark = self.last_checkpoint()
        if path is None:
            self.reporter.resumed(0, epoch=0)
            return 0, 0
        self.acc.load_state(str(path))
        step, epoch, batch = int(mark["step"]), int(mark["epoch"]), int(mark["batch"])
        self._skip = (epoch, batch)
        self.reporter.resumed(step, epoch=epoch, path=path)
        return epoch, step

    def last_checkpoint(self) -> tuple[Path | None, dict[str, Any]]:
        """The newest complete checkpoint and its ``shockwave.json`` ((None, {}) if there is none).  On a job's first
        run, one that an earlier job with the same id left is ignored."""
        found = []
        with contextlib.suppress(OSError):
            for p in self.dir.iterdir():
                m = _NAME.match(p.name)
                mark = _read_mark(p) if m else None
                if m and mark is not None and not _stale(mark):
                    found.append((int(m.group(1)), p, mark))
        if not found:
            return None, {}
        _, path, mark = max(found, key=lambda f: f[0])
        return path, mark

    # ------------------------------------------------------------------ the loop
    def batches(self, loader: Any, epoch: int) -> Iterator[Any]:
        """The batches of ``epoch`` (``set_epoch`` first; on the resumed epoch without those already done); when
        they run out, the epoch is reported (``epoch_end``, rank 0).  Left early (``break``), it is not."""
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        self.epoch, self.epoch_len = epoch, len(loader)
        skip = self._skip[1] if self._skip[0] == epoch else 0
        self._skip = (-1, 0)
        self.batch = skip
        it: Iterable[Any] = self.acc.skip_first_batches(loader, skip) if skip else loader
        per_batch = getattr(loader, "total_batch_size", None) or getattr(loader, "batch_size", None) or 0
        gas = max(1, int(getattr(self.acc, "gradient_accumulation_steps", 1) or 1))
        if self.batch_size and per_batch:
            per_device_batch(self.batch_size, _devices(self.acc), gas, per_batch // _devices(self.acc), self.reporter)
            if self.acc.step_scheduler_with_optimizer and self.acc._schedulers and not self.acc.split_batches:
                raise ValueError(
                    "a prepared LR scheduler steps once per process at each optimizer step, so its schedule would "
                    "change with the GPU count: build the Accelerator with step_scheduler_with_optimizer=False"
                )
        bs = self.batch_size or per_batch * gas
        self.reporter.configure(samples_per_epoch=self.epoch_len * per_batch or None)
        t0 = time.monotonic()
        for b in it:
            self.batch += 1  # counted before the loop body runs: a save in it includes this batch
            yield b
        self.reporter.report_epoch(
            epoch, batch_size=bs, samples=(self.batch - skip) * per_batch, duration_s=time.monotonic() - t0
        )

    def should_checkpoint(self) -> bool:
        """True on every rank once any rank saw the checkpoint request (a collective: call it on every rank, at the
        same points of the loop; once true it stays true without communicating).  With ``every=N`` the ranks agree
        at every N-th call only (the request waits up to N-1 more steps); one process never communicates."""
        if self.requested:
            return True
        self._calls += 1
        if self.acc.num_processes == 1:
            self.requested = self.reporter.should_checkpoint()
            return self.requested
        if self._calls % self.every:
            return False
        if self.reporter.should_checkpoint():
            self.acc.set_trigger()
        self.requested = bool(self.acc.check_trigger())
        return self.requested

    # ------------------------------------------------------------------ save
    def save(self, step: int, epoch: int | None = None, batch: int | None = None) -> Path:
        """Write ``checkpoint-<step>`` (every rank calls it): ``step`` optimizer steps done, in ``epoch`` after
        ``batch`` of its batches (default: where :meth:`batches` is).  Records ``checkpoint`` (rank 0)."""
        epoch = self.epoch if epoch is None else epoch
        batch = self.batch if batch is None else batch
        if batch and self.epoch_len and batch >= self.epoch_len:  # the epoch is done: resume at the next one
            epoch, batch = epoch + 1, 0
        final, tmp = self.dir / f"checkpoint-{step}", self.dir / f".checkpoint-{step}.tmp"
        main = self.acc.is_main_process
        self.acc.wait_for_everyone()
        if main:
            shutil.rmtree(tmp, ignore_errors=True)  # left by a run killed while saving
            tmp.mkdir(parents=True)
        self.acc.wait_for_everyone()
        self.acc.save_state(str(tmp))
        self.acc.wait_for_everyone()  # every rank's part is written
        if main:
            _write_json(tmp / MARK, {"step": step, "epoch": epoch, "batch": batch, **_job_and_time()})
            shutil.rmtree(final, ignore_errors=True)  # a rename does not replace a folder
            os.replace(tmp, final)
            _fsync_dir(self.dir)
            self._prune(step)
            self.reporter.checkpointed(final, epoch=epoch - 1 if epoch else None, step=step)
        self.acc.wait_for_everyone()
        return final

    def _prune(self, newest: int) -> None:
        """Keep the ``keep`` newest checkpoints (folders without the mark are not ours: left alone); drop the
        temporary folders of saves that were killed."""
        names = list(self.dir.iterdir())
        ours = sorted((int(m.group(1)), p) for p in names if (m := _NAME.match(p.name)) and (p / MARK).exists())
        for p in [p for n, p in ours[: -self.keep] if n != newest] + [p for p in names if _TMP.match(p.name)]:
            shutil.rmtree(p, ignore_errors=True)


def per_device_batch_size(global_batch_size: int, accelerator: Any) -> int:
    """The loader's batch size: global // (processes x gradient accumulation); global // accumulation when the
    accelerator splits each batch itself (``split_batches=True``)."""
    return per_device_batch(global_batch_size, _devices(accelerator), accelerator.gradient_accumulation_steps)


def _devices(accelerator: Any) -> int:
    """The processes a loader batch is for: 1 when the accelerator splits each batch over them itself."""
    return 1 if getattr(accelerator, "split_batches", False) else accelerator.num_processes


def _job_and_time() -> dict[str, Any]:
    return {"job_id": os.environ.get("SHOCKWAVE_JOB_ID") or os.environ.get("SLURM_JOB_ID"), "time": time.time()}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_mark(path: Path) -> dict[str, Any] | None:
    try:
        mark = json.loads((path / MARK).read_text(encoding="utf-8"))
        if not (isinstance(mark, dict) and all(isinstance(mark.get(k), int) for k in ("step", "epoch", "batch"))):
            raise ValueError("no step, epoch and batch")
    except FileNotFoundError:  # not complete: killed before the rename (never seen there) or not ours
        return None
    except (OSError, ValueError) as exc:
        warn(f"ignoring checkpoint {path}: unreadable {MARK} ({exc})")
        return None
    return mark


def _stale(mark: dict[str, Any]) -> bool:
    """Written by an earlier job with this job's id, before this job's first run started (CheckpointManager's rule)."""
    return earlier_job(mark.get("job_id"), mark.get("time"))
